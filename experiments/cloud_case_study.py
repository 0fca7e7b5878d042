"""Cloud case study: train a 70B model on 1T tokens within 30 days, as cheaply as possible.

Enumerates, with the vectorized model (cosearch.cloud.evaluate_cloud), every instance type of the
catalog x instance count x parallel plan (tp, pp, micro-batch, recompute, ZeRO stage, interleave)
x pricing (on-demand, spot), with the optimal (Young/Daly) checkpoint interval, and reports:

1. the cheapest plan per provider that meets the deadline with 90 % probability (P90 time <= 30 days),
   on-demand and spot;
2. on-demand vs spot across revocation rates: for every provider with spot, the cheapest spot plan
   re-optimized at each rate from 1e-4 to 1 revocation per instance-hour, against the cheapest
   on-demand plan; the crossover rate where spot stops paying;
3. the Pareto front of expected days vs expected dollars over everything.

Usage: python experiments/cloud_case_study.py [--model llama2-70b] [--tokens 1e12] [--deadline-days 30]
Writes experiments/results/cloud_case_study_{cheapest,crossover,pareto}.csv, cloud_case_study.json and
cloud_case_study_{crossover,pareto}.png.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cosearch.fingerprint import model_fingerprint  # noqa: E402
from cosearch.cloud import INSTANCE_COLUMNS, evaluate_cloud, instance_codes, load_catalog, transient_metrics  # noqa: E402
from cosearch.model.columns import RECOMPUTE_CODES  # noqa: E402
from cosearch.scenario import load_scenario, scenario_columns  # noqa: E402

OUT = HERE / "results"
#: Columns the instance type decides (evaluate_cloud refuses them from the caller), and the derived dp.
HW = (*INSTANCE_COLUMNS, "dp")
COUNTS = (4, 8, 12, 16, 18, 24, 32, 36, 48, 64, 72, 96, 128, 144, 192, 256, 288, 384, 512)
PLANS = dict(tp=(1, 2, 4, 8), pp=(1, 2, 4, 8, 16), microbatch=(1, 2, 4), recompute=(0, 1, 2), zero=(1, 3), interleave=(1, 2))
RECOMPUTE_NAMES = {v: k for k, v in RECOMPUTE_CODES.items()}


def grid(model: str, tokens: float, global_batch: int):
    """Model columns (without hardware) x instance types x counts x plans, as flat arrays."""
    base = scenario_columns(load_scenario({"model": model, "training": {"global_batch": global_batch, "tokens": tokens},
                                           "cluster": {"gpu": "h100-sxm", "gpus": 8}}))
    for k in HW:
        base.pop(k)
    codes = instance_codes()
    axes = dict(instance=tuple(codes.values()), instances=COUNTS, **PLANS)
    mesh = np.meshgrid(*[np.asarray(v, dtype=float) for v in axes.values()], indexing="ij")
    cols = {k: m.reshape(-1) for k, m in zip(axes, mesh)}
    cols["sequence_parallel"] = (cols["tp"] > 1).astype(float)
    n = cols["tp"].size
    return {**{k: np.full(n, v) for k, v in base.items()}, **cols}


def evaluate(cols, spot: int, deadline_days: float):
    out = evaluate_cloud({**cols, "spot": np.full(cols["tp"].size, float(spot))}, deadline_days=deadline_days)
    keep = np.asarray(out["feasible"]) & np.isfinite(out["cost_to_train_usd"])
    return out, keep


def frame(cols, out, keep, spot: int, keys) -> pd.DataFrame:
    idx = np.flatnonzero(keep)
    df = pd.DataFrame({
        "instance_type": [keys[int(i)] for i in cols["instance"][idx]],
        "instances": cols["instances"][idx].astype(int), "gpus": out["gpus"][idx].astype(int),
        "tp": cols["tp"][idx].astype(int), "pp": cols["pp"][idx].astype(int), "dp": out["dp"][idx].astype(int),
        "microbatch": cols["microbatch"][idx].astype(int), "interleave": cols["interleave"][idx].astype(int),
        "recompute": [RECOMPUTE_NAMES[int(r)] for r in cols["recompute"][idx]], "zero": cols["zero"][idx].astype(int),
        "pricing": "spot" if spot else "on_demand",
        "step_time_s": out["step_time_s"][idx], "mfu": out["mfu"][idx], "memory_gib": out["memory_gib"][idx],
        "ideal_days": out["ideal_time_to_train_days"][idx], "expected_days": out["expected_time_to_train_days"][idx],
        "p90_days": out["p90_time_to_train_days"][idx], "expected_cost_usd": out["expected_cost_to_train_usd"][idx],
        "p10_cost_usd": out["p10_cost_to_train_usd"][idx], "p90_cost_usd": out["p90_cost_to_train_usd"][idx],
        "interruptions_per_hour": out["interruptions_per_hour"][idx], "checkpoint_interval_h": out["checkpoint_interval_h"][idx],
        "checkpoint_write_s": out["checkpoint_write_s"][idx], "p_meet_deadline": out["p_meet_deadline"][idx],
        "row": idx,
    })
    df.insert(0, "provider", df["instance_type"].str.split("/").str[0])
    return df


def pareto(days: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points (minimize both), sorted by days."""
    order = np.lexsort((cost, days))
    best = np.minimum.accumulate(cost[order])
    keep = np.ones(order.size, dtype=bool)
    keep[1:] = cost[order][1:] < best[:-1]
    return order[keep]


