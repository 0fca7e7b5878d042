"""Burst parallelism and multiplexing (DeepPool, Park et al. MLSys 2022) at 8-1,024 GPUs.

Strong scaling at a fixed global batch of 1,024 sequences (GPT-3 1.3B, 2,048 tokens each; 1 sequence
per GPU at 1,024 GPUs) on A100-80GB, plain data parallelism (tp = pp = 1, no ZeRO, as DeepPool's
baseline), on two networks: 100 Gbit/s per GPU (the bandwidth DeepPool's planner assumes:
``CostSim(netBw=1.25E4)`` bytes/us in DeepPoolML/DeepPool parallelizationPlanner.py) and 25 Gbit/s per
GPU (one 200 Gbit/s NIC per 8-GPU node). Four modes per GPU count:

  dp          uniform data parallelism on every GPU (the baseline)
  dp+mux      the same plan with a background job in its idle GPU time
  burst       per-block widths minimizing the step time (no amplification limit)
  deeppool    burst with DeepPool's amplification limit 2.0 (its planner's default) + multiplexing

Total cluster throughput = foreground + background tokens/s; the background job is this model's own
work at its compute rate on one GPU, losing ``interference`` of the idle time (0.25 assumed; 0 and
0.5 as sensitivity). DeepPool's published result (abstract, MLSys 2022 final version): 1.2-2.3x total
cluster throughput over data parallelism with a single task when the cluster is large; the arXiv v1
abstract (2112.10065) and the authors' 2021 talk state 2.2-2.4x. Their models were CNNs (VGG-16,
WideResNet, Inception v3: the repository's examples/ and beModules/, background jobs at batch 16/32)
profiled on A100s; ours is a transformer, whose layers are identical, so burst parallelism has less
unevenness across layers to exploit (only the logits head differs) and the gains come from
multiplexing the GPUs a narrower foreground leaves.

Writes results/deeppool_burst.json, results/deeppool_burst.png and results/deeppool_burst.html.
Runtime: a few seconds.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cosearch.fingerprint import model_fingerprint  # noqa: E402
from cosearch.model.evaluate import evaluate  # noqa: E402
from cosearch.scenario import load_scenario, scenario_columns  # noqa: E402

RESULTS = HERE / "results"
MODEL, BATCH, GPU = "gpt3-1.3b", 1024, "a100-80gb"
GPU_COUNTS = [8, 16, 32, 64, 128, 256, 512, 1024]
NETWORKS_GBPS = [100.0, 25.0]
INTERFERENCE = [0.0, 0.25, 0.5]
PUBLISHED = {
    "total_throughput_gain_mlsys22": [1.2, 2.3],
    "total_throughput_gain_arxiv_v1": [2.2, 2.4],
    "source": "Park, Fried, Kim, Alizadeh, Belay: Efficient Strong Scaling Through Burst Parallel Training, "
              "MLSys 2022 (abstract; arXiv 2112.10065 v1 abstract: 2.2-2.4x)",
    "conditions": "CNNs (VGG-16, WideResNet, Inception v3) on A100 GPUs, fixed global batch, 'when the cluster "
                  "scale is large'; planner network 100 Gbit/s, amplification limit 2.0",
}
MODES = {
    "dp": {},
    "dp+mux": {"multiplex": True},
    "burst": {"burst": True, "multiplex": False},
    "deeppool": {"burst": True, "multiplex": True, "burst_amplification": 2.0},
}


def run_mode(gpus: int, net: float, plan: dict) -> dict:
    sc = {"model": MODEL, "training": {"global_batch": BATCH},
          "cluster": {"gpu": GPU, "gpus": gpus, "network_gbps": net}, "plan": plan}
    out = evaluate(scenario_columns(load_scenario(sc)))
    get = lambda k, d=np.nan: float(out[k]) if k in out else d  # noqa: E731
    return {"step_time_s": get("step_time_s"), "tokens_per_s": get("tokens_per_s"),
            "total_tokens_per_s": get("total_tokens_per_s", get("tokens_per_s")),
            "background_tokens_per_s": get("background_tokens_per_s", 0.0), "idle_share": get("idle_share"),
            "burst_min_dp": get("burst_min_dp", float(gpus)), "feasible": bool(out["feasible"])}


def main() -> None:
    rows = []
    for net in NETWORKS_GBPS:
        for g in GPU_COUNTS:
            base = run_mode(g, net, MODES["dp"])
            for mode, plan in MODES.items():
                for i in (INTERFERENCE if "multiplex" in plan and plan["multiplex"] else [None]):
                    p = dict(plan, **({"multiplex_interference": i} if i is not None else {}))
                    r = run_mode(g, net, p)
                    rows.append({"network_gbps": net, "gpus": g, "mode": mode, "interference": i, **r,
                                 "fg_speedup": base["step_time_s"] / r["step_time_s"],
                                 "total_gain": r["total_tokens_per_s"] / base["tokens_per_s"]})
    print(f"{MODEL}, global batch {BATCH} x 2048 tokens, {GPU}, plain data parallelism; interference 0.25 "
          "(0 / 0.5 in brackets)")
    print(f"{'net':>5} {'GPUs':>5} {'dp step s':>10} {'dp idle':>8} {'burst x':>8} {'mux gain':>9} "
          f"{'DeepPool fg x':>13} {'min dp':>7} {'DeepPool total gain':>24}")
    for net in NETWORKS_GBPS:
        for g in GPU_COUNTS:
            sel = {(r["mode"], r["interference"]): r for r in rows if r["network_gbps"] == net and r["gpus"] == g}
            d, b = sel[("dp", None)], sel[("burst", None)]
            m, dp0 = sel[("dp+mux", 0.25)], sel[("deeppool", 0.25)]
            lo, hi = sel[("deeppool", 0.5)]["total_gain"], sel[("deeppool", 0.0)]["total_gain"]
            print(f"{net:>5.0f} {g:>5} {d['step_time_s']:>10.3f} {d['idle_share']:>8.1%} {b['fg_speedup']:>8.3f} "
                  f"{m['total_gain']:>9.2f} {dp0['fg_speedup']:>13.2f} {dp0['burst_min_dp']:>7.0f} "
                  f"{dp0['total_gain']:>9.2f} [{hi:.2f} / {lo:.2f}]")
    print(f"published (DeepPool, large clusters): {PUBLISHED['total_throughput_gain_mlsys22'][0]}-"
          f"{PUBLISHED['total_throughput_gain_mlsys22'][1]}x total cluster throughput (MLSys'22), "
          f"{PUBLISHED['total_throughput_gain_arxiv_v1'][0]}-{PUBLISHED['total_throughput_gain_arxiv_v1'][1]}x (arXiv v1)")
    RESULTS.mkdir(exist_ok=True)
    payload = {"model": MODEL, "global_batch": BATCH, "seq_len": 2048, "gpu": GPU, "published": PUBLISHED, "rows": rows,
               "model_fingerprint": model_fingerprint()}
    (RESULTS / "deeppool_burst.json").write_text(json.dumps(payload, indent=1))
    plot(rows)


def _series(rows, net, mode, key, interference=0.25):
    pts = [r for r in rows if r["network_gbps"] == net and r["mode"] == mode
           and (r["interference"] is None or r["interference"] == interference)]
    return [r["gpus"] for r in pts], [r[key] for r in pts]


def plot(rows) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    lo, hi = PUBLISHED["total_throughput_gain_mlsys22"]
    fig, axes = plt.subplots(1, len(NETWORKS_GBPS), figsize=(12, 4.5), sharey=True)
    web = make_subplots(rows=1, cols=len(NETWORKS_GBPS), shared_yaxes=True,
                        subplot_titles=[f"{n:.0f} Gbit/s per GPU" for n in NETWORKS_GBPS])
    for j, net in enumerate(NETWORKS_GBPS):
        ax = axes[j]
        ax.axhspan(lo, hi, color="0.85", label="DeepPool published (1.2-2.3x)")
        web.add_hrect(y0=lo, y1=hi, fillcolor="lightgrey", opacity=0.5, line_width=0, row=1, col=j + 1)
        for mode, key, style in (("dp+mux", "total_gain", "s--"), ("burst", "fg_speedup", "o:"),
                                 ("deeppool", "total_gain", "D-"), ("deeppool", "fg_speedup", "v-.")):
            x, y = _series(rows, net, mode, key)
            name = f"{mode} {'total throughput' if key == 'total_gain' else 'foreground speed'}"
            ax.plot(x, y, style, label=name)
            web.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=name, legendgroup=name,
                                     showlegend=j == 0), row=1, col=j + 1)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{MODEL}, batch {BATCH}, {GPU}, {net:.0f} Gbit/s per GPU")
        ax.set_xlabel("GPUs")
        web.update_xaxes(type="log", title_text="GPUs", row=1, col=j + 1)
    axes[0].set_ylabel("relative to data parallelism")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "deeppool_burst.png", dpi=130)
    web.update_yaxes(title_text="relative to data parallelism", row=1, col=1)
    web.update_layout(title=f"DeepPool burst parallelism and multiplexing: {MODEL}, batch {BATCH}, {GPU} "
                      "(interference 0.25; grey band: DeepPool's published 1.2-2.3x)")
    web.write_html(RESULTS / "deeppool_burst.html", include_plotlyjs="cdn")


if __name__ == "__main__":
    main()
