"""Many workers on one study: local spawning, sampler seeds, and (re-exported) the storage side.

The storage side of scale-out (the exact trial budget counted in the storage, the cross-process
study lock, heartbeats of running trials) lives in :mod:`cosearch.storages._scaleout` and is
re-exported here, so ``from cosearch.scaleout import TrialBudget, study_lock`` keeps working.
This module only starts and waits for local worker processes.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from .storages._scaleout import (  # noqa: F401 - re-exported
    DONE_STATES, METRICS_ATTR, TARGET_ATTR, SharedBudget, TrialBudget, get_target, set_target, storage_kind, study_lock,
)

__all__ = ["TARGET_ATTR", "SharedBudget", "TrialBudget", "get_target", "set_target", "study_lock", "storage_kind",
           "spawn_workers", "wait_workers", "worker_seed"]


# ------------------------------------------------------------------------------------ processes
def worker_seed(seed: int | None, index: int | None) -> int | None:
    """Distinct, reproducible sampler seeds for local workers (``seed`` + 1000 * index).

    ``index`` None (a worker joining from elsewhere) with no seed gives None: a random seed,
    so two stray workers never replay the same sequence of points."""
    if index is None:
        return seed
    return ((0 if seed is None else int(seed)) + 1000 * int(index)) % 2 ** 32  # samplers take 0 .. 2**32 - 1


def spawn_workers(argvs: Sequence[Sequence[str]], *, env: dict[str, str] | None = None,
                  cwd: str | Path | None = None, quiet: bool = True) -> list[subprocess.Popen]:
    """Start one ``python -m cosearch ...`` process per argv (e.g. ``["worker", ...]``)."""
    procs = []
    for argv in argvs:
        procs.append(subprocess.Popen([sys.executable, "-m", "cosearch", *argv], cwd=cwd,
                                      env={**os.environ, **(env or {})},
                                      stdout=subprocess.DEVNULL if quiet else None))
    return procs


def wait_workers(procs: Sequence[subprocess.Popen], *, on_tick: Any = None, tick_s: float = 0.5) -> list[int]:
    """Wait for all workers; Ctrl-C sends SIGINT to each and waits for them to stop cleanly.

    ``on_tick()`` is called every ``tick_s`` while they run (progress display)."""
    try:
        while any(p.poll() is None for p in procs):
            if on_tick is not None:
                on_tick()
            time.sleep(tick_s)
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        raise
    if on_tick is not None:
        on_tick()
    return [p.returncode for p in procs]
