"""Zero-bubble ZB-H1 against 1F1B: the model's throughput ratio vs Qi et al. ICLR 2024 Table 4.

Reads experiments/data/validation/pipeline_schedules_qi2024.csv (sources in SOURCES.md), estimates
each published setup under 1F1B and ZB-H1 with the default profile (nothing fitted to these rows) and
prints, per setup, the published and predicted ZB-H1/1F1B throughput ratios and memory.
"""
from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cosearch import estimate  # noqa: E402

CSV = HERE / "data" / "validation" / "pipeline_schedules_qi2024.csv"
VOCAB = 50304  # GPT-2's vocabulary padded to a multiple of 128 (the paper does not state it)
#: The paper's Table 1 counts 5as^2 bytes of attention activations per layer: unfused attention with its
#: softmax and dropout masks (Korthikanti et al. 2022), the Megatron-LM default of 2023 (no --use-flash-attn)
ATTENTION = "standard"


def setups(path: Path = CSV) -> list[dict]:
    """One entry per published setup: its scenario fields and published 1f1b / zb-h1 numbers."""
    out: dict[tuple, dict] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["model"], row["num_microbatches"])
            entry = out.setdefault(key, {"row": row})
            entry[row["schedule"]] = (float(row["samples_per_gpu_s"]), float(row["memory_gb"]))
    return list(out.values())


def predict(row: dict, schedule: str) -> dict:
    mb, m, gpus = int(row["microbatch"]), int(row["num_microbatches"]), int(row["gpus"])
    sc = {"model": {"layers": int(row["layers"]), "hidden": int(row["hidden"]), "heads": int(row["heads"]),
                    "vocab": VOCAB, "seq_len": int(row["seq_len"])},
          "training": {"global_batch": m * mb, "attention": ATTENTION, "dropout": True}, "cluster": {"gpu": "a100-80gb", "gpus": gpus},
          "plan": {"pp": int(row["pp"]), "microbatch": mb, "schedule": schedule}}
    r = estimate(sc)
    return {"samples_per_gpu_s": m * mb / r["step_time_s"] / gpus, "memory_gib": r["memory_gib"]}


def compare(path: Path = CSV) -> list[dict]:
    rows = []
    for s in setups(path):
        f1, zb = predict(s["row"], "1f1b"), predict(s["row"], "zb-h1")
        rows.append({"model": s["row"]["model"], "m": int(s["row"]["num_microbatches"]),
                     "published_ratio": s["zb-h1"][0] / s["1f1b"][0],
                     "model_ratio": zb["samples_per_gpu_s"] / f1["samples_per_gpu_s"],
                     "published_memory_gb": (s["1f1b"][1], s["zb-h1"][1]),
                     "model_memory_gib": (f1["memory_gib"], zb["memory_gib"])})
    return rows


def main() -> None:
    rows = compare()
    print(f"{'model':10} {'m':>4} {'published':>10} {'model':>7} {'err':>7}   memory 1f1b/zb-h1 published GB, model GiB")
    errs = []
    for r in rows:
        err = r["model_ratio"] / r["published_ratio"] - 1.0
        errs.append(abs(err))
        print(f"{r['model']:10} {r['m']:>4} {r['published_ratio']:>10.3f} {r['model_ratio']:>7.3f} {err:>+7.1%}   "
              f"{r['published_memory_gb'][0]:.0f}/{r['published_memory_gb'][1]:.0f}  "
              f"{r['model_memory_gib'][0]:.1f}/{r['model_memory_gib'][1]:.1f}")
    print(f"ZB-H1/1F1B speed-up ratio: median |err| {statistics.median(errs):.1%}, max {max(errs):.1%} "
          f"over {len(rows)} published setups (none fitted)")


if __name__ == "__main__":
    main()
