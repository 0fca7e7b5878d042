"""Study storage for cosearch: everything that opens, writes or guards a storage.

``_storage`` resolves ``--storage`` values, ``_journal`` is the crash-safe journal, ``_owners``
fails trials of dead workers, ``_writer`` writes batches of trials (:class:`TrialWriter`: journal
fast path, ``rdb_batch`` for RDB, optuna's public API otherwise), ``_scaleout`` holds the study
lock, shared trial budget and heartbeats, ``_compat`` the tested optuna range.
"""
from ._owners import ABANDONED_ATTR, failed_with_result
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
    storage_file,
    tag_trial_owner,
    trial_owner,
)
from ._scaleout import TrialBudget, study_lock
from ._writer import TrialRecord, TrialWriter

__all__ = [
    "ABANDONED_ATTR",
    "DEFAULT_JOURNAL",
    "OWNER_ATTR",
    "TrialBudget",
    "TrialRecord",
    "TrialWriter",
    "JournalBackend",
    "JournalLock",
    "fail_stale_trials",
    "failed_with_result",
    "mask_url",
    "normalize_url",
    "storage_file",
    "owner_is_alive",
    "owner_record",
    "resolve_storage",
    "study_lock",
    "tag_trial_owner",
    "trial_owner",
]
