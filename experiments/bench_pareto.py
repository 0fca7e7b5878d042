"""Speed of the Pareto layer: pareto_mask on 1e6 rows and exact 3-D hypervolume.

Cases: uniform random rows (k = 2, 3, 4), integer-valued rows with many ties and duplicates
(what exhaustive enumeration of a discrete space produces), a hard anti-correlated case where
a quarter of the rows are on the front, chunked merge_fronts, and hypervolume of a
few-thousand-point 3-D front against optuna's private implementation. Prints a table and saves
experiments/results/bench_pareto.json. Median of ``BENCH_REPEAT`` runs (default 3).
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cosearch.search.hypervolume import hypervolume  # noqa: E402
from cosearch.search.pareto import merge_fronts, pareto_mask  # noqa: E402

N = int(os.environ.get("BENCH_N", 1_000_000))
REPEAT = int(os.environ.get("BENCH_REPEAT", 3))


def timed(fn: Callable[[], Any], repeat: int = REPEAT) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def main() -> None:
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []

    for k in (2, 3, 4):
        x = rng.random((N, k))
        s, m = timed(lambda: pareto_mask(x))
        rows.append({"case": f"pareto_mask uniform k={k}", "n": N, "front": int(m.sum()), "seconds": s})

    for k in (2, 3):
        # discrete trade-off, like time vs cost (and a third integer objective): ties, duplicates
        t = rng.integers(1, 1000, size=N)
        x = np.stack([t, 1000 - t + rng.integers(0, 50, size=N), rng.integers(0, 64, size=N)], axis=1)
        x = x[:, :k].astype(float)
        s, m = timed(lambda: pareto_mask(x))
        rows.append({"case": f"pareto_mask integer ties k={k}", "n": N, "front": int(m.sum()), "seconds": s})

    x = rng.random((N, 3))
    s, (_, ids) = timed(lambda: merge_fronts(
        [(x[i:i + N // 10][m], np.arange(i, i + N // 10)[m])
         for i in range(0, N, N // 10) for m in [pareto_mask(x[i:i + N // 10])]]))
    rows.append({"case": "merge_fronts 10 chunks k=3", "n": N, "front": int(ids.size), "seconds": s})

    # Worst cases: rows near a simplex, so most of them are on the front. k=3 finishes with a
    # sweep; k=4 has no sweep and costs O(rows * front).
    for k, n_hard in ((3, N), (4, min(N, 50_000))):
        u = rng.random((n_hard, k))
        u = u / u.sum(axis=1, keepdims=True) + 0.002 * rng.random((n_hard, k))
        s, m = timed(lambda: pareto_mask(u), repeat=1)
        rows.append({"case": f"pareto_mask anti-correlated k={k}", "n": n_hard, "front": int(m.sum()),
                     "seconds": s})

    for n_front in (1000, 4000):
        v = rng.random((n_front, 3))
        f = v / np.linalg.norm(v, axis=1, keepdims=True)  # all non-dominated
        ref = np.full(3, 1.1)
        s, hv = timed(lambda: hypervolume(f, ref))
        rows.append({"case": "hypervolume 3-D (cosearch)", "n": n_front, "front": n_front, "seconds": s,
                     "value": hv})
        try:
            from optuna._hypervolume import compute_hypervolume

            s2, hv2 = timed(lambda: compute_hypervolume(f, ref), repeat=1)
            rows.append({"case": "hypervolume 3-D (optuna._hypervolume)", "n": n_front, "front": n_front,
                         "seconds": s2, "value": float(hv2), "abs_diff": abs(float(hv2) - hv)})
        except ImportError:
            pass

    print(f"{'case':42s} {'n':>9s} {'front':>7s} {'seconds':>9s}")
    for r in rows:
        print(f"{r['case']:42s} {r['n']:9d} {r['front']:7d} {r['seconds']:9.3f}")
    out = {"machine": {"python": platform.python_version(), "numpy": np.__version__,
                       "cpus": os.cpu_count(), "platform": platform.platform(),
                       "loadavg_at_end": list(os.getloadavg())},
           "repeat": REPEAT, "results": rows}
    path = HERE / "results" / "bench_pareto.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"saved {path.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
