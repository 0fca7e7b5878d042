"""Exhaustive sweeps split over a dask.distributed cluster, with exact front merging.

The finite space is a Cartesian product whose points have flat (mixed-radix) positions
``0 .. size-1`` (:meth:`SearchSpace.index_grid`). A task is a flat range ``(start, stop)``: the
worker rebuilds the assignments of that range itself, evaluates them through the vectorized model
in bounded-memory sub-chunks and returns only its local exact Pareto front (metric values and flat
positions) plus counts. The client merges the per-task fronts with
:func:`~cosearch.search.pareto.merge_fronts` in range order. Since a point off its task's front is
dominated (or an earlier duplicate) inside that task, the merged front is exactly the front of the
whole space, with the same first-duplicate rule as one process sweeping in order:
:func:`sweep` and :func:`dask_sweep` return the same flat positions.

Front definition and counters are the ``exhaustive`` sampler's
(:func:`cosearch.samplers.front_metrics`): among feasible points (valid plan, fits in memory,
within every budget), non-dominated over the objectives, every budgeted metric and the metrics
``cosearch best`` can bound. :meth:`SweepResult.to_exhaustive` gives the sampler's result type,
so a study stores a distributed sweep exactly as it stores a local one.

``address``: ``local:N`` starts a LocalCluster of N single-threaded worker processes listening on
127.0.0.1 only (closed at the end); anything else (``tcp://HOST:8786``, ``HOST:8786``) connects to a
running scheduler whose workers can ``import cosearch`` (same version).
"""
from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ._malloc import keep_heap
from .errors import CosearchError
from .search.pareto import merge_fronts
from .samplers._exhaustive import fold_best, objective_front_size, reduce_chunk
from .search.space import SearchSpace, direction

logger = logging.getLogger(__name__)

__all__ = ["front_columns", "sweep_range", "sweep", "dask_sweep", "plan_ranges", "SweepResult", "RangeResult",
           "parse_dask_address"]

#: Rows evaluated at once inside a task (bounds a worker's memory: ~40 float64 metric columns).
SUB_CHUNK = 65_536
#: Smallest and largest task (flat positions) that :func:`plan_ranges` makes by default.
MIN_TASK = 65_536
MAX_TASK = 4_194_304
#: Counters returned by every task (the exhaustive sampler's: each implies the previous).
COUNTS = ("points", "valid", "fits", "within_budget", "feasible")


def front_columns(space: SearchSpace) -> tuple[list[str], list[str]]:
    """(metric names, senses) of the front, exactly as the ``exhaustive`` sampler defines it."""
    from .samplers import front_metrics

    names = front_metrics(space)
    return names, [direction(m) for m in names]


@dataclass
class RangeResult:
    """Local exact front of the flat range ``[start, stop)``."""

    start: int
    stop: int
    points: np.ndarray  # (m, k) front metric values, in front_columns order
    index: np.ndarray  # (m,) int64 flat positions, ascending
    counts: dict[str, int]
    best: dict[str, float | None]  # best feasible finite value of each objective in the range
    seconds: float
    worker: str = ""


@dataclass
class SweepResult:
    """Exact front of a whole finite space, plus how it was computed."""

    columns: list[str]
    senses: list[str]
    points: np.ndarray  # (m, k) front values, rows ordered by flat position
    index: np.ndarray  # (m,) int64 flat positions, ascending
    counts: dict[str, int]
    best: dict[str, float | None]
    size: int
    seconds: float
    tasks: int = 1
    workers: int = 1
    backend: str = "local"
    setup_seconds: float = 0.0  # cluster start / connection, included in ``seconds``
    task_seconds: list[float] = field(default_factory=list)

    @property
    def configs_per_s(self) -> float:
        """Evaluated points per second of wall time, cluster start-up included."""
        return self.counts["points"] / self.seconds if self.seconds > 0 else math.inf

    @property
    def sweep_configs_per_s(self) -> float:
        """Evaluated points per second once the cluster is up (start-up excluded)."""
        t = self.seconds - self.setup_seconds
        return self.counts["points"] / t if t > 0 else math.inf

    def assignments(self, space: SearchSpace) -> dict[str, np.ndarray]:
        """Choice values of the front points, one array per dimension path."""
        return space.assign_from_indices(space.index_grid(self.index))

    def metrics(self, space: SearchSpace, profile: Any = None) -> dict[str, np.ndarray]:
        """Every metric of the front points (re-evaluated: the front is small)."""
        assign = self.assignments(space)
        return space.evaluate(assign) if profile is None else space.evaluate(assign, profile)

    def summary(self, objectives: Sequence[str] | None = None, directions: Sequence[str] | None = None) -> dict[str, Any]:
        """The exhaustive sampler's summary keys, plus how the sweep was distributed."""
        n_obj_front = None
        if objectives is not None:
            k = len(objectives)
            n_obj_front = objective_front_size(self.points[:, :k], list(directions)) if self.index.size else 0
        return {
            **self.counts, "front_size": int(self.index.size), "objective_front_size": n_obj_front,
            "front_metrics": list(self.columns), "best": dict(self.best),
            "elapsed_s": round(self.seconds, 4),
            "points_per_s": round(self.configs_per_s, 1) if math.isfinite(self.configs_per_s) else None,
            "distributed": {"backend": self.backend, "workers": self.workers, "tasks": self.tasks,
                            "setup_s": round(self.setup_seconds, 3),
                            "sweep_points_per_s": round(self.sweep_configs_per_s, 1)
                            if math.isfinite(self.sweep_configs_per_s) else None},
        }

    def to_exhaustive(self, space: SearchSpace) -> Any:
        """The same result as :func:`cosearch.samplers.run_exhaustive` returns (rows of the front
        in flat-position order, front metrics, summary)."""
        from .samplers import ExhaustiveResult

        rows = space.rows_of_flat(self.index)
        return ExhaustiveResult(rows=rows, front_metrics=list(self.columns),
                                summary=self.summary(space.objectives, space.directions))


