"""Loading a model, conversations, and the decoding loop that drafts and verifies."""
