"""Strong scaling and time-to-accuracy (DeepPool, Park et al. MLSys 2022; McCandlish et al. 2018).

Part A, strong scaling: Llama 3 70B (seq 8192) on H100s at a fixed global batch of 1,024 sequences
(8.4M tokens); GPU count from 64 to 16,384. For each count the fastest feasible plan out of 8,640
(tp, pp, cp, micro-batch, interleave, recompute, ZeRO, data-parallel collective). Reports throughput
per GPU relative to 64 GPUs, where the best plan changes, and the idle GPU share (time a GPU runs no
compute kernel: pipeline bubble, exposed communication, optimizer) that a strong-scaled job leaves for
DeepPool-style background jobs.

Part B, time to accuracy: global batch (64 to 8,192 sequences) x GPU count. Steps to the target follow
McCandlish et al. (S = S_min (1 + B_noise/B)); E_min = 1e12 tokens, B_noise = 8M tokens (sensitivity
2M and 32M). Best plan per (batch, GPUs), then time and cost to accuracy, the time-optimal batch per
GPU count and the time/cost Pareto front.

Writes results/codesign_strong_scaling.csv, results/codesign_time_to_accuracy.csv and
results/codesign_strong_scaling.png. Runtime: ~10 s on one core.
"""
from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd

from codesign_common import RESULTS, best_plans, grid, gpu_columns, model_columns, plan_label

from cosearch.fingerprint import model_fingerprint
from cosearch.model.statistical import statistical_efficiency, steps_to_target

MODEL, SEQ = "llama3-70b", 8192
FIXED_BATCH = 1024
GPU_COUNTS = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
BATCHES = [64, 128, 256, 512, 1024, 2048, 4096, 8192]
TARGET_TOKENS = 1e12                       # E_min
CRITICAL_BATCH_TOKENS = 8e6                # B_noise; sensitivity below
SENSITIVITY = [2e6, 8e6, 32e6]
KEEP = ("mfu", "idle_share", "time_bubble_s", "time_dp_comm_s", "time_tp_comm_s", "time_pp_comm_s",
        "time_cp_comm_s", "time_optimizer_s", "time_compute_s", "time_recompute_s", "num_microbatches", "memory_gib")


def plans() -> dict[str, np.ndarray]:
    return grid({"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8, 16], "cp": [1, 2, 4, 8], "microbatch": [1, 2, 4],
                 "interleave": [1, 2, 4], "recompute": [0, 1, 2], "zero": [1, 3], "dp_collective": [0, 5]})


def fixed() -> dict[str, float]:
    f = dict(model_columns(MODEL), **gpu_columns("h100-sxm"))
    f.update(sequence_parallel=1.0)
    return f


def strong_scaling(pl) -> pd.DataFrame:
    conf = {"gpus": np.array(GPU_COUNTS, float), "global_batch": np.full(len(GPU_COUNTS), float(FIXED_BATCH))}
    best = best_plans(conf, pl, fixed(), keep=KEEP)
    df = pd.DataFrame({"gpus": GPU_COUNTS, **{k: v for k, v in best.items() if k != "plan_index"}})
    df["tokens_per_s"] = FIXED_BATCH * SEQ / df["step_time_s"]
    df["tokens_per_s_per_gpu"] = df["tokens_per_s"] / df["gpus"]
    df["scaling_efficiency"] = df["tokens_per_s_per_gpu"] / df["tokens_per_s_per_gpu"].iloc[0]
    df["speedup_vs_64"] = df["tokens_per_s"] / df["tokens_per_s"].iloc[0]
    df["bubble_share"] = df["time_bubble_s"] / df["step_time_s"]
    df["exposed_comm_share"] = (df["time_dp_comm_s"] + df["time_tp_comm_s"] + df["time_pp_comm_s"] + df["time_cp_comm_s"]) / df["step_time_s"]
    df["idle_gpu_hours_per_step"] = df["idle_share"] * df["gpus"] * df["step_time_s"] / 3600
    df["plan"] = [plan_label(r) + f" cp{int(r['cp'])} dp{int(r['gpus'] / (r['tp'] * r['pp'] * r['cp']))}"
                  + (" auto-coll" if r["dp_collective"] == 5 else "") for r in df.to_dict("records")]
    return df


