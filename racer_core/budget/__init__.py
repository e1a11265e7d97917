"""How many nodes to verify: the cost curve, the tree policy, the draft gate, the CPU class."""
