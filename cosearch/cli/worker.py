"""Scale-out commands.

* ``cosearch worker SPACE.yaml --study NAME [--storage URL]``: one more worker on a study, from
  any machine that reaches the storage; it works until the study holds the number of trials its
  ``cosearch run`` asked for (stored in the study), then exits.
* ``cosearch run ... --workers N``: N local worker processes on one study (any storage).
* ``cosearch run ... --sampler exhaustive --dask ADDRESS|local:N``: the enumeration split over a
  dask cluster (``--workers N`` with ``exhaustive`` means ``--dask local:N``).

``--workers`` and ``--dask`` are added to the ``run`` parser that :mod:`cosearch.cli.study`
defines (this module must come after it in ``COMMANDS``); without them ``run`` is unchanged.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from ..errors import CosearchError

logger = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="join a study as one more worker (any machine that reaches its storage)",
                       description="Join study NAME and add trials until it holds the number of trials its "
                                   "`cosearch run --trials N` asked for. Start as many as you like, anywhere.")
    p.add_argument("space", help="search space YAML file (the same the study was started with)")
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--storage", help="storage URL shared by all workers, e.g. postgresql://USER:PASS@HOST/DB "
                                     "(default: ./cosearch_studies.journal, this machine only)")
    p.add_argument("--sampler", help="search method (default: the study's)")
    p.add_argument("--trials", type=int, help="set the study's total trial target (default: the stored one)")
    p.add_argument("--seed", type=int, help="sampler seed (default: random, so workers never repeat each other)")
    p.add_argument("--batch-size", type=int, help="trials evaluated per model call")
    p.add_argument("--profile", help="efficiency profile YAML (the one the study was started with)")
    p.add_argument("--worker-index", type=int, help=argparse.SUPPRESS)  # set by `run --workers`
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=_worker_command)
    run = sub.choices.get("run")
    if run is not None:
        _extend_run(run)


# ------------------------------------------------------------------------------------ worker
def _storage_value(storage: str | None) -> str | None:
    """The --storage value as every process sees it: journal paths made absolute (the file
    :func:`~cosearch.storages.storage_file` names). A value the storage layer refuses (empty, an
    unknown ``scheme://``) raises its one-line error here, before anything is created."""
    from ..storages import storage_file
    from ..storages._storage import check_storage, storage_kind

    url = check_storage(storage)
    if storage_kind(url) != "journal":
        return url
    return str(storage_file(url))


def open_storage(storage: str | None, attempts: int = 4) -> Any:
    """:func:`resolve_storage`, retried when several workers create a fresh database's tables at
    once (PostgreSQL then reports a duplicate type or table to all but one of them)."""
    import random

    from ..storages import resolve_storage

    for attempt in range(attempts):
        try:
            return resolve_storage(storage)
        except CosearchError as err:
            text = str(err)
            racy = any(s in text for s in ("UniqueViolation", "already exists", "DuplicateTable", "Duplicate",
                                            "UNIQUE constraint failed", "database is locked"))
            if not racy or attempt == attempts - 1:
                raise
            time.sleep(0.2 + random.random() * (attempt + 1))
    raise AssertionError("unreachable")


def _profile(path: str | None) -> Any:
    """The profile of ``--profile PATH`` (default: the shipped one)."""
    from ..model.profile import DEFAULT_PROFILE
    from .estimate import load_profile

    return load_profile(path) or DEFAULT_PROFILE


def open_for_workers(space: Any, study_name: str, st: Any, sampler: str, n_trials: int | None, profile: Any) -> Any:
    """Open (or create) a sampled study for several workers on the opened storage ``st`` and store its trial target
    (``n_trials``, checked by the caller; None keeps the stored one). ``_open_study`` copes with workers creating it
    at once."""
    from ..samplers import OPTUNA_SAMPLERS, resolve_method
    from ..scaleout import get_target, set_target
    from ..study import _as_space, _open_study

    space = _as_space(space)
    space.require_knobs("search")  # as run_study checks it, but before the study is created (it was left empty)
    method = resolve_method(sampler, space)
    if method not in OPTUNA_SAMPLERS:
        raise CosearchError("--sampler", f"{method} runs in one process; several workers need an optuna sampler "
                            f"({', '.join(OPTUNA_SAMPLERS)}), or exhaustive with --dask")
    study, _ = _open_study(space, study_name, st, method, "sampled", profile)
    if n_trials is not None:
        set_target(study, n_trials)
    elif get_target(study) is None:
        raise CosearchError("--trials", f"study {study_name!r} has no trial target yet: pass --trials N")
    return study


def work(space: Any, study_name: str, storage: str | None = None, sampler: str | None = None,
         n_trials: int | None = None, seed: int | None = None, batch_size: int | None = None,
         worker_index: int | None = None, callback: Callable[[dict], None] | None = None, profile: Any = None) -> Any:
    """Be one worker of ``study_name``: run trials until the study's target is reached.

    Returns :class:`cosearch.study.StudyResult` of this worker's share."""
    from .._study_store import _has_study, stored_method
    from ..scaleout import TrialBudget, get_target, study_lock, worker_seed
    from ..study import _as_space, check_seed, run_study

    check_seed(seed)
    if n_trials is not None and n_trials < 1:  # before the study is created: it was left behind, empty
        raise CosearchError("--trials", f"must be a positive integer (got {n_trials})")
    batch_size = budget_batch(batch_size)
    space = _as_space(space)
    st = open_storage(storage)
    exists = _has_study(st, study_name)
    if not exists and n_trials is None:
        raise CosearchError("--study", f"no study named {study_name!r} in that storage; start it with "
                            f"`cosearch run SPACE --study {study_name} --trials N` or pass --trials N")
    method = sampler or stored_method(st, study_name) or "tpe"
    profile = profile or _profile(None)
    study = open_for_workers(space, study_name, st, method, n_trials, profile)
    target = get_target(study)
    budget = TrialBudget(study, target, study_lock(storage, study_name))
    try:
        res = run_study(space, study_name, st, sampler=method, n_trials=target,
                        seed=worker_seed(seed, worker_index), batch_size=batch_size,
                        callback=callback, budget=budget, profile=profile)
        res.n_new = budget.granted  # this worker's trials (run_study counts every worker's)
        return res
    finally:
        budget.close()


def budget_batch(batch_size: int | None) -> int | None:
    if batch_size is not None and batch_size < 1:
        raise CosearchError("--batch-size", f"must be a positive integer (got {batch_size})")
    return batch_size


def _worker_command(args: argparse.Namespace) -> int:
    res = work(args.space, args.study, _storage_value(args.storage), args.sampler, args.trials, args.seed,
               args.batch_size, args.worker_index, profile=_profile(args.profile))
    if not args.quiet:
        print(f"worker {os.getpid()}: added {res.n_new} trials in {res.elapsed_s:.1f} s; "
              f"study {args.study!r} holds {res.n_trials} trials ({res.n_feasible} feasible)")
    return 0


# ------------------------------------------------------------------------------------ run
def _extend_run(run: argparse.ArgumentParser) -> None:
    run.add_argument("--workers", type=int, default=1,
                     help="local worker processes on this study (default 1); with exhaustive: --dask local:N")
    run.add_argument("--dask", metavar="ADDRESS",
                     help="exhaustive only: split the enumeration over a dask cluster "
                          "(tcp://HOST:8786, or local:N for N local worker processes)")
    single = run.get_default("func")

    def dispatch(args: argparse.Namespace) -> int:
        return _run_scaled(args, single)

    run.set_defaults(func=dispatch)


def _run_scaled(args: argparse.Namespace, single: Callable[..., int]) -> int:
    """`run` with --workers or --dask; the storage is opened once (only when they are given) and passed on."""
    workers = getattr(args, "workers", 1)
    workers = 1 if workers is None else int(workers)
    address = getattr(args, "dask", None)
    cores = usable_cores()
    most = MAX_WORKERS_PER_CORE * cores
    if not 1 <= workers <= most:
        raise CosearchError("--workers", f"must be 1 to {most} ({MAX_WORKERS_PER_CORE} per usable CPU core; got {workers})")
    from ..study import check_seed
    from .study import check_run_args

    check_seed(getattr(args, "seed", None))  # before any worker starts
    method = check_run_args(args)  # --trials 0 ran 1000 trials in the workers before `run` refused it
    st = None
    if method == "auto" and (address or workers > 1):  # one process: run_command resolves it the same way
        from ..search.space import load_space
        from ..study import resume_method

        # an existing study continues with its own method (_study_store.resume_method)
        st = open_storage(_storage_value(args.storage))
        method = resume_method(method, load_space(args.space), args.study, st)
        args.sampler = method
    if address and method != "exhaustive":
        raise CosearchError("--dask", "distributes the exhaustive enumeration: add --sampler exhaustive "
                            "(sampled studies scale with --workers / cosearch worker)")
    if method == "exhaustive" and (address or workers > 1):
        return _run_dask(args, single, address or f"local:{workers}", st)
    if workers == 1:
        return single(args)
    if workers > cores:
        print(f"warning: --workers {workers} exceeds the {cores} usable CPU core(s); workers will compete for "
              f"them (often slower than --workers {cores})", file=sys.stderr)
    return _run_local_workers(args, single, workers, method, st)


#: Local worker processes per usable core at most: beyond a few, more only compete for the cores.
MAX_WORKERS_PER_CORE = 4


def usable_cores() -> int:
    """CPU cores this process may run on (affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _run_dask(args: argparse.Namespace, single: Callable[..., int], address: str, st: Any = None) -> int:
    """Enumerate on a dask cluster into the study, then let `run` (which finds the enumeration
    complete) print the front as usual. ``st``: the storage when the caller opened it already."""
    from ..distributed import dask_sweep, parse_dask_address
    from ..study import run_study

    parse_dask_address(address)  # one-line error before anything starts
    tty = sys.stderr.isatty()

    def runner(space: Any, progress: Callable[[int, int], None] | None = None, profile: Any = None) -> Any:
        total = int(space.size)

        def tick(done: int, n_tasks: int, points: int) -> None:
            if progress is not None:
                progress(points, total)
            if tty:
                print(f"\rdask: {done}/{n_tasks} tasks, {points:,}/{total:,} points", end="", file=sys.stderr,
                      flush=True)

        res = dask_sweep(space, address, progress=tick, profile=profile)
        if tty:
            print(file=sys.stderr)
        d = res.summary()["distributed"]
        print(f"dask sweep: {res.counts['points']:,} points on {d['workers']} workers in {res.seconds:.1f} s "
              f"({d['setup_s']:.1f} s start-up), front {res.index.size}", file=sys.stderr)
        return res.to_exhaustive(space)

    st = st if st is not None else open_storage(_storage_value(getattr(args, "storage", None)))
    run_study(args.space, args.study, st, sampler="exhaustive", profile=_profile(getattr(args, "profile", None)),
              exhaustive=runner)
    return single(args, storage=st)


def _run_local_workers(args: argparse.Namespace, single: Callable[..., int], workers: int, method: str,
                       st: Any = None) -> int:
    """Start ``workers`` `cosearch worker` processes on the study, wait for them, then let `run` print the front.
    ``st``: the storage when the caller opened it already."""
    from ..scaleout import TrialBudget, spawn_workers, study_lock, wait_workers

    storage = _storage_value(getattr(args, "storage", None))
    st = st if st is not None else open_storage(storage)
    n_trials = int(getattr(args, "trials", None) or 1000)
    study = open_for_workers(args.space, args.study, st, method, n_trials, _profile(getattr(args, "profile", None)))
    seed = getattr(args, "seed", 0)
    argv_common = [str(Path(args.space).resolve()), "--study", args.study, "--sampler", method, "--quiet"]
    if storage is not None:
        argv_common += ["--storage", storage]
    if getattr(args, "batch_size", None):
        argv_common += ["--batch-size", str(args.batch_size)]
    if getattr(args, "profile", None):
        argv_common += ["--profile", str(Path(args.profile).resolve())]
    argvs = [["worker", *argv_common, "--seed", str(0 if seed is None else seed), "--worker-index", str(i)]
             for i in range(workers)]
    counter = TrialBudget(study, n_trials, study_lock(storage, args.study), heartbeat=False)
    before = counter.n_done()
    t0 = time.perf_counter()
    procs = spawn_workers(argvs)
    show = _progress(counter, n_trials, workers)
    try:
        codes = wait_workers(procs, on_tick=show)
        show(final=True)
        done = counter.n_done()
    finally:
        counter.close()
    elapsed = time.perf_counter() - t0
    print(f"{workers} workers: study {args.study!r} holds {done} of {n_trials} trials "
          f"({elapsed:.1f} s, {done / elapsed:.1f} trials/s overall)", file=sys.stderr)
    args.workers_run = {"workers": workers, "new": max(0, done - before), "elapsed_s": elapsed}
    bad = [c for c in codes if c != 0]
    if bad:
        print(f"warning: {len(bad)} worker(s) exited with codes {bad}", file=sys.stderr)
        if done < n_trials:
            return 1
    # the study is complete: the single-process command resumes nothing and prints the front
    return single(args, storage=st)


def _progress(counter: Any, total: int, workers: int) -> Callable[..., None]:
    """A progress line on stderr (only when it is a terminal)."""
    tty = sys.stderr.isatty()
    state = {"last": 0.0}

    def show(final: bool = False) -> None:
        if not tty:
            return
        now = time.monotonic()
        if not final and now - state["last"] < 0.5:
            return
        state["last"] = now
        try:
            c = counter.counts()
        except Exception:  # noqa: BLE001 - display only
            return
        print(f"\r{workers} workers: {c['done']}/{total} trials, {c['running']} running   ",
              end="\n" if final else "", file=sys.stderr, flush=True)

    return show