def time_to_accuracy(pl) -> pd.DataFrame:
    G, B = np.meshgrid(np.array(GPU_COUNTS, float), np.array(BATCHES, float), indexing="ij")
    conf = {"gpus": G.ravel(), "global_batch": B.ravel()}
    best = best_plans(conf, pl, fixed(), keep=("mfu", "idle_share"))
    df = pd.DataFrame({"gpus": G.ravel().astype(int), "global_batch": B.ravel().astype(int),
                       **{k: v for k, v in best.items() if k != "plan_index"}})
    price = gpu_columns("h100-sxm")["price_usd_per_gpu_hour"]
    batch_tokens = df["global_batch"] * SEQ
    for bn in SENSITIVITY:
        tag = f"{bn / 1e6:g}M"
        steps = steps_to_target(TARGET_TOKENS, bn, batch_tokens)
        df[f"statistical_efficiency_{tag}"] = statistical_efficiency(bn, batch_tokens)
        df[f"time_to_accuracy_days_{tag}"] = steps * df["step_time_s"] / 86400
        df[f"cost_to_accuracy_usd_{tag}"] = df["gpus"] * price * steps * df["step_time_s"] / 3600
    return df


def pareto(df: pd.DataFrame, t: str, c: str) -> pd.DataFrame:
    d = df.dropna(subset=[t]).sort_values([t, c])
    keep, best_cost = [], np.inf
    for i, r in d.iterrows():
        if r[c] < best_cost:
            keep.append(i)
            best_cost = r[c]
    return d.loc[keep]


def main() -> None:
    t0 = time.perf_counter()
    pl = plans()
    ss = strong_scaling(pl)
    tta = time_to_accuracy(pl)
    RESULTS.mkdir(exist_ok=True)
    ss.drop(columns=["plan_index"], errors="ignore").to_csv(RESULTS / "codesign_strong_scaling.csv", index=False)
    tta.to_csv(RESULTS / "codesign_time_to_accuracy.csv", index=False)
    cols = ["gpus", "step_time_s", "speedup_vs_64", "scaling_efficiency", "mfu", "idle_share", "bubble_share",
            "exposed_comm_share", "plan"]
    with pd.option_context("display.width", 200, "display.max_colwidth", 70):
        print(ss[cols].round(3).to_string(index=False))
    summary: dict = {"strong_scaling": ss[cols].round(4).to_dict("records")}
    changes = [f"{a['gpus']}->{b['gpus']}: {a['plan']} -> {b['plan']}"
               for a, b in zip(ss.to_dict("records"), ss.to_dict("records")[1:]) if a["plan"] != b["plan"]]
    summary["plan_changes"] = changes
    tag = f"{CRITICAL_BATCH_TOKENS / 1e6:g}M"
    t, c = f"time_to_accuracy_days_{tag}", f"cost_to_accuracy_usd_{tag}"
    ok = tta.dropna(subset=[t])
    fastest, cheapest = ok.loc[ok[t].idxmin()], ok.loc[ok[c].idxmin()]
    summary["fastest_to_accuracy"] = fastest[["gpus", "global_batch", t, c, "mfu"]].to_dict()
    summary["cheapest_to_accuracy"] = cheapest[["gpus", "global_batch", t, c, "mfu"]].to_dict()
    summary["time_optimal_batch_per_gpu_count"] = {
        int(g): int(h.loc[h[t].idxmin(), "global_batch"]) for g, h in ok.groupby("gpus")}
    summary["pareto_time_cost"] = pareto(ok, t, c)[["gpus", "global_batch", t, c]].round(3).to_dict("records")
    summary["sensitivity"] = {}
    for bn in SENSITIVITY:
        tg = f"{bn / 1e6:g}M"
        tt, cc = f"time_to_accuracy_days_{tg}", f"cost_to_accuracy_usd_{tg}"
        f = ok.loc[ok[tt].idxmin()]
        ch = ok.loc[ok[cc].idxmin()]
        summary["sensitivity"][tg] = {"fastest": {"gpus": int(f["gpus"]), "batch": int(f["global_batch"]), "days": f[tt], "usd": f[cc]},
                                      "cheapest": {"gpus": int(ch["gpus"]), "batch": int(ch["global_batch"]), "days": ch[tt], "usd": ch[cc]}}
    summary["seconds"] = time.perf_counter() - t0
    summary["model_fingerprint"] = model_fingerprint()
    print(json.dumps({k: v for k, v in summary.items() if k != "strong_scaling"}, indent=1, default=float))
    (RESULTS / "codesign_strong_scaling.json").write_text(json.dumps(summary, indent=1, default=float))
    plot(ss, tta, t, c)


