"""Weight formats the lean forward multiplies with, one `Linear` class each (linear.py): plain, packed, float16, a GGUF's blocks."""
