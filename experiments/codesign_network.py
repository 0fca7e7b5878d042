"""Network and collective co-design (as in the Manoa / MiMatrix co-designed clusters).

Part A: which all-reduce algorithm (ring, tree, hierarchical 2-D, direct) is fastest by message size
and group size, on H100-class links (NVLink 450 GB/s per direction, 400 Gb/s NIC per GPU, the default
profile's efficiencies and latencies), for four layouts: contiguous ranks in 8-GPU NVLink domains,
one rank per node (a data-parallel group), contiguous ranks in 72-GPU domains, and contiguous ranks
behind a 4:1 oversubscribed spine.

Part B: what each network upgrade buys. Three workloads on H100 clusters; for each network variant
(per-GPU bandwidth 200/400/800 Gb/s, spine oversubscription 2:1 or 1:1, NVLink domain 8 or 72, and the
collective algorithm choice) the fastest feasible plan out of ~4,000 is found; the upgrade's capital
cost per GPU (experiments/data/network_prices.yaml, amortized over 4 years) is added to the GPU-hour
price to get the change in cost per token.

Writes results/codesign_network_algorithms.csv/.png and results/codesign_network_upgrades.csv/.png.
"""
from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import yaml

from codesign_common import HERE, RESULTS, best_plans, grid, gpu_columns, model_columns, plan_label

from cosearch.fingerprint import model_fingerprint
from cosearch.model import collectives as coll
from cosearch.model.profile import DEFAULT_PROFILE as P

PRICES = yaml.safe_load((HERE / "data" / "network_prices.yaml").read_text())
HOURS = PRICES["amortization_years"] * 8760.0

# ----------------------------------------------------------------------------- part A
LAYOUTS = {
    "contiguous ranks, 8-GPU NVLink domains": dict(stride=1.0, domain=8.0, oversub=1.0, leaf=np.nan),
    "one rank per node (DP group), 8-GPU domains": dict(stride=8.0, domain=8.0, oversub=1.0, leaf=np.nan),
    "contiguous ranks, 72-GPU NVLink domains": dict(stride=1.0, domain=72.0, oversub=1.0, leaf=np.nan),
    "contiguous ranks, 8-GPU domains, 4:1 spine (one domain per leaf)": dict(stride=1.0, domain=8.0, oversub=4.0, leaf=np.nan),
}
SIZES_B = 2.0 ** np.arange(10, 35)       # 1 KiB .. 16 GiB
GROUPS = 2.0 ** np.arange(1, 14)         # 2 .. 8192 ranks


def algorithm_maps() -> pd.DataFrame:
    nvl = 450e9 * P.nvlink_efficiency
    net = 400e9 / 8 * P.network_efficiency
    rows = []
    for name, lay in LAYOUTS.items():
        f = coll.Fabric(nvl, net, P.nvlink_latency_s, P.network_latency_s, lay["domain"], lay["oversub"], lay["leaf"])
        M, N = np.meshgrid(SIZES_B, GROUPS, indexing="ij")
        times = coll.algorithm_times_s("all_reduce", M, N, lay["stride"], f)
        legacy = coll.legacy_time_s("all_reduce", M, N, lay["stride"], f)
        stack = np.stack([times[a] for a in coll.ALGORITHMS])
        win = np.argmin(stack, axis=0)
        best = stack.min(axis=0)
        for i in range(M.shape[0]):
            for j in range(M.shape[1]):
                rows.append(dict(layout=name, bytes=M[i, j], ranks=N[i, j], winner=coll.ALGORITHMS[win[i, j]],
                                 best_s=best[i, j], nccl_envelope_s=legacy[i, j],
                                 **{f"{a}_s": times[a][i, j] for a in coll.ALGORITHMS}))
    return pd.DataFrame(rows)


def summarize_maps(df: pd.DataFrame) -> dict:
    out = {}
    for name, g in df.groupby("layout", sort=False):
        d = {}
        for n in (8, 64, 1024, 8192):
            h = g[g["ranks"] == n].sort_values("bytes")
            d[f"{n} ranks"] = " | ".join(
                f"{w} {_fmt_bytes(s['bytes'].min())}-{_fmt_bytes(s['bytes'].max())}"
                for w, s in _runs(h))
        ring_vs_best = (g["ring_s"] / g["best_s"])
        d["ring_slowdown_vs_best_max"] = float(ring_vs_best.max())
        env = g["best_s"] / g["nccl_envelope_s"]
        d["best_over_nccl_envelope_range"] = [float(env.min()), float(env.max())]
        d["share_of_cells_won"] = g["winner"].value_counts(normalize=True).round(3).to_dict()
        out[name] = d
    return out


