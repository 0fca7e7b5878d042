"""Study storage for cosearch: resolve ``--storage`` values, crash-safe journal, fail trials of dead workers.

``rdb_batch`` (batched RDB writes) and ``_compat`` (tested optuna range) live here too.
"""
from ._storage import (
    DEFAULT_JOURNAL,
    OWNER_ATTR,
    JournalBackend,
    JournalLock,
    fail_stale_trials,
    mask_url,
    normalize_url,
    owner_is_alive,
    owner_record,
    resolve_storage,
    tag_trial_owner,
    trial_owner,
)

__all__ = [
    "DEFAULT_JOURNAL",
    "OWNER_ATTR",
    "JournalBackend",
    "JournalLock",
    "fail_stale_trials",
    "mask_url",
    "normalize_url",
    "owner_is_alive",
    "owner_record",
    "resolve_storage",
    "tag_trial_owner",
    "trial_owner",
]