# --------------------------------------------------------------------------------- one range
def _check_finite(space: SearchSpace) -> int:
    if not space.is_finite():
        cont = [d.path for d in space.dims if d.choices is None]
        raise CosearchError(cont[0], "exhaustive search needs finite choices: give the range a step")
    return int(space.size)  # the mixed-radix product that iter_chunks / index_grid enumerate


def sweep_range(space: SearchSpace, start: int, stop: int, sub_chunk: int = SUB_CHUNK,
                profile: Any = None) -> RangeResult:
    """Evaluate flat positions ``[start, stop)`` and return their exact local front.

    Memory is bounded by ``sub_chunk`` rows; the running front is merged with each sub-chunk's
    front in position order, so duplicates keep their lowest position.
    """
    t0 = time.perf_counter()
    keep_heap()
    total = _check_finite(space)
    start, stop = max(0, int(start)), min(int(stop), total)
    names, senses = front_columns(space)
    counts = dict.fromkeys(COUNTS, 0)
    best: dict[str, float | None] = dict.fromkeys(space.objectives)
    front_pts = np.empty((0, len(names)))
    front_idx = np.empty(0, dtype=np.int64)
    for lo in range(start, stop, sub_chunk):
        flat = np.arange(lo, min(lo + sub_chunk, stop), dtype=np.int64)
        assign = space.assign_from_indices(space.index_grid(flat))
        m = space.evaluate(assign) if profile is None else space.evaluate(assign, profile)
        local = reduce_chunk(space, m, flat, list(names), list(senses), counts, best)
        if local is None:
            continue
        pts, idx = local
        if front_idx.size:
            front_pts, front_idx = merge_fronts([(front_pts, front_idx), (pts, idx)], senses)
        else:
            front_pts, front_idx = pts, idx
    return RangeResult(start, stop, front_pts, front_idx, counts, best, time.perf_counter() - t0, _worker_name())


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return f"pid{os.getpid()}"


def plan_ranges(total: int, n_tasks: int | None = None, task_size: int | None = None) -> list[tuple[int, int]]:
    """Split ``[0, total)`` into contiguous ``(start, stop)`` ranges, in order.

    Give ``task_size`` or ``n_tasks`` (the size is then kept within [MIN_TASK, MAX_TASK])."""
    if total <= 0:
        return []
    if task_size is None:
        n = max(1, n_tasks or 1)
        size = -(-total // n)
        task_size = min(MAX_TASK, max(MIN_TASK, size))
    task_size = max(1, int(task_size))
    return [(s, min(s + task_size, total)) for s in range(0, total, task_size)]


def _merge(space: SearchSpace, parts: Sequence[RangeResult], seconds: float, **info: Any) -> SweepResult:
    names, senses = front_columns(space)
    parts = sorted(parts, key=lambda r: r.start)
    counts = dict.fromkeys(COUNTS, 0)
    best: dict[str, float | None] = dict.fromkeys(space.objectives)
    for r in parts:
        for k in COUNTS:
            counts[k] += r.counts[k]
        for obj, b in r.best.items():
            fold_best(best, obj, b)
    nonempty = [(r.points, r.index) for r in parts if r.index.size]
    if nonempty:
        pts, idx = merge_fronts(nonempty, senses)
    else:
        pts, idx = np.empty((0, len(names))), np.empty(0, dtype=np.int64)
    return SweepResult(names, senses, pts, np.asarray(idx, dtype=np.int64), counts, best, int(space.size), seconds,
                       task_seconds=[r.seconds for r in parts], **info)


def sweep(space: SearchSpace, task_size: int | None = None, sub_chunk: int = SUB_CHUNK,
          profile: Any = None) -> SweepResult:
    """The exact front in this process (the reference :func:`dask_sweep` must equal)."""
    t0 = time.perf_counter()
    total = _check_finite(space)
    ranges = plan_ranges(total, task_size=task_size or total)
    parts = [sweep_range(space, a, b, sub_chunk, profile) for a, b in ranges]
    return _merge(space, parts, time.perf_counter() - t0, tasks=len(ranges), workers=1, backend="local")


# --------------------------------------------------------------------------------- dask
def parse_dask_address(address: str) -> tuple[str, int | None]:
    """``local:N`` -> ("local", N); a scheduler address -> (address, None)."""
    if not isinstance(address, str) or not address.strip():
        raise CosearchError("--dask", "give local:N or a scheduler address such as tcp://HOST:8786")
    address = address.strip()
    if address.startswith("local"):
        _, _, n = address.partition(":")
        try:
            workers = int(n) if n else (os.cpu_count() or 1)
        except ValueError:
            raise CosearchError("--dask", f"local:N needs a whole number of workers (got {address!r})") from None
        if workers < 1:
            raise CosearchError("--dask", f"local:N needs N >= 1 (got {address!r})")
        return "local", workers
    if "://" not in address:
        address = f"tcp://{address}"
    port = address.rpartition(":")[2]
    if not port.isdigit() or not 0 < int(port) <= 65535:  # else dask waits out its timeout on it
        raise CosearchError("--dask", f"a scheduler address is tcp://HOST:PORT with a port 1-65535 (got {address!r})")
    return address, None


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError as err:  # pragma: no cover - a dependency
        raise CosearchError("--dask", f"dask.distributed is not installed ({err}); pip install distributed") from err
    if logging.getLogger().getEffectiveLevel() > logging.INFO:
        # dask logs every connection at INFO on its own logger; keep it to warnings unless verbose
        logging.getLogger("distributed").setLevel(logging.WARNING)
    return distributed


def local_cluster(n_workers: int) -> Any:
    """A LocalCluster of ``n_workers`` single-threaded processes on loopback, no dashboard."""
    distributed = _import_distributed()
    import dask

    # No statistical profiler in the workers (it samples the running task's stack every 10 ms).
    with dask.config.set({"distributed.worker.profile.enabled": False}):
        return distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                        host="127.0.0.1", dashboard_address=None, silence_logs=logging.ERROR)


