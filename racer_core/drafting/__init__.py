"""Drafting methods: the automaton, the chat corpus, EAGLE-3's head and the peers."""