def crossover(cols, out_spot, keep_spot, od_best: dict, deadline_days: float, rates: np.ndarray, keys) -> pd.DataFrame:
    """Cheapest spot plan per provider re-optimized at each revocation rate (deadline by P90)."""
    cat = load_catalog()
    a = cat.arrays()
    idx = np.flatnonzero(keep_spot)
    inst = cols["instance"][idx].astype(int)
    n = cols["instances"][idx]
    work_h = out_spot["ideal_time_to_train_days"][idx] * 24.0
    price = a["spot_usd_per_hour"][inst]
    fail = a["failure_per_hour"][inst]
    storage = a["storage_gbps"][inst]
    providers = np.array([keys[i].split("/")[0] for i in inst])
    rows = []
    for r in rates:
        m = transient_metrics(work_h, out_spot["params"][idx], n, price, r + fail, cat.defaults.restart_s, storage)
        ok = m["p90_time_to_train_days"] <= deadline_days
        for prov in sorted(set(providers)):
            sel = ok & (providers == prov)
            rec = {"provider": prov, "revocation_per_instance_hour": r, "on_demand_best_usd": od_best.get(prov, np.nan)}
            if sel.any():
                j = np.flatnonzero(sel)[np.argmin(m["expected_cost_to_train_usd"][sel])]
                rec.update(spot_best_usd=m["expected_cost_to_train_usd"][j], spot_p90_usd=m["p90_cost_to_train_usd"][j],
                           spot_expected_days=m["expected_time_to_train_days"][j], spot_p90_days=m["p90_time_to_train_days"][j],
                           spot_instance=keys[inst[j]], spot_instances=int(n[j]), spot_overhead=m["overhead_fraction"][j])
            else:
                rec.update(spot_best_usd=np.nan)
            rows.append(rec)
    return pd.DataFrame(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="llama2-70b")
    ap.add_argument("--tokens", type=float, default=1e12)
    ap.add_argument("--global-batch", type=int, default=1024, help="sequences per step (1024 x 4096 = 4M tokens, as Llama 2)")
    ap.add_argument("--deadline-days", type=float, default=30.0)
    args = ap.parse_args()
    t0 = time.time()
    keys = list(instance_codes())
    cols = grid(args.model, args.tokens, args.global_batch)
    n_rows = cols["tp"].size
    res = {}
    for spot in (0, 1):
        out, keep = evaluate(cols, spot, args.deadline_days)
        res[spot] = (out, keep, frame(cols, out, keep, spot, keys))
    t_eval = time.time() - t0
    allf = pd.concat([res[0][2], res[1][2]], ignore_index=True)
    meets = allf[allf["p90_days"] <= args.deadline_days]

    # 1. cheapest per provider and pricing under the deadline
    cheapest = (meets.sort_values("expected_cost_usd").groupby(["provider", "pricing"], as_index=False).first()
                .sort_values(["provider", "pricing"]))
    od_best = {r.provider: r.expected_cost_usd for r in cheapest[cheapest.pricing == "on_demand"].itertuples()}

    # 2. on-demand vs spot across revocation rates
    rates = np.logspace(-4, 0, 41)
    cross = crossover(cols, res[1][0], res[1][1], od_best, args.deadline_days, rates, keys)
    crossings = {}
    for prov, g in cross.groupby("provider"):
        worse = (g["spot_best_usd"] >= g["on_demand_best_usd"]) | g["spot_best_usd"].isna()
        crossings[str(prov)] = float(g["revocation_per_instance_hour"][worse].min()) if worse.any() else None

    # 3. Pareto front of expected days vs dollars (everything, any deadline)
    front = allf.iloc[pareto(allf["expected_days"].to_numpy(), allf["expected_cost_usd"].to_numpy())]

    OUT.mkdir(exist_ok=True)
    drop = ["row"]
    cheapest.drop(columns=drop).to_csv(OUT / "cloud_case_study_cheapest.csv", index=False)
    cross.to_csv(OUT / "cloud_case_study_crossover.csv", index=False)
    front.drop(columns=drop).to_csv(OUT / "cloud_case_study_pareto.csv", index=False)
    cat = load_catalog()
    summary = {
        "model": args.model, "tokens": args.tokens, "global_batch": args.global_batch, "deadline_days": args.deadline_days,
        "deadline_rule": "P90 wall time <= deadline (interruptions: spot revocations at the catalog default rate plus hardware failures)",
        "configurations": int(n_rows) * 2, "feasible": int(len(allf)), "meet_deadline": int(len(meets)),
        "evaluate_seconds": round(t_eval, 2),
        "cheapest": json.loads(cheapest.drop(columns=drop).to_json(orient="records")),
        "crossover_revocation_per_instance_hour": crossings,
        "crossover_rule": "lowest swept rate at which the cheapest spot plan meeting the deadline costs more than the cheapest on-demand plan, or no spot plan meets the deadline",
        "catalog_default_revocation_per_instance_hour": {k: it.revocation_per_hour for k, it in cat.instances.items() if it.has_spot},
        "pareto_points": int(len(front)),
        "model_fingerprint": model_fingerprint(),
    }
    (OUT / "cloud_case_study.json").write_text(json.dumps(summary, indent=2))
    plots(cross, front, allf, cheapest, args, cat)

    pd.set_option("display.width", 220)
    show = ["provider", "pricing", "instance_type", "instances", "gpus", "tp", "pp", "dp", "microbatch", "interleave", "recompute",
            "zero", "mfu", "expected_days", "p90_days", "expected_cost_usd", "p10_cost_usd", "p90_cost_usd"]
    print(f"{n_rows * 2:,} configurations evaluated in {t_eval:.1f} s; {len(allf):,} feasible; {len(meets):,} meet P90 <= {args.deadline_days:g} days")
    print(cheapest[show].to_string(index=False, float_format=lambda x: f"{x:,.3g}" if abs(x) < 100 else f"{x:,.0f}"))
    print("spot stops paying (dearer than on-demand, or no spot plan meets the deadline) at revocations per instance-hour:", crossings)
    print(f"Pareto front: {len(front)} points")
    return 0


