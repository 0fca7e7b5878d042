"""COMET-style study: a 1T-parameter model on 1,024 GPUs provisioned differently, with and without a
memory expansion tier.

COMET (Kadiyala et al. 2022, arXiv 2211.16648) reports up to 7.7x between cluster configurations for
Transformer-1T and up to 1.4x from memory expansion. Here every cluster configuration (compute class x
HBM capacity x HBM bandwidth x network bandwidth x expansion tier) gets its fastest feasible plan out of
6,048 (tp, pp, micro-batch, interleave, recompute, ZeRO, offload), all evaluated with the vectorized
model. A second pass with unlimited HBM gives, per configuration, how much HBM capacity costs.

Writes results/codesign_memory_expansion.csv (one row per configuration) and .png; prints the summary.
Runtime: ~10-20 s on one core.
"""
from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd

from codesign_common import RESULTS, best_plans, grid, gpu_columns, model_columns, plan_label

from cosearch.fingerprint import model_fingerprint
from cosearch.model.expansion import OFFLOAD_CODES

GPUS = 1024
GLOBAL_BATCH = 1024          # sequences of 2,048 tokens: 2.1M tokens per step
#: compute classes: (peak bf16 TFLOP/s, achieved large-GEMM fraction) from the catalog
COMPUTE = {"A100-class": (312.0, 0.80), "H100-class": (989.4, 0.707), "B200-class": (2250.0, 0.707)}
HBM_GIB = [40.0, 80.0, 141.0, 192.0]
HBM_TBPS = [2.0, 3.35, 8.0]
NETWORK_GBPS = [100.0, 200.0, 400.0, 800.0]
#: expansion tiers: (capacity per GPU GiB, bandwidth per GPU GB/s)
#:  host: a DGX H100's 2 TB of DDR5 shared by 8 GPUs, reached over each GPU's PCIe Gen5 x16 link
#:        (64 GB/s per direction) that the GPU's NIC also uses: ~25 GB/s left for offload traffic.
#:  cxl:  CXL 2.0 x16 memory expanders (64 GB/s per direction), one per GPU, 1 TiB each.
EXPANSION = {"none": (0.0, 0.0), "host": (256.0, 25.0), "cxl": (1024.0, 64.0)}


def plans() -> dict[str, np.ndarray]:
    return grid({
        "tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8, 16, 32, 64], "microbatch": [1, 2, 4], "interleave": [1, 2],
        "recompute": [0, 1, 2], "zero": [1, 3], "offload": sorted(set(OFFLOAD_CODES.values())),
    })


def configs() -> pd.DataFrame:
    rows = []
    for cname, (peak, eff) in COMPUTE.items():
        for hbm in HBM_GIB:
            for bw in HBM_TBPS:
                for net in NETWORK_GBPS:
                    for xname, (xgib, xgbps) in EXPANSION.items():
                        rows.append(dict(compute=cname, peak_tflops=peak, matmul_efficiency=eff, hbm_gib=hbm,
                                         hbm_tbps=bw, network_gbps=net, expansion=xname, expansion_gib=xgib,
                                         expansion_gbps=xgbps))
    return pd.DataFrame(rows)


