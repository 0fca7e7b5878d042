"""Mixed GPU inventories against the best homogeneous subset (issue 14, experiment a).

Question 1, "how should I use the GPUs I have": for each inventory below, every plan of the space
(how many GPUs of each type, pipeline or data composition, tp, pp, dp, micro-batch, recompute, ZeRO) is
evaluated by cosearch.model.hetero; we compare the fastest plan that mixes types with the fastest plan
on one type only, and the time-vs-cost Pareto fronts of each. Question 2, "which GPUs should I add":
an owner of 128 A100 80GB may add 0-256 H100 SXM; the fastest plan per addition and its cost.

Published heterogeneous-training results are printed beside ours with their conditions. They measure
speed-ups of their planners over *other planners* on the same mixed cluster (mostly plans made for one
GPU type run on mixed hardware), not over the best homogeneous subset, so they bound the size of the
effect; they do not validate our numbers.

Writes results/hetero_inventory.json, .csv, .png (matplotlib, the report's axis helpers) and .html
(plotly; plotly.js from its CDN to keep the file small).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cosearch.fingerprint import model_fingerprint  # noqa: E402
from cosearch.search.pareto import pareto_mask  # noqa: E402
from cosearch.search.space import parse_space  # noqa: E402

RESULTS = HERE / "results"
PLAN = {
    "hetero": ["pipeline", "data"], "tp": [2, 4, 8], "pp": [1, 2, 4, 8], "dp": [1, 2, 4, 8, 16],
    "microbatch": [1, 2], "recompute": ["selective", "full"], "sequence_parallel": True, "zero": [1, 2],
}
CASES = {
    "llama2-70b on 64 H100 + 128 A100-80GB": dict(
        model="llama2-70b", batch=1024, tokens=2.0e12, inventory={"h100-sxm": 64, "a100-80gb": 128},
        use={"h100-sxm": [0, 16, 32, 48, 64], "a100-80gb": [0, 32, 64, 96, 128]}),
    "llama2-13b on 32 A100-40GB + 64 V100-32GB": dict(
        model="llama2-13b", batch=512, tokens=1.0e12, precision="fp16", inventory={"a100-40gb": 32, "v100-32gb": 64},
        use={"a100-40gb": [0, 8, 16, 24, 32], "v100-32gb": [0, 16, 32, 48, 64]}),
    "gpt3-175b on 256 H100 + 512 A100-40GB": dict(
        model="gpt3-175b", batch=1536, tokens=3.0e11, inventory={"h100-sxm": 256, "a100-40gb": 512},
        use={"h100-sxm": [0, 64, 128, 256], "a100-40gb": [0, 128, 256, 512]}),
}
ADD = dict(model="llama2-70b", batch=1024, tokens=2.0e12, own={"a100-80gb": 128}, add="h100-sxm",
           counts=[0, 32, 64, 128, 192, 256])
#: Published results, with the conditions they were measured under (abstracts / paper pages).
ANCHORS = [
    {"system": "HetPipe (Park et al., USENIX ATC'20)", "result": "DNN models converge up to 49 % faster than with state-of-the-art "
                   "data parallelism",
     "conditions": "one heterogeneous GPU cluster that includes 'whimpy' GPUs (too small to train alone); pipelined virtual "
                   "workers plus data parallelism against data parallelism on the same cluster"},
    {"system": "Metis (Um et al., USENIX ATC'24)", "result": "1.05-8.43x training speed-up over traditional planning methods",
     "conditions": "GPT-3, MoE and Wide-ResNet on combinations of three GPU types; near the oracle (fastest) plan"},
    {"system": "Cephalo (Guo et al., ICS'25, arXiv 2411.01075)", "result": "1.2-10.8x higher training throughput than state-of-the-art methods",
     "conditions": "transformer models on clusters mixing higher- and lower-end GPUs; baselines split work by compute "
                   "capacity and are limited by memory, Cephalo also supports larger models and batches"},
    {"system": "Sailor (Strati et al., SOSP'25, arXiv 2504.17096)", "result": "co-optimizes which GPUs to use with the plan "
                   "(throughput and cost); its heterogeneous setup mixes A100-40GB and V100-16GB (OPT-350M, paper fig. 8b)",
     "conditions": "planners compared on one mixed cluster; per-GPU micro-batch sizes; the figure's numbers are not "
                   "transcribed here"},
]


def space_of(case: dict, use: dict) -> dict:
    return {"model": case["model"],
            "training": {"global_batch": case["batch"], "tokens": case["tokens"], "precision": case.get("precision", "bf16")},
            "cluster": {"inventory": case["inventory"]}, "plan": {**PLAN, "gpus_by_type": use},
            "objectives": ["time_to_train_days", "cost_to_train_usd"]}


def enumerate_space(spec: dict, names: list[str]) -> pd.DataFrame:
    space = parse_space(spec)
    parts = []
    for _, assign in space.iter_chunks():
        out = space.evaluate(assign)
        keep = out["feasible"]
        df = pd.DataFrame({k: np.asarray(out[k])[keep] for k in ("time_to_train_days", "cost_to_train_usd", "step_time_s",
                                                                   "mfu", "memory_gib", "gpus")})
        for n in names:
            for key, col in (("gpus_by_type", "use"), ("pp_by_type", "pp"), ("dp_by_type", "dp")):
                df[f"{col} {n}"] = np.asarray(out[f"{key}.{n}"])[keep]
        df["hetero"] = np.where(np.asarray(assign["plan.hetero"].codes)[keep] == 0, "pipeline", "data") \
            if hasattr(assign["plan.hetero"], "codes") else "pipeline"
        for key in ("plan.tp", "plan.microbatch"):
            df[key.split(".")[1]] = np.asarray(assign[key])[keep]
        parts.append(df)
    df = pd.concat(parts, ignore_index=True)
    used = (df[[f"use {n}" for n in names]] > 0).sum(axis=1)
    df["class"] = np.where(used > 1, "mixed", "")
    for n in names:
        df.loc[(used == 1) & (df[f"use {n}"] > 0), "class"] = f"{n} only"
    return df


def front(df: pd.DataFrame) -> pd.DataFrame:
    m = pareto_mask(df[["time_to_train_days", "cost_to_train_usd"]].to_numpy())
    return df[m].sort_values("time_to_train_days")


def usage_case(title: str, case: dict) -> dict:
    names = list(case["inventory"])
    df = enumerate_space(space_of(case, case["use"]), names)
    best = {c: g.loc[g["time_to_train_days"].idxmin()] for c, g in df.groupby("class")}
    homog = min((v for c, v in best.items() if c != "mixed"), key=lambda r: r["time_to_train_days"])
    mixed = best.get("mixed")
    row = {"case": title, "points_feasible": len(df)}
    for c, r in best.items():
        row[c] = {"days": float(r["time_to_train_days"]), "cost_usd": float(r["cost_to_train_usd"]),
                  "step_time_s": float(r["step_time_s"]),
                  "gpus": {n: int(r[f"use {n}"]) for n in names}, "hetero": r["hetero"],
                  "plan": f"tp={int(r['tp'])} mb={int(r['microbatch'])} " + ", ".join(
                      f"{n}: pp {int(r[f'pp {n}'])} x dp {int(r[f'dp {n}'])}" for n in names if r[f"use {n}"]),
                  "mfu": float(r["mfu"])}
    homs = [v for c, v in best.items() if c != "mixed"]
    # reference: every type training at its own best rate, with no cost of combining them
    row["sum_of_parts_days"] = float(1.0 / sum(1.0 / r["time_to_train_days"] for r in homs)) if len(homs) > 1 else None
    if mixed is not None:
        row["mixed_speedup_vs_best_homogeneous"] = float(homog["time_to_train_days"] / mixed["time_to_train_days"])
        row["mixed_cost_ratio_vs_best_homogeneous"] = float(mixed["cost_to_train_usd"] / homog["cost_to_train_usd"])
    row["fronts"] = {"any": front(df)[["time_to_train_days", "cost_to_train_usd", "class"]].to_dict("records"),
                     "homogeneous": front(df[df["class"] != "mixed"])[["time_to_train_days", "cost_to_train_usd", "class"]].to_dict("records")}
    return row


def add_case() -> list[dict]:
    rows = []
    for k in ADD["counts"]:
        inv = {**ADD["own"], ADD["add"]: k} if k else dict(ADD["own"])
        use = {"a100-80gb": [0, 32, 64, 96, 128] if k else [32, 64, 96, 128]}
        if k:
            use[ADD["add"]] = sorted({0, k // 4, k // 2, 3 * k // 4, k})
        case = dict(ADD, inventory=inv)
        df = enumerate_space(space_of(case, use), list(inv))
        r = df.loc[df["time_to_train_days"].idxmin()]
        rows.append({"h100_added": k, "days": float(r["time_to_train_days"]), "cost_usd": float(r["cost_to_train_usd"]),
                     "class": r["class"], "hetero": r["hetero"],
                     "gpus": {n: int(r[f"use {n}"]) for n in inv}})
    return rows


def plot(usage: list[dict], added: list[dict]) -> None:
    from cosearch.visualization._static import _format_axis, _plt

    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    ax = axes[0]
    first = usage[0]
    for key, style in (("any", dict(marker="o", label="mixed inventory allowed")),
                       ("homogeneous", dict(marker="s", label="best homogeneous subset", linestyle="--"))):
        pts = first["fronts"][key]
        ax.step([p["time_to_train_days"] for p in pts], [p["cost_to_train_usd"] for p in pts], where="post", **style)
    ax.set_xlabel("time to train (days)")
    ax.set_ylabel("cost to train (USD)")
    _format_axis(ax.yaxis, "cost_to_train_usd")
    ax.set_title(first["case"] + ": Pareto fronts", fontsize=10)
    ax.legend()
    ax = axes[1]
    ks = [a["h100_added"] for a in added]
    ax.plot(ks, [a["days"] for a in added], marker="o", color="C0")
    ax.set_xlabel("H100 SXM added to 128 A100 80GB")
    ax.set_ylabel("fastest time to train (days)", color="C0")
    ax2 = ax.twinx()
    ax2.plot(ks, [a["cost_usd"] for a in added], marker="s", color="C1")
    ax2.set_ylabel("its cost to train (USD)", color="C1")
    _format_axis(ax2.yaxis, "cost_to_train_usd")
    ax.set_title("which GPUs to add (Llama-2 70B, 2T tokens)", fontsize=10)
    fig.tight_layout()
    fig.savefig(RESULTS / "hetero_inventory.png", dpi=130)

    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    pf = make_subplots(rows=1, cols=2, subplot_titles=(first["case"] + ": Pareto fronts", "which GPUs to add"),
                       specs=[[{}, {"secondary_y": True}]])
    for key, name in (("any", "mixed inventory allowed"), ("homogeneous", "best homogeneous subset")):
        pts = first["fronts"][key]
        pf.add_trace(go.Scatter(x=[p["time_to_train_days"] for p in pts], y=[p["cost_to_train_usd"] for p in pts],
                                mode="lines+markers", line_shape="hv", name=name,
                                text=[p["class"] for p in pts]), row=1, col=1)
    pf.add_trace(go.Scatter(x=ks, y=[a["days"] for a in added], name="days", mode="lines+markers",
                            text=[json.dumps(a["gpus"]) for a in added]), row=1, col=2)
    pf.add_trace(go.Scatter(x=ks, y=[a["cost_usd"] for a in added], name="cost USD", mode="lines+markers"),
                 row=1, col=2, secondary_y=True)
    pf.update_xaxes(title_text="time to train (days)", row=1, col=1)
    pf.update_yaxes(title_text="cost to train (USD)", row=1, col=1)
    pf.update_xaxes(title_text="H100 SXM added to 128 A100 80GB", row=1, col=2)
    pf.write_html(RESULTS / "hetero_inventory.html", include_plotlyjs="cdn")


def main() -> dict:
    RESULTS.mkdir(exist_ok=True)
    usage = [usage_case(t, c) for t, c in CASES.items()]
    added = add_case()
    print(f"{'case':44s} {'class':18s} {'step s':>7s} {'days':>8s} {'cost $M':>8s} {'MFU':>6s}  GPUs used / plan")
    for u in usage:
        for c in sorted(k for k in u if k.endswith("only") or k == "mixed"):
            r = u[c]
            print(f"{u['case']:44s} {c:18s} {r['step_time_s']:7.2f} {r['days']:8.1f} {r['cost_usd'] / 1e6:8.3f} {100 * r['mfu']:5.1f}%  "
                  f"{r['gpus']} {r['hetero']} {r['plan']}")
        if "mixed_speedup_vs_best_homogeneous" in u:
            print(f"{'':44s} mixed vs best homogeneous: {u['mixed_speedup_vs_best_homogeneous']:.2f}x faster, "
                  f"cost x{u['mixed_cost_ratio_vs_best_homogeneous']:.2f}")
        if u.get("sum_of_parts_days") and "mixed" in u:
            print(f"{'':44s} each type at its own best rate, summed: {u['sum_of_parts_days']:.1f} days; the mixed plan "
                  f"reaches {100 * u['sum_of_parts_days'] / u['mixed']['days']:.0f} % of that")
    print("\nwhich GPUs to add (own 128 A100 80GB; Llama-2 70B, 2T tokens):")
    for a in added:
        print(f"  +{a['h100_added']:4d} H100: {a['days']:7.1f} days  ${a['cost_usd'] / 1e6:.3f}M  {a['class']} {a['hetero']} {a['gpus']}")
    print("\npublished results (conditions; they compare planners on one mixed cluster, not against the best homogeneous subset):")
    for a in ANCHORS:
        print(f"  {a['system']}: {a['result']}\n      conditions: {a['conditions']}")
    plot(usage, added)
    rows = [{"case": u["case"], "class": c, **{k: v for k, v in u[c].items() if k != "gpus"}, **{f"use {g}": n for g, n in u[c]["gpus"].items()}}
            for u in usage for c in u if c.endswith("only") or c == "mixed"]
    pd.DataFrame(rows).to_csv(RESULTS / "hetero_inventory.csv", index=False)
    result = {"usage": [{k: v for k, v in u.items() if k != "fronts"} for u in usage], "fronts": {u["case"]: u["fronts"] for u in usage},
              "add_h100": added, "anchors": ANCHORS, "model_fingerprint": model_fingerprint()}
    (RESULTS / "hetero_inventory.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    return result


if __name__ == "__main__":
    main()
