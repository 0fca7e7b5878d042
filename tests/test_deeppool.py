"""DeepPool burst parallelism and multiplexing (cosearch.model.burst): hand-computed schedules,
multiplexed throughput arithmetic, the burst-never-slower invariant, the scenario/space edges."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import optuna
import pytest

import cosearch
from cosearch.errors import CosearchError
from cosearch.model import burst
from cosearch.model.collectives import Fabric
from cosearch.model.columns import INPUT_COLUMNS
from cosearch.model.evaluate import burst_schedule, evaluate, evaluate_scalar
from cosearch.scenario import load_scenario, scenario_columns
from cosearch.search.space import parse_space
from cosearch.study import best, run_study


def _two_layer(trans_s):
    """Two layers on widths (4, 2, 1) GPUs. Layer A scales (1.0, 1.5, 3.0 s), layer B is
    sync-bound and fastest on 2 GPUs (4.0, 2.0, 2.5 s); busy = the compute part (A: 4/w, B: 4/w s)."""
    widths = np.array([[4.0, 2.0, 1.0]])
    a, b = np.array([[1.0, 1.5, 3.0]]), np.array([[4.0, 2.0, 2.5]])
    busy_a = busy_b = np.array([[1.0, 2.0, 4.0]])
    trans = np.where(np.eye(3, dtype=bool), 0.0, trans_s)[None]
    return burst.shortest_schedule([(a, busy_a, 1), (b, busy_b, 1)], trans, widths, widths, record=True)


def test_two_layer_optimum_by_hand():
    # paths (A, B): (4,4) 1+4 = 5; (4,2) 1+2+0.3 = 3.3; (2,2) 1.5+2 = 3.5; (4,1) 1+2.5+0.3 = 3.8;
    # (2,1) 1.5+2.5+0.3 = 4.3; (1,1) 3+2.5 = 5.5; (2,4) 1.5+4+0.3; (1,2) 3+2+0.3 -> (4,2) at 3.3 s
    step, busy_gpu_s, min_w, path = _two_layer(0.3)
    assert step[0] == pytest.approx(3.3)
    assert path.tolist() == [[0, 1]]          # A on 4 GPUs, B on 2
    assert min_w[0] == 2.0
    assert busy_gpu_s[0] == pytest.approx(4 * 1.0 + 2 * 2.0)  # GPUs x busy seconds of each layer
    # a dearer transition (0.6 s): (4,2) costs 3.6 > (2,2) at 3.5 -> both layers on 2 GPUs
    step, _, _, path = _two_layer(0.6)
    assert step[0] == pytest.approx(3.5) and path.tolist() == [[1, 1]]


def test_repeated_stage_shortcut_is_exact():
    """The steady-state shortcut over identical blocks equals stepping through every block."""
    rng = np.random.default_rng(3)
    widths = np.array([[8.0, 4.0, 2.0, 1.0]] * 5)
    cost = rng.uniform(1, 3, (5, 4))
    busy = rng.uniform(0.5, 1, (5, 4))
    head = rng.uniform(0.1, 2, (5, 4))
    trans = rng.uniform(0.0, 0.5, (5, 4, 4)) * (1 - np.eye(4))
    stages = [(cost, busy, 60), (head, busy, 1)]
    fast = burst.shortest_schedule(stages, trans, widths, widths)
    slow = burst.shortest_schedule(stages, trans, widths, widths, record=True)
    for f, s in zip(fast[:3], slow[:3]):
        np.testing.assert_allclose(f, s, rtol=1e-9)


def test_block_costs_sum_to_the_uniform_step():
    # step 10 s, micro-batch work 8 s (busy 7 s, head 2 s), 4 layers of 20 % of the parameters each:
    # rest = 2 s; t_layer = (8-2)/4 + 0.2*2 = 1.9 s; t_head = 2 + (1-0.8)*2 = 2.4 s; 4*1.9 + 2.4 = 10
    t_layer, t_head, b_layer, b_head = burst.block_costs(10.0, 8.0, 7.0, 2.0, 4.0, 0.2)
    assert (t_layer, t_head) == pytest.approx((1.9, 2.4))
    assert (b_layer, b_head) == pytest.approx(((7.0 - 2.0) / 4, 2.0))
    assert 4 * t_layer + t_head == pytest.approx(10.0)


def test_transition_moves_the_missing_sequences():
    # 8 sequences of 4 tokens x hidden 2 (16 B each) from 4 GPUs to 2: each of the 2 receives
    # 8*(1/2-1/4) = 2 sequences = 32 B; at 16 B/s and 0.5 s latency, forward + backward: 2*(2+0.5) = 5 s
    fab = Fabric(16.0, 1.0, 0.5, 9.0, 1e9)
    t = burst.transition_s(np.array([[4.0, 2.0]]), 8.0, 4.0, 2.0, 1.0, 1.0, fab)
    assert t[0, 0, 1] == pytest.approx(5.0) and t[0, 1, 0] == pytest.approx(5.0) and t[0, 0, 0] == 0.0


def test_amplification_limit():
    # GPU time w*t: 4*1.0 = 4, 2*1.5 = 3, 1*2.5 = 2.5 (narrowest): limit 1.5 allows <= 3.75 -> widths 2, 1
    ok = burst.amplification_ok(np.array([[1.0, 1.5, 2.5]]), np.array([[4.0, 2.0, 1.0]]), np.array([1.5]))
    assert ok.tolist() == [[False, True, True]]
    assert burst.amplification_ok(np.array([[1.0, 1.5, 2.5]]), np.array([[4.0, 2.0, 1.0]]), np.array([np.nan])).all()


def test_background_throughput_arithmetic():
    # 30 idle GPU-s in a 10 s step = 3 GPUs' worth; 1000 tokens/s per GPU standalone; 25 % lost
    assert burst.background_tokens_per_s(30.0, 10.0, 1000.0, 0.25) == pytest.approx(3 * 1000 * 0.75)


SC = {"model": "gpt3-1.3b", "training": {"global_batch": 512},
      "cluster": {"gpu": "a100-80gb", "gpus": 256, "network_gbps": 25}, "plan": {}}


def _cols(**plan):
    return scenario_columns(load_scenario({**SC, "plan": plan}))


def test_multiplexed_throughput_from_the_plain_model():
    plain = evaluate(_cols())
    mux = evaluate(_cols(multiplex=True, background_tokens_per_gpu_s=1000.0, multiplex_interference=0.1))
    gpus, step = 256.0, plain["step_time_s"]
    idle = gpus * (step - plain["time_compute_s"] - plain["time_recompute_s"])
    assert mux["step_time_s"] == step
    assert mux["idle_gpu_s"] == pytest.approx(idle, rel=1e-12)
    assert mux["background_tokens_per_s"] == pytest.approx(idle / step * 1000.0 * 0.9, rel=1e-12)
    assert mux["total_tokens_per_s"] == pytest.approx(plain["tokens_per_s"] + idle / step * 900.0, rel=1e-12)
    # no multiplexing: nothing runs in the idle time; features absent: no new columns at all
    off = evaluate(_cols(multiplex=False))
    assert off["background_tokens_per_s"] == 0.0 and off["total_tokens_per_s"] == plain["tokens_per_s"]
    assert "total_tokens_per_s" not in plain and "idle_gpu_s" not in plain


@pytest.mark.parametrize("model,batch,gpu,net", [
    ("gpt3-1.3b", 512, "a100-80gb", 25), ("gpt3-1.3b", 256, "h100-sxm", 400), ("llama3-8b", 512, "h100-sxm", 50),
])
@pytest.mark.parametrize("gpus", [16, 128, 512])
def test_burst_never_slower_than_the_best_uniform_width(model, batch, gpu, net, gpus):
    plan = {"burst": True, "zero": 1, "burst_block_layers": 3}
    sc = {"model": model, "training": {"global_batch": batch},
          "cluster": {"gpu": gpu, "gpus": gpus, "network_gbps": net}, "plan": plan}
    cols = scenario_columns(load_scenario(sc))
    out = evaluate(cols)
    # the uniform plan at every width dp/2**k, evaluated independently (no burst columns)
    base = scenario_columns(load_scenario({**sc, "plan": {"zero": 1}}))
    widths = gpus / 2.0 ** np.arange(burst.BURST_WIDTHS)
    widths = widths[widths >= 1]
    uni = evaluate({**base, "dp": widths, "gpus": widths})
    ok = uni["valid"] & uni["fits"]
    best_uniform = uni["step_time_s"][ok].min()
    assert out["step_time_s"] <= best_uniform * (1 + 1e-9)  # every uniform width is a candidate schedule
    if out["valid"] and out["fits"]:  # the plan's own width (an invalid plan's step means nothing)
        assert out["step_time_s"] <= out["uniform_step_time_s"] * (1 + 1e-9)
    assert out["idle_gpu_s"] >= 0.0
    # the scalar path agrees with the vectorized one
    sc_out = evaluate_scalar(cols)
    assert sc_out["step_time_s"] == pytest.approx(out["step_time_s"], rel=1e-12)


def test_amplification_frees_gpus_for_the_background_job():
    fast = evaluate(_cols(burst=True, multiplex=True))
    lean = evaluate(_cols(burst=True, multiplex=True, burst_amplification=1.2))
    assert lean["step_time_s"] >= fast["step_time_s"]
    assert lean["burst_min_dp"] < 256 and lean["idle_gpu_s"] > fast["idle_gpu_s"]
    assert lean["background_tokens_per_s"] > fast["background_tokens_per_s"]


def test_estimate_reports_the_schedule():
    r = cosearch.estimate({**SC, "plan": {"burst": True, "multiplex": True, "burst_amplification": 1.2,
                                          "burst_block_layers": 5}})
    d = r["deeppool"]
    covered = [x["layers"] for x in d["schedule"] if "layers" in x]
    assert covered[0][0] == 1 and covered[-1][1] == 24            # gpt3-1.3b has 24 layers
    assert all(b[0] == a[1] + 1 for a, b in zip(covered, covered[1:]))
    assert d["schedule"][-1]["head"] == "logits"
    assert min(x["dp"] for x in d["schedule"]) == d["burst_min_dp"]
    assert d["burst_speedup"] == pytest.approx(d["uniform_step_time_s"] / r["step_time_s"])
    widths = burst_schedule(_cols(burst=True, burst_block_layers=5))
    assert len(widths) == 5 + 1                                   # ceil(24 / 5) blocks + head


def test_bad_input_names_the_field():
    with pytest.raises(CosearchError, match="plan.burst"):
        cosearch.estimate({**SC, "plan": {"burst": True, "pp": 2}})
    with pytest.raises(CosearchError, match="plan.multiplex_interference"):
        load_scenario({**SC, "plan": {"multiplex": True, "multiplex_interference": 1.5}})
    with pytest.raises(CosearchError, match="plan.multiplex"):
        parse_space({**SC, "cluster": {"gpu": "a100-80gb", "gpus": [64, 128]}, "objectives": ["total_tokens_per_s"]})


def test_cli_exit_code_2(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("model: gpt3-1.3b\ntraining: {global_batch: 512}\ncluster: {gpu: a100-80gb, gpus: 64}\n"
                 "plan: {burst: true, burst_block_layers: 0}\n")
    p = subprocess.run([sys.executable, "-m", "cosearch", "estimate", str(f)], capture_output=True, text=True)
    assert p.returncode == 2 and "plan.burst_block_layers" in p.stderr and "Traceback" not in p.stderr


def test_study_maximizes_total_throughput_exactly():
    sp = parse_space({
        "model": "gpt3-1.3b", "training": {"global_batch": 512},
        "cluster": {"gpu": "a100-80gb", "gpus": [64, 256], "network_gbps": [25, 200]},
        "plan": {"burst": [False, True], "multiplex": [False, True], "burst_amplification": 1.5},
        "objectives": ["total_tokens_per_s"],
    })
    res = run_study(sp, "dp", optuna.storages.InMemoryStorage(), sampler="exhaustive")
    m = sp.evaluate_rows(sp.rows_of_flat(np.arange(int(sp.size))))
    expect = m["total_tokens_per_s"][m["feasible"]].max()
    assert best(res.study)["value"] == pytest.approx(expect, rel=1e-12)


INPUT_DEFAULTS = {k: v for k, v in INPUT_COLUMNS.items() if v is not None}


def test_mixed_batch_equals_rows_one_by_one():
    """Rows of different models and block sizes in one call give each row's own schedule."""
    scs = [{"model": m, "training": {"global_batch": 512}, "cluster": {"gpu": "a100-80gb", "gpus": 128, "network_gbps": 25},
            "plan": {"burst": True, "burst_block_layers": b, "burst_amplification": 1.3, "multiplex": True}}
           for m in ("gpt3-1.3b", "llama3-8b") for b in (1, 5)] + [{**SC, "plan": {"multiplex": True, "burst": False}}]
    cols = [{**INPUT_DEFAULTS, **scenario_columns(load_scenario(s))} for s in scs]
    batch = evaluate({k: np.array([c[k] for c in cols], dtype=float) for k in cols[0]})
    for i, c in enumerate(cols):
        one = evaluate(c)
        for key in ("step_time_s", "memory_gib", "idle_gpu_s", "total_tokens_per_s", "burst_min_dp"):
            assert batch[key][i] == pytest.approx(one[key], rel=1e-12), key