def _runs(h: pd.DataFrame):
    """Consecutive runs of the same winner along message size."""
    start = 0
    w = h["winner"].to_numpy()
    for k in range(1, len(w) + 1):
        if k == len(w) or w[k] != w[start]:
            yield w[start], h.iloc[start:k]
            start = k


def _fmt_bytes(b: float) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= f:
            return f"{b / f:g} {unit}"
    return f"{b:g} B"


def plot_maps(df: pd.DataFrame) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    cmap = ListedColormap(colors)
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5), sharex=True, sharey=True)
    for ax, (name, g) in zip(axes.flat, df.groupby("layout", sort=False)):
        code = g["winner"].map({a: i for i, a in enumerate(coll.ALGORITHMS)}).to_numpy().reshape(len(SIZES_B), len(GROUPS))
        ax.imshow(code.T, origin="lower", aspect="auto", cmap=cmap, vmin=-0.5, vmax=3.5,
                  extent=(np.log2(SIZES_B[0]) - 0.5, np.log2(SIZES_B[-1]) + 0.5, 0.5, np.log2(GROUPS[-1]) + 0.5))
        ax.set_title(name, fontsize=9)
        xt = np.arange(10, 35, 4)
        ax.set_xticks(xt, [_fmt_bytes(2.0**x) for x in xt], fontsize=7, rotation=30)
        yt = np.arange(1, 14, 2)
        ax.set_yticks(yt, [str(int(2**y)) for y in yt], fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("all-reduce message size")
    for ax in axes[:, 0]:
        ax.set_ylabel("ranks in the group")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors]
    fig.suptitle("fastest all-reduce algorithm (alpha-beta model, H100-class links; ties read as the first listed)",
                 y=0.995, fontsize=10)
    fig.legend(handles, coll.ALGORITHMS, loc="upper center", ncol=4, bbox_to_anchor=(0.5, 0.965))
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(RESULTS / "codesign_network_algorithms.png", dpi=130)


# ----------------------------------------------------------------------------- part B
WORKLOADS = {
    "gpt3-175b @ 1024 H100": dict(model="gpt3-175b", gpus=1024, global_batch=1536),
    "llama3-70b @ 1024 H100": dict(model="llama3-70b", gpus=1024, global_batch=1024),
    "llama3-405b @ 2048 H100": dict(model="llama3-405b", gpus=2048, global_batch=1024),
}
#: network variants: per-GPU Gb/s, oversubscription, NVLink domain, collective algorithm
VARIANTS = {
    "baseline: 200G, 2:1, NVL8": (200, 2.0, 8, "nccl"),
    "auto collectives (software)": (200, 2.0, 8, "auto"),
    "400G per GPU": (400, 2.0, 8, "nccl"),
    "800G per GPU": (800, 2.0, 8, "nccl"),
    "full bisection (1:1)": (200, 1.0, 8, "nccl"),
    "400G + 1:1 (SuperPOD-like)": (400, 1.0, 8, "nccl"),
    "NVLink domain 72": (200, 2.0, 72, "nccl"),
    "NVL72 + 400G + 1:1": (400, 1.0, 72, "nccl"),
    "NVL72 + 400G + 1:1 + auto": (400, 1.0, 72, "auto"),
}


def network_capex_per_gpu(gbps: float, oversub: float, domain: float) -> float:
    nic, port, link = PRICES["nic_usd"][gbps], PRICES["switch_port_usd"][gbps], PRICES["link_usd"][gbps]
    capex = nic + (1.0 + 2.0 / oversub) * port + (1.0 + 1.0 / oversub) * link
    if domain > 8:
        capex += PRICES["nvlink_domain_72_extra_usd_per_gpu"]
    return capex