def plots(cross, front, allf, cheapest, args, cat) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"aws": "#ff9900", "gcp": "#4285f4", "azure": "#008ad7", "lambda": "#6b3fa0", "coreweave": "#2ca02c"}
    fig, ax = plt.subplots(figsize=(8, 5))
    for prov, g in cross.groupby("provider"):
        c = colors.get(prov, "k")
        ax.plot(g["revocation_per_instance_hour"], g["spot_best_usd"] / 1e6, "-", color=c, label=f"{prov} spot (best plan per rate)")
        ax.axhline(g["on_demand_best_usd"].iloc[0] / 1e6, color=c, ls="--", lw=1, label=f"{prov} on-demand best")
        defaults = [it.revocation_per_hour for it in cat.instances.values() if it.provider == prov and it.has_spot]
        if defaults:
            ax.axvline(max(defaults), color=c, ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("spot revocations per instance-hour (dotted: catalog default)")
    ax.set_ylabel("expected cost to train, million USD")
    ax.set_title(f"{args.model}, {args.tokens:.0e} tokens, P90 <= {args.deadline_days:g} days: spot vs on-demand")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(OUT / "cloud_case_study_crossover.png", dpi=130)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 5))
    sample = allf.sample(min(len(allf), 20000), random_state=0)
    for prov, g in sample.groupby("provider"):
        ax.scatter(g["expected_days"], g["expected_cost_usd"] / 1e6, s=2, alpha=0.15, color=colors.get(prov, "k"))
    for (prov, pricing), g in front.groupby(["provider", "pricing"]):
        ax.scatter(g["expected_days"], g["expected_cost_usd"] / 1e6, s=28, color=colors.get(prov, "k"),
                   marker="o" if pricing == "on_demand" else "^", edgecolor="k", lw=0.5, label=f"{prov} {pricing}", zorder=3)
    ax.plot(front["expected_days"], front["expected_cost_usd"] / 1e6, "k-", lw=0.8, zorder=2)
    ax.axvline(args.deadline_days, color="r", ls="--", lw=1, label=f"{args.deadline_days:g}-day deadline")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("expected days to train")
    ax.set_ylabel("expected cost, million USD")
    ax.set_title("Pareto front of days vs dollars (points: 20k sampled feasible configurations)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(OUT / "cloud_case_study_pareto.png", dpi=130)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