def test_explain_offers_burst_and_its_step_reestimates():
    from cosearch.explain import changed_scenario, explain, rank_changes

    sc = {**SC, "plan": {"multiplex": True, "burst_amplification": 1.2}}
    x = explain(sc)
    assert x["estimate"]["deeppool"]["multiplex"] is True
    ranked = {e["label"]: e for e in rank_changes(load_scenario(sc))}
    e = ranked["burst false -> true"]  # feasible; with the limit it runs narrower, so slower
    assert e["step_time_s"] >= x["estimate"]["step_time_s"]
    r = cosearch.estimate(changed_scenario(load_scenario(sc), e["updates"]))
    assert r["step_time_s"] == pytest.approx(e["step_time_s"], rel=1e-12)


def test_sliced_evaluation_keeps_the_deeppool_columns(monkeypatch):
    """A large input evaluated in slices: a slice whose rows all lack burst/multiplex still reports the
    DeepPool columns of the rows that have them (the same values as unsliced)."""
    ev = sys.modules["cosearch.model.evaluate"]  # the module (cosearch.model.evaluate is also a function)
    cols = {**INPUT_DEFAULTS, **_cols(multiplex=True)}
    n = 40
    batch = {k: np.full(n, v, dtype=float) for k, v in cols.items()}
    batch["multiplex"] = np.where(np.arange(n) < 30, np.nan, 1.0)  # the first slices have none
    whole = evaluate(batch)
    monkeypatch.setattr(ev, "CHUNK_ROWS", 8)
    sliced = evaluate(batch)
    for key in ("total_tokens_per_s", "background_tokens_per_s", "idle_gpu_s", "step_time_s"):
        np.testing.assert_array_equal(sliced[key], whole[key])
    assert (whole["background_tokens_per_s"][:30] == 0).all() and (whole["background_tokens_per_s"][30:] > 0).all()
