"""Trial ownership: which process runs a trial, whether it still lives, and failing orphaned trials.

Split from :mod:`cosearch.storages._storage`; see its module docstring for why trials carry owners.
"""
from __future__ import annotations

import logging
import os
import socket
import time
import uuid
import warnings
from typing import Any, Callable, Mapping

import optuna
from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.trial import FrozenTrial, Trial, TrialState

logger = logging.getLogger("cosearch.storages._storage")

#: System attribute holding a trial's owner record.
OWNER_ATTR = "cosearch:owner"
#: System attribute set (True) on a RUNNING trial cosearch marks FAIL because its batch was abandoned or its owner
#: died: a write cut short may have stored its metrics but not its state, and such a trial must be redone, not
#: counted as evaluated (:func:`cosearch._study_store.counts_as_trial`).
ABANDONED_ATTR = "cosearch:abandoned"

OwnerAlive = Callable[[Mapping[str, Any]], "bool | None"]


def failed_with_result(t: FrozenTrial) -> bool:
    """A FAIL trial cosearch evaluated (its metrics stored; an objective without a finite value), not one failed as
    abandoned (:data:`ABANDONED_ATTR`) whose metrics a cut write may have left behind: it counts as a trial."""
    return t.state == TrialState.FAIL and "metrics" in t.user_attrs and not t.system_attrs.get(ABANDONED_ATTR)

_TOKEN = uuid.uuid4().hex


def _new_token() -> None:
    global _TOKEN
    _TOKEN = uuid.uuid4().hex


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_token)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _host_identity() -> dict[str, str]:
    """Hostname, kernel boot id and pid namespace: equal on all three means pids are comparable."""
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = ""
    return {"host": socket.gethostname(), "boot_id": _read("/proc/sys/kernel/random/boot_id"),
            "pidns": pidns}


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) from /proc/<pid>/stat, if readable."""
    raw = _read(f"/proc/{pid}/stat")
    if not raw or ")" not in raw:
        return None
    fields = raw.rsplit(")", 1)[1].split()  # fields[0] is field 3 (state); starttime is field 22
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def owner_record() -> dict[str, Any]:
    """The record :func:`tag_trial_owner` stores for the calling process."""
    stat = _proc_stat(os.getpid())
    return {**_host_identity(), "pid": os.getpid(), "start": stat[1] if stat else None,
            "token": _TOKEN, "tagged_at": time.time()}


def tag_trial_owner(trial: Trial) -> dict[str, Any]:
    """Record the calling process as the owner of ``trial`` (call right after ``study.ask()``).

    Stored as system attribute ``cosearch:owner`` so it stays out of ``user_attrs`` and
    ``trials_dataframe``. Returns the record.
    """
    record = owner_record()
    trial.storage.set_trial_system_attr(trial._trial_id, OWNER_ATTR, record)
    return record


def trial_owner(trial: FrozenTrial) -> dict[str, Any] | None:
    """The owner record of a (frozen) trial, or ``None`` if it was never tagged."""
    rec = trial.system_attrs.get(OWNER_ATTR)
    return rec if isinstance(rec, dict) else None


def owner_is_alive(owner: Mapping[str, Any]) -> bool | None:
    """True: owner process runs; False: provably gone; None: cannot tell (other host/namespace).

    Gone means: no such pid, a zombie, or a pid reused by a process with another start time.
    """
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    if pid == os.getpid() and owner.get("token") == _TOKEN:
        return True
    here = _host_identity()
    if any(owner.get(key) != here[key] for key in ("host", "boot_id", "pidns")):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    stat = _proc_stat(pid)
    if stat is None:
        return True  # alive per kill(0); no /proc to say more
    state, start = stat
    if state in ("Z", "X"):
        return False
    recorded = owner.get("start")
    if isinstance(recorded, int) and recorded != start:
        return False
    return True


def fail_stale_trials(study: optuna.Study, *, owner_alive: OwnerAlive | None = None) -> int:
    """Mark RUNNING trials whose owner process is gone as FAIL; return how many were failed.

    ``owner_alive(record)`` may decide for trials this host cannot judge (e.g. by asking a
    cluster scheduler): True/False decide, None falls back to :func:`owner_is_alive`. Untagged
    trials and trials whose owner's state is unknown are never failed. For RDB storages with a
    heartbeat, optuna's own heartbeat-based cleanup runs too (its failures are counted).
    """
    storage = study._storage
    failed = 0
    gone: dict[tuple[Any, Any], int] = {}  # (host, pid) -> trials failed: one warning line per dead worker
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = trial_owner(trial)
        if owner is None:
            continue
        verdict = owner_alive(owner) if owner_alive is not None else None
        if verdict is None:
            verdict = owner_is_alive(owner)
        if verdict is not False:
            continue
        try:
            storage.set_trial_system_attr(trial._trial_id, ABANDONED_ATTR, True)
            storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
        except UpdateFinishedTrialError:
            continue  # finished or failed meanwhile by someone else
        failed += 1
        key = (owner.get("host"), owner.get("pid"))
        gone[key] = gone.get(key, 0) + 1
        logger.debug("trial %d of study %r: its worker (host %s, pid %s) is gone: marked FAIL", trial.number,
                     study.study_name, *key)
    for (host, pid), n in gone.items():
        logger.warning("%d trial(s) of study %r were RUNNING but their worker (host %s, pid %s) is gone: marked FAIL "
                       "(they are redone)", n, study.study_name, host, pid)
    failed += _fail_heartbeat_stale(study)
    return failed


def _fail_heartbeat_stale(study: optuna.Study) -> int:
    from optuna.storages._heartbeat import is_heartbeat_enabled

    if not is_heartbeat_enabled(study._storage):
        return 0
    before = {t._trial_id for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    after = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    n = sum(1 for t in after if t._trial_id in before)
    if n:
        logger.warning("%d trial(s) of study %r failed by the RDB heartbeat check", n, study.study_name)
    return n