def main() -> None:
    t0 = time.perf_counter()
    fixed = dict(model_columns("megatron-1t"), **gpu_columns("h100-sxm"))
    fixed.update(global_batch=float(GLOBAL_BATCH), gpus=float(GPUS), sequence_parallel=1.0, cp=1.0)
    cfg = configs()
    keys = ["peak_tflops", "matmul_efficiency", "hbm_gib", "hbm_tbps", "network_gbps", "expansion_gib", "expansion_gbps"]
    conf = {k: cfg[k].to_numpy(float) for k in keys}
    pl = plans()
    keep = ("mfu", "memory_gib", "expansion_used_gib", "time_bubble_s", "time_recompute_s", "time_offload_s",
            "time_optimizer_s", "time_tp_comm_s", "time_dp_comm_s", "time_pp_comm_s")
    best = best_plans(conf, pl, fixed, keep=keep)
    for k, v in best.items():
        cfg[k] = v
    # the same configurations with unlimited HBM: what HBM capacity costs each one
    no_x = cfg["expansion"] == "none"
    inf_conf = {k: cfg.loc[no_x, k].to_numpy(float) for k in keys}
    inf_conf["hbm_gib"] = np.full(no_x.sum(), 1e6)
    inf = best_plans(inf_conf, pl, fixed)
    base_key = ["compute", "hbm_gib", "hbm_tbps", "network_gbps"]
    lookup = cfg.loc[no_x, base_key].assign(unlimited_hbm_step_s=inf["step_time_s"],
                                           step_without_expansion_s=cfg.loc[no_x, "step_time_s"].to_numpy())
    cfg = cfg.merge(lookup, on=base_key, how="left")
    no_x = cfg["expansion"] == "none"
    cfg["expansion_speedup"] = cfg["step_without_expansion_s"] / cfg["step_time_s"]
    cfg["hbm_limited"] = cfg["step_without_expansion_s"] > 1.02 * cfg["unlimited_hbm_step_s"]
    cfg["plan"] = [plan_label(r, {"offload": OFFLOAD_CODES}) for r in cfg.to_dict("records")]
    RESULTS.mkdir(exist_ok=True)
    cfg.drop(columns=["plan_index"]).to_csv(RESULTS / "codesign_memory_expansion.csv", index=False)

    # ------------------------------------------------------------------ summary
    ok = cfg.dropna(subset=["step_time_s"])
    summary: dict = {"configs": len(cfg), "plans_per_config": len(pl["tp"]), "feasible_configs": len(ok)}
    summary["spread_all"] = float(ok["step_time_s"].max() / ok["step_time_s"].min())
    fastest, slowest = ok.loc[ok["step_time_s"].idxmin()], ok.loc[ok["step_time_s"].idxmax()]
    summary["fastest"] = {k: fastest[k] for k in ["compute", "hbm_gib", "hbm_tbps", "network_gbps", "expansion", "step_time_s", "plan", "mfu"]}
    summary["slowest"] = {k: slowest[k] for k in ["compute", "hbm_gib", "hbm_tbps", "network_gbps", "expansion", "step_time_s", "plan", "mfu"]}
    summary["spread_within_compute_class"] = {
        c: float(g["step_time_s"].max() / g["step_time_s"].min()) for c, g in ok.groupby("compute")}
    summary["infeasible_without_expansion"] = int(cfg.loc[no_x, "step_time_s"].isna().sum())
    sp = cfg[~no_x & np.isfinite(cfg["expansion_speedup"])]
    summary["expansion_speedup_max"] = float(sp["expansion_speedup"].max())
    top = sp.loc[sp["expansion_speedup"].idxmax()]
    summary["expansion_speedup_best_case"] = {k: top[k] for k in ["compute", "hbm_gib", "hbm_tbps", "network_gbps", "expansion", "step_without_expansion_s", "step_time_s", "plan"]}
    summary["expansion_speedup_by_hbm"] = {
        f"{int(h)} GiB": {x: float(g.loc[g["expansion"] == x, "expansion_speedup"].median()) for x in ("host", "cxl")}
        for h, g in sp.groupby("hbm_gib")}
    lim = sp[sp["hbm_limited"]]
    summary["hbm_limited_configs"] = int(cfg.loc[no_x, "hbm_limited"].sum())
    summary["expansion_speedup_where_hbm_limits"] = {
        "median": float(lim["expansion_speedup"].median()) if len(lim) else None,
        "max": float(lim["expansion_speedup"].max()) if len(lim) else None,
        "gap_closed_median": float(((lim["step_without_expansion_s"] - lim["step_time_s"])
                                    / (lim["step_without_expansion_s"] - lim["unlimited_hbm_step_s"])).median()) if len(lim) else None,
    }
    summary["offload_in_best_plan"] = cfg.loc[~no_x, "plan"].str.extract(r"offload=(\S+)")[0].value_counts().to_dict()
    summary["seconds"] = time.perf_counter() - t0
    summary["model_fingerprint"] = model_fingerprint()
    print(json.dumps(summary, indent=1, default=float))
    (RESULTS / "codesign_memory_expansion.json").write_text(json.dumps(summary, indent=1, default=float))
    plot(cfg)


def plot(cfg: pd.DataFrame) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.8))
    ok = cfg.dropna(subset=["step_time_s"]).sort_values("step_time_s").reset_index(drop=True)
    colors = {40.0: "tab:red", 80.0: "tab:orange", 141.0: "tab:green", 192.0: "tab:blue"}
    markers = {"none": "o", "host": "^", "cxl": "s"}
    for (h, x), g in ok.groupby(["hbm_gib", "expansion"]):
        a.scatter(g.index, g["step_time_s"], s=10, c=colors[h], marker=markers[x], label=f"{int(h)} GiB, {x}")
    a.set_yscale("log")
    a.set_xlabel("cluster configuration (sorted by best step time)")
    a.set_ylabel("best step time (s)")
    a.set_title(f"megatron-1t on {GPUS} GPUs: {len(ok)} configurations, spread "
                f"{ok['step_time_s'].max() / ok['step_time_s'].min():.1f}x")
    a.legend(fontsize=6, ncol=2)
    sp = cfg[(cfg["expansion"] != "none") & np.isfinite(cfg["expansion_speedup"])]
    pos = 0
    ticks, labels = [], []
    for c in ("A100-class", "H100-class", "B200-class"):
        for h in HBM_GIB:
            for k, x in enumerate(("host", "cxl")):
                g = sp[(sp["compute"] == c) & (sp["hbm_gib"] == h) & (sp["expansion"] == x)]["expansion_speedup"]
                b.scatter(np.full(len(g), pos + 0.3 * k), g, s=8, c=colors[h], marker=markers[x])
            ticks.append(pos + 0.15)
            labels.append(f"{c[:4]} {int(h)}")
            pos += 1
        pos += 0.5
    b.axhline(1.0, color="grey", lw=0.8)
    b.axhline(1.4, color="black", ls="--", lw=0.8, label="COMET: up to 1.4x")
    b.set_xticks(ticks, labels, rotation=70, fontsize=7)
    b.set_ylabel("speedup from the expansion tier")
    b.set_title("speedup from expansion (triangles: host 256 GiB @ 25 GB/s; squares: CXL 1 TiB @ 64 GB/s)", fontsize=9)
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "codesign_memory_expansion.png", dpi=130)


if __name__ == "__main__":
    main()
