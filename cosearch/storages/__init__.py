"""Study storage for cosearch: resolve ``--storage`` values, and fail trials of dead workers."""
from ._storage import (
    DEFAULT_JOURNAL,
    OWNER_ATTR,
    JournalLock,
    fail_stale_trials,
    owner_is_alive,
    owner_record,
    resolve_storage,
    tag_trial_owner,
    trial_owner,
)

__all__ = [
    "DEFAULT_JOURNAL",
    "OWNER_ATTR",
    "JournalLock",
    "fail_stale_trials",
    "owner_is_alive",
    "owner_record",
    "resolve_storage",
    "tag_trial_owner",
    "trial_owner",
]
