"""RACER speculative decoding engine.

Importing this package is cheap: torch and transformers load only when a model
is loaded (racer_core.engine.engine), so front ends can import the event types freely.
It sets how OpenMP's workers wait (common/openmp_env.py) first: torch reads that once, when it loads.
"""

from racer_core.common.openmp_env import set_wait_policy

set_wait_policy()

__version__ = "0.1.0"