def plot(ss: pd.DataFrame, tta: pd.DataFrame, t: str, c: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b, d) = plt.subplots(1, 3, figsize=(17, 4.8))
    a.plot(ss["gpus"], ss["scaling_efficiency"], "o-", label="throughput per GPU vs 64 GPUs")
    a.plot(ss["gpus"], ss["mfu"], "s-", label="MFU")
    a.plot(ss["gpus"], ss["idle_share"], "^-", label="idle GPU share (no compute kernel)")
    a.plot(ss["gpus"], ss["bubble_share"], "v--", label="  of which pipeline bubble")
    a.set_xscale("log", base=2)
    a.set_xlabel("GPUs (global batch fixed at 1,024 x 8,192 tokens)")
    a.set_ylim(0, 1.1)
    a.legend(fontsize=7, loc="center left")
    a.set_title(f"strong scaling, {MODEL} on H100", fontsize=10)
    for r in ss.to_dict("records"):
        a.annotate(f"tp{int(r['tp'])}pp{int(r['pp'])}cp{int(r['cp'])}", (r["gpus"], r["scaling_efficiency"]),
                   fontsize=6, rotation=-35, xytext=(2, -6), textcoords="offset points", va="top")
    piv = tta.pivot(index="global_batch", columns="gpus", values=t)
    im = b.imshow(np.log10(piv.to_numpy()), origin="lower", aspect="auto", cmap="viridis_r")
    b.set_xticks(range(len(piv.columns)), piv.columns, rotation=45, fontsize=7)
    b.set_yticks(range(len(piv.index)), piv.index, fontsize=7)
    b.set_xlabel("GPUs")
    b.set_ylabel("global batch (sequences of 8,192)")
    for j, g in enumerate(piv.columns):
        col = piv[g]
        if col.notna().any():
            i = list(piv.index).index(col.idxmin())
            b.plot(j, i, "r*", ms=9)
            b.text(j, i + 0.3, f"{col.min():.0f}d", fontsize=6, ha="center", color="red")
    fig.colorbar(im, ax=b, label="log10 days to accuracy")
    b.set_title("time to accuracy (E_min 1e12 tokens, B_noise 8M tokens); * best batch", fontsize=9)
    ok = tta.dropna(subset=[t])
    sc = d.scatter(ok[t], ok[c] / 1e6, c=np.log2(ok["gpus"]), s=14, cmap="plasma")
    pf = pareto(ok, t, c)
    d.plot(pf[t], pf[c] / 1e6, "k-", lw=0.8, label="Pareto front")
    for r in pf.to_dict("records"):
        d.annotate(f"{r['gpus']}g b{r['global_batch']}", (r[t], r[c] / 1e6), fontsize=6)
    d.set_xscale("log")
    d.set_yscale("log")
    d.set_xlabel("days to accuracy")
    d.set_ylabel("cost to accuracy (M$, $2.99/GPU-h)")
    fig.colorbar(sc, ax=d, label="log2 GPUs")
    d.legend(fontsize=7)
    d.set_title("time vs cost to accuracy over batch x GPUs", fontsize=10)
    fig.tight_layout()
    fig.savefig(RESULTS / "codesign_strong_scaling.png", dpi=130)


if __name__ == "__main__":
    main()
