"""The analytical performance, memory and cost model (pure elementwise functions, one concept per module).

``evaluate`` is the vectorized entry point and ``evaluate_scalar`` the same code on plain Python floats
for one configuration (``_ops`` dispatches each operation to numpy or ``math``); ``flops``, ``compute``,
``communication``, ``memory`` and ``pipeline`` hold the physics; ``profile`` the efficiency constants;
``feasibility`` the rules.
"""
from .columns import ATTENTION_CODES, INPUT_COLUMNS, PRECISION_CODES, RECOMPUTE_CODES, broadcast_columns, scalar_columns
from .evaluate import BREAKDOWN_KEYS, MEMORY_KEYS, evaluate, evaluate_scalar
from .feasibility import RULES, check_scalar, valid_mask
from .profile import DEFAULT_PROFILE, Profile

__all__ = [
    "ATTENTION_CODES", "INPUT_COLUMNS", "PRECISION_CODES", "RECOMPUTE_CODES", "broadcast_columns", "scalar_columns",
    "BREAKDOWN_KEYS", "MEMORY_KEYS", "evaluate", "evaluate_scalar", "RULES", "check_scalar", "valid_mask",
    "DEFAULT_PROFILE", "Profile",
]
