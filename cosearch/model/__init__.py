"""The analytical performance, memory and cost model (pure numpy functions, one concept per module).

``evaluate`` is the vectorized entry point; ``flops``, ``compute``, ``communication``, ``memory``
and ``pipeline`` hold the physics; ``profile`` the efficiency constants; ``feasibility`` the rules.
"""
from .columns import ATTENTION_CODES, INPUT_COLUMNS, PRECISION_CODES, RECOMPUTE_CODES, broadcast_columns
from .evaluate import BREAKDOWN_KEYS, MEMORY_KEYS, evaluate
from .feasibility import RULES, check_scalar, valid_mask
from .profile import DEFAULT_PROFILE, Profile

__all__ = [
    "ATTENTION_CODES", "INPUT_COLUMNS", "PRECISION_CODES", "RECOMPUTE_CODES", "broadcast_columns",
    "BREAKDOWN_KEYS", "MEMORY_KEYS", "evaluate", "RULES", "check_scalar", "valid_mask",
    "DEFAULT_PROFILE", "Profile",
]
