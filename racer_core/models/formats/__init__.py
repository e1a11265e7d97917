"""Weight formats the lean forward multiplies with: packed float32, float16."""