def _worker_check() -> str:
    import cosearch

    return getattr(cosearch, "__version__", "?")


def dask_sweep(space: SearchSpace, address: str | Any, task_size: int | None = None, *,
               tasks_per_worker: int = 4, sub_chunk: int = SUB_CHUNK, profile: Any = None,
               progress: Any = None) -> SweepResult:
    """The exact front, with the enumeration split over a dask cluster.

    ``address``: ``local:N``, a scheduler address, or an existing ``distributed.Client``.
    Tasks are flat ranges (about ``tasks_per_worker`` per worker unless ``task_size`` is given);
    ``progress(done, total_tasks, evaluated)`` is called as tasks finish.
    """
    distributed = _import_distributed()
    total = _check_finite(space)
    t0 = time.perf_counter()
    cluster = None
    own_client = True
    if isinstance(address, distributed.Client):
        client, own_client = address, False
    else:
        target, n_local = parse_dask_address(address)
        try:
            if target == "local":
                cluster = local_cluster(n_local)
                client = distributed.Client(cluster)
            else:
                client = distributed.Client(target, timeout="20s")
        except (OSError, TimeoutError, ValueError, OverflowError) as err:  # ValueError: a malformed address
            if cluster is not None:
                cluster.close()
            raise CosearchError("--dask", f"cannot reach the dask scheduler at {address!r} ({err}); "
                                          f"give local:N or a scheduler address tcp://HOST:PORT") from err
    try:
        info = client.scheduler_info()
        n_workers = max(1, len(info.get("workers", {})))
        try:
            versions = client.run(_worker_check)
        except Exception as err:  # a worker without cosearch
            raise CosearchError("--dask", f"workers cannot import cosearch ({err}); install it on every worker") from err
        import cosearch

        mine = getattr(cosearch, "__version__", "?")
        bad = {w: v for w, v in versions.items() if v != mine}
        if bad:
            raise CosearchError("--dask", f"workers run other cosearch versions than {mine}: {bad}")
        ranges = plan_ranges(total, n_tasks=n_workers * max(1, tasks_per_worker), task_size=task_size)
        t_setup = time.perf_counter() - t0
        logger.info("dask sweep: %d points in %d tasks on %d workers (setup %.2f s)", total, len(ranges),
                    n_workers, t_setup)
        [space_f] = client.scatter([space], broadcast=True, hash=False)
        futures = [client.submit(sweep_range, space_f, a, b, sub_chunk, profile, pure=False) for a, b in ranges]
        parts: list[RangeResult] = []
        evaluated = 0
        for fut in distributed.as_completed(futures):
            r = fut.result()
            parts.append(r)
            evaluated += r.counts["points"]
            fut.release()
            if progress is not None:
                progress(len(parts), len(ranges), evaluated)
        result = _merge(space, parts, time.perf_counter() - t0, tasks=len(ranges), workers=n_workers,
                        backend="dask", setup_seconds=t_setup)
        logger.info("dask sweep done in %.2f s (setup %.2f s), front %d", result.seconds, t_setup, result.index.size)
        return result
    finally:
        if own_client:
            client.close()
        if cluster is not None:
            cluster.close()

