"""A model's checkpoint, whatever its source: a folder, a GGUF file, a hub
id once downloaded, the embedded model (one module per kind), and the one
reader of a folder's own files (files.py)."""
