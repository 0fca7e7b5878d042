"""Compare cosearch.estimate with whole training steps measured on one H100 (measure_step.py).

Reads experiments/results/gpu/step_h100.csv (GPT models of 0.36-2.7B parameters, seq 2048, bf16 autocast
over fp32 parameters, fused AdamW, one micro-batch per step, no or full recompute) and predicts each
step with the shipped default profile and the kernel profile, on one H100 with nothing to overlap:
step time (eager, and with each block through torch.compile where step_compiled_h100.csv exists), the
full-recompute cost ratio of each, and peak memory (eager). Prints the table and writes
experiments/results/gpu/compare_step.json.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

import cosearch  # noqa: E402
from cosearch.fingerprint import model_fingerprint  # noqa: E402
from cosearch.model.profile import DEFAULT_PROFILE, KERNEL_PROFILE  # noqa: E402

RESULTS = HERE.parent / "results" / "gpu"
VOCAB = 50304


def scenario(r) -> dict:
    return {"model": {"layers": int(r.layers), "hidden": int(r.hidden), "heads": int(r.heads), "ffn_hidden": 4 * int(r.hidden),
                      "vocab": VOCAB, "seq_len": int(r.seq_len), "tied_embeddings": True},
            "training": {"global_batch": int(r.microbatch), "precision": "bf16", "attention": "flash"},
            "cluster": {"gpu": "h100-sxm", "gpus": 1},
            # eager blocks go through torch.utils.checkpoint(use_reentrant=False), which stops the recompute early
            # (PyTorch >= 2.1); a compiled block is one graph whose forward reruns whole
            "plan": {"microbatch": int(r.microbatch), "recompute": r.recompute, "recompute_early_stop": not r.compiled}}


def main() -> None:
    d = pd.read_csv(RESULTS / "step_h100.csv").dropna(subset=["step_s"]).assign(compiled=0)
    compiled = RESULTS / "step_compiled_h100.csv"
    if compiled.exists():
        d = pd.concat([d, pd.read_csv(compiled).dropna(subset=["step_s"])], ignore_index=True)
    report = {}
    for name, prof in (("default", DEFAULT_PROFILE), ("kernel", KERNEL_PROFILE)):
        est = [cosearch.estimate(scenario(r), profile=prof) for r in d.itertuples()]
        d[f"{name}_step_s"] = [e["step_time_s"] for e in est]
        d[f"{name}_err"] = d[f"{name}_step_s"] / d.step_s - 1.0
        d[f"{name}_memory_gib"] = [e["memory_gib"] for e in est]
        e = d[f"{name}_err"]
        report[name] = {}
        for label, rows in (("eager", d.compiled == 0), ("compiled", d.compiled == 1)):
            er = e[rows]
            if er.empty:
                continue
            report[name][label] = {"rows": int(er.size), "median_abs_error": float(er.abs().median()),
                                   "worst_abs_error": float(er.abs().max()), "bias": float(er.median()),
                                   "no_recompute_bias": float(er[d.recompute == "none"].median()),
                                   "full_recompute_bias": float(er[d.recompute == "full"].median())}
    piv = d.pivot_table(index=["compiled", "model", "microbatch"], columns="recompute", values=["step_s", "default_step_s"])
    ratio = pd.DataFrame({"measured": piv[("step_s", "full")] / piv[("step_s", "none")],
                          "predicted": piv[("default_step_s", "full")] / piv[("default_step_s", "none")]})
    report["full_recompute_cost_ratio"] = {f"{'compiled' if c else 'eager'}/{m}/mb{mb}": {k: float(v) for k, v in row.items()}
                                           for (c, m, mb), row in ratio.iterrows()}
    mem = (d.default_memory_gib / d.peak_memory_gib - 1.0)[d.compiled == 0]
    report["memory"] = {"median_abs_error": float(mem.abs().median()), "worst_abs_error": float(mem.abs().max()),
                        "bias": float(mem.median())}
    pd.set_option("display.width", 200)
    print(d[["model", "microbatch", "recompute", "compiled", "step_s", "default_step_s", "default_err", "kernel_err",
             "peak_memory_gib", "default_memory_gib"]].to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(ratio.to_string(float_format=lambda x: f"{x:.3f}"))
    print(json.dumps(report, indent=1))
    report["model_fingerprint"] = model_fingerprint()
    (RESULTS / "compare_step.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
