"""Speed of the heterogeneous-inventory model and search (issue 14): is a large inventory space still fast?

Space: Llama-3 70B over an inventory of 512 H100 SXM, 256 H200 and 1,024 A100 80GB; the search picks how
many of each to use (6 counts each), pipeline or data composition, tp, pp, dp, micro-batch, recompute,
ZeRO stage: 186,624 points. Times (1) the vectorized heterogeneous model
over the whole space in 2**18-point chunks, one process, points per second; (2) the homogeneous model on
the same number of one-type rows, for scale; (3) ``cosearch run`` exhaustive end to end on the space
(enumeration, exact Pareto front, stored study). Prints a table and saves results/bench_hetero.json.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cosearch import evaluate, load_scenario, scenario_columns  # noqa: E402
from cosearch.search.space import parse_space  # noqa: E402
from cosearch.study import run_study  # noqa: E402

SPACE = {
    "model": "llama3-70b",
    "training": {"global_batch": 1024, "tokens": 1.5e13},
    "cluster": {"inventory": {"h100-sxm": 512, "h200": 256, "a100-80gb": 1024}},
    "plan": {
        "hetero": ["pipeline", "data"],
        "gpus_by_type": {"h100-sxm": [0, 64, 128, 256, 384, 512], "h200": [0, 32, 64, 128, 192, 256],
                         "a100-80gb": [0, 128, 256, 512, 768, 1024]},
        "tp": [4, 8], "pp": [2, 4, 8], "dp": [1, 2, 4, 8],
        "microbatch": [1, 2, 4], "recompute": ["none", "selective", "full"], "sequence_parallel": True, "zero": [1, 2],
    },
    "objectives": ["time_to_train_days", "cost_to_train_usd"],
}


def main() -> dict:
    space = parse_space(SPACE)
    n = int(space.size)
    t0 = time.perf_counter()
    feasible = 0
    for _, assign in space.iter_chunks(1 << 18):
        out = space.evaluate(assign)
        feasible += int(np.count_nonzero(out["feasible"]))
    hetero_s = time.perf_counter() - t0
    # the homogeneous model on as many rows (one H100 row repeated with varied plans), for scale
    rng = np.random.default_rng(0)

    base = scenario_columns(load_scenario({"model": "llama3-70b", "training": {"global_batch": 1024, "tokens": 1.5e13},
                                           "cluster": {"gpu": "h100-sxm", "gpus": 512}}))
    hom = {**base, "tp": rng.choice([4.0, 8.0], n), "pp": rng.choice([2.0, 4.0, 8.0], n),
           "microbatch": rng.choice([1.0, 2.0], n), "recompute": rng.choice([1.0, 2.0], n)}
    hom["dp"] = 512 / (hom["tp"] * hom["pp"])
    t0 = time.perf_counter()
    for i in range(0, n, 1 << 18):
        evaluate({k: (v[i:i + (1 << 18)] if isinstance(v, np.ndarray) else v) for k, v in hom.items()})
    homo_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = run_study(space, "bench", storage=f"{tmp}/b.journal", sampler="exhaustive")
        study_s = time.perf_counter() - t0
    result = {
        "points": n, "feasible": feasible, "dims": len(space.dims),
        "hetero_model_s": round(hetero_s, 3), "hetero_points_per_s": round(n / hetero_s),
        "homogeneous_model_s": round(homo_s, 3), "homogeneous_points_per_s": round(n / homo_s),
        "cosearch_run_exhaustive_s": round(study_s, 3), "front_stored": getattr(res, "n_stored", None),
        "machine": f"{os.cpu_count()} cores visible, one process",
    }
    print(f"{'what':52s} {'seconds':>9s} {'points/s':>12s}")
    print(f"{'heterogeneous model, ' + format(n, ',') + ' inventory points':52s} {hetero_s:9.2f} {n / hetero_s:12,.0f}")
    print(f"{'homogeneous model, same number of rows':52s} {homo_s:9.2f} {n / homo_s:12,.0f}")
    print(f"{'cosearch run --sampler exhaustive (front stored)':52s} {study_s:9.2f} {n / study_s:12,.0f}")
    print(f"feasible points: {feasible:,} of {n:,}")
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "bench_hetero.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
