"""RACER speculative decoding engine.

Importing this package is cheap: torch and transformers load only when a model
is loaded (racer_core.engine.engine), so front ends can import the event types freely.
"""

__version__ = "0.1.0"
