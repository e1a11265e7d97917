"""Verifying a draft tree: its mask and positions, the cache, sampling, near ties."""