def upgrades() -> pd.DataFrame:
    rows = []
    plans = grid({"tp": [1, 2, 4, 8, 16, 32], "pp": [1, 2, 4, 8, 16, 32], "cp": [1, 2], "microbatch": [1, 2, 4],
                  "interleave": [1, 2], "recompute": [0, 1, 2], "zero": [0, 1, 3]})
    for wname, w in WORKLOADS.items():
        fixed = dict(model_columns(w["model"]), **gpu_columns("h100-sxm"))
        fixed.update(gpus=float(w["gpus"]), global_batch=float(w["global_batch"]), sequence_parallel=1.0)
        conf = {k: [] for k in ("network_gbps", "oversubscription", "nvlink_domain", "tp_collective", "dp_collective")}
        for gbps, s, dom, alg in VARIANTS.values():
            code = float(coll.COLLECTIVE_CODES[alg])
            for k, v in zip(conf, (gbps, s, dom, code, code)):
                conf[k].append(float(v))
        conf = {k: np.array(v) for k, v in conf.items()}
        best = best_plans(conf, plans, fixed, keep=("mfu", "time_tp_comm_s", "time_dp_comm_s", "time_pp_comm_s",
                                                    "time_cp_comm_s", "time_bubble_s"))
        for i, (vname, (gbps, s, dom, alg)) in enumerate(VARIANTS.items()):
            row = dict(workload=wname, variant=vname, network_gbps=gbps, oversubscription=s, nvlink_domain=dom,
                       collectives=alg, network_capex_usd_per_gpu=network_capex_per_gpu(gbps, s, dom))
            row.update({k: v[i] for k, v in best.items() if k != "plan_index"})
            row["plan"] = plan_label({k: best[k][i] for k in plans} | {"cp": best["cp"][i]}) + f" cp{int(best['cp'][i])}"
            rows.append(row)
    df = pd.DataFrame(rows)
    price = gpu_columns("h100-sxm")["price_usd_per_gpu_hour"]
    base = df[df["variant"] == next(iter(VARIANTS))].set_index("workload")
    df["speedup"] = df["workload"].map(base["step_time_s"]) / df["step_time_s"]
    df["step_time_saved_pct"] = 100 * (1 - 1 / df["speedup"])
    df["extra_capex_usd_per_gpu"] = df["network_capex_usd_per_gpu"] - df["workload"].map(base["network_capex_usd_per_gpu"])
    df["extra_usd_per_gpu_hour"] = df["extra_capex_usd_per_gpu"] / HOURS
    df["cost_per_token_change_pct"] = 100 * ((price + df["extra_usd_per_gpu_hour"]) / price / df["speedup"] - 1)
    df["step_time_saved_pct_per_1k_usd_per_gpu"] = np.where(
        df["extra_capex_usd_per_gpu"] > 0, df["step_time_saved_pct"] / (df["extra_capex_usd_per_gpu"] / 1000), np.nan)
    # the NVLink-72 price is an assumption: does the verdict survive twice the price?
    dom72 = df["nvlink_domain"] > 8
    double = df["extra_usd_per_gpu_hour"] + np.where(dom72, PRICES["nvlink_domain_72_extra_usd_per_gpu"] / HOURS, 0.0)
    df["cost_per_token_change_pct_nvl72_price_x2"] = 100 * ((price + double) / price / df["speedup"] - 1)
    return df


def plot_upgrades(df: pd.DataFrame) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(VARIANTS)[1:]
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    y = np.arange(len(variants))
    for k, (wname, g) in enumerate(df.groupby("workload", sort=False)):
        g = g.set_index("variant").loc[variants]
        a.barh(y + 0.27 * (k - 1), g["step_time_saved_pct"], height=0.27, label=wname)
        b.barh(y + 0.27 * (k - 1), g["cost_per_token_change_pct"], height=0.27, label=wname)
    a.set_yticks(y, [f"{v} (+${df.loc[df['variant'] == v, 'extra_capex_usd_per_gpu'].iloc[0]:,.0f}/GPU)" for v in variants],
                 fontsize=8)
    a.invert_yaxis()
    a.set_xlabel("step time saved vs baseline (%)")
    b.set_xlabel("cost per token vs baseline (%), capex amortized over 4 years")
    b.axvline(0, color="grey", lw=0.8)
    a.legend(fontsize=8)
    a.set_title("what each network upgrade buys (best plan per variant)", fontsize=10)
    b.set_title("and what it costs (H100 at $2.99/GPU-h + amortized network capex)", fontsize=10)
    fig.tight_layout()
    fig.savefig(RESULTS / "codesign_network_upgrades.png", dpi=130)


def main() -> None:
    t0 = time.perf_counter()
    RESULTS.mkdir(exist_ok=True)
    maps = algorithm_maps()
    maps.to_csv(RESULTS / "codesign_network_algorithms.csv", index=False)
    plot_maps(maps)
    summary = {"algorithms": summarize_maps(maps)}
    df = upgrades()
    df.to_csv(RESULTS / "codesign_network_upgrades.csv", index=False)
    plot_upgrades(df)
    cols = ["workload", "variant", "step_time_s", "speedup", "extra_capex_usd_per_gpu", "cost_per_token_change_pct",
            "cost_per_token_change_pct_nvl72_price_x2", "mfu", "plan"]
    with pd.option_context("display.width", 250, "display.max_columns", 20, "display.max_colwidth", 60):
        print(df[cols].round(3).to_string(index=False))
    summary["upgrades"] = df[cols].round(4).to_dict("records")
    summary["seconds"] = time.perf_counter() - t0
    summary["model_fingerprint"] = model_fingerprint()
    print(json.dumps(summary["algorithms"], indent=1))
    (RESULTS / "codesign_network.json").write_text(json.dumps(summary, indent=1, default=float))
    print(f"{summary['seconds']:.1f} s")


if __name__ == "__main__":
    main()
