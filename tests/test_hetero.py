"""Heterogeneous GPU inventories (issue 14): the exact split, the composed step time and memory per type,
one-type inventories equal the homogeneous model, the search's optimum against enumeration, bad input."""
from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

import cosearch
from cosearch.errors import CosearchError
from cosearch.model.evaluate import evaluate_parts
from cosearch.model.split import balanced_split
from cosearch.model.profile import DEFAULT_PROFILE
from cosearch.search.space import parse_space

GIB = 2.0**30


def _split(total, count, w, e, cap=None):
    col = lambda x: np.asarray(x, dtype=float)[:, None]  # noqa: E731 - one row
    t, n, units, ok = balanced_split(np.array([float(total)]), col(count), col(w), col(e),
                                     None if cap is None else col(cap))
    return float(t[0]), n[:, 0], units[:, 0], bool(ok[0])


def test_two_type_split_by_hand():
    # One H100 stage (1.0 s per layer) before one A100 stage (3.0 s per layer, + 1.0 s of logits), 10 layers.
    # At T the H100 stage takes floor(T / 1) layers, the A100 stage floor((T - 1) / 3):
    #   T = 7: 7 + 2 = 9 < 10;   T = 8: 8 + 2 = 10 -> T* = 8 (H100 8 layers: 8 s; A100 2 layers: 2*3 + 1 = 7 s)
    t, n, units, ok = _split(10, [1, 1], [1.0, 3.0], [0.0, 1.0])
    assert ok and t == 8.0 and list(units) == [8.0, 2.0]
    # 1F1B with m = 4 micro-batches: (m - 1) * max + sum of the stage times = 3*8 + (8 + 7) = 39 s
    assert 3 * t + sum(units * np.array([1.0, 3.0]) + np.array([0.0, 1.0])) == 39.0
    # a memory cap of 6 layers on the H100 stage moves layers to the A100: 6 + floor((T-1)/3) >= 10 -> T = 13
    t, n, units, ok = _split(10, [1, 1], [1.0, 3.0], [0.0, 1.0], cap=[6, 100])
    assert ok and t == 13.0 and list(units) == [6.0, 4.0]
    # caps too small for the layers: infeasible
    assert not _split(10, [1, 1], [1.0, 3.0], [0.0, 1.0], cap=[4, 4])[3]


def test_split_matches_enumeration():
    rng = np.random.default_rng(7)
    for _ in range(150):
        groups = int(rng.integers(1, 4))
        count = rng.integers(0, 4, size=groups).astype(float)
        count[0] = max(count[0], 1.0)
        w, e = rng.uniform(0.5, 3.0, groups), rng.uniform(0.0, 2.0, groups)
        cap = rng.integers(1, 8, groups).astype(float)
        total = int(rng.integers(count.sum(), 5 * count.sum() + 1))
        members = [g for g in range(groups) for _ in range(int(count[g]))]
        best = min((max(e[g] + k * w[g] for g, k in zip(members, ks))
                    for ks in itertools.product(*[range(1, int(cap[g]) + 1) for g in members]) if sum(ks) == total),
                   default=None)
        t, n, units, ok = _split(total, count, w, e, cap)
        assert ok == (best is not None)
        if ok:
            assert t == pytest.approx(best, rel=1e-12)
            assert units.sum() == total and np.all(n <= np.where(count > 0, cap, 0))


BASE = {"model": {"layers": 24, "hidden": 2048, "heads": 16, "vocab": 51200, "seq_len": 2048},
        "training": {"global_batch": 8, "tokens": 1.0e10}}


def _estimate(inventory, **plan):
    return cosearch.estimate({**BASE, "cluster": {"inventory": inventory}, "plan": plan})


def test_two_type_pipeline_step_and_memory_by_hand():
    # 1 H100 stage then 1 A100 stage (both 80 GB: inventory order), tp = dp = 1, m = 8 micro-batches of 1
    r = _estimate({"h100-sxm": 1, "a100-80gb": 1}, microbatch=1, zero=0)
    l_h, l_a = r["layers_by_type"]["h100-sxm"], r["layers_by_type"]["a100-80gb"]
    assert l_h + l_a == 24 and l_h > l_a  # the faster GPU holds more layers
    # per-layer and per-micro-batch times of each type, from the homogeneous model on that type
    def parts(gpu):
        cols = cosearch.scenario_columns(cosearch.load_scenario({**BASE, "cluster": {"gpu": gpu, "gpus": 2},
                                                                 "plan": {"pp": 2}}))
        return evaluate_parts(cols)[1]
    ph, pa = parts("h100-sxm"), parts("a100-80gb")
    layer = lambda q: (q["layer_compute_s"] + q["layer_recompute_s"] + q["layer_tp_s"] + q["layer_cp_s"]).item()  # noqa: E731
    w_h, w_a, logits_a = layer(ph), layer(pa), pa["logits_s"].item()
    a100 = cosearch.estimate({**BASE, "cluster": {"gpu": "a100-80gb", "gpus": 2}, "plan": {"pp": 2}})
    send = a100["breakdown_s"]["pp_comm"] / 8  # pipeline sends per micro-batch at the slower (A100) links
    t_h, t_a = l_h * w_h + send, l_a * w_a + send + logits_a
    # balanced: moving one layer either way makes the slower stage slower
    assert max(t_h, t_a) <= max(t_h + w_h, t_a - w_a) and max(t_h, t_a) <= max(t_h - w_h, t_a + w_a)
    # step = (m - 1) * max + (t_h + t_a) + optimizer of the slower stage end (dp = 1: no reduction);
    # Adam moves 28 bytes per parameter at the HBM rate; a layer holds 12 h^2 parameters, each end stage V*h
    h, V = 2048, 51200
    opt = max((l * 12 * h * h + V * h) * 28 / (tb * 1e12 * DEFAULT_PROFILE.hbm_efficiency)
              for l, tb in ((l_h, 3.35), (l_a, 2.039)))
    assert r["step_time_s"] == pytest.approx(7 * max(t_h, t_a) + t_h + t_a + opt, rel=1e-9)
    # memory: 16 bytes per parameter (2 weights + 2 gradients + 12 Adam, ZeRO 0); a layer keeps 32*s*b*h bytes
    # (flash attention, no dropout, tp = 1: Korthikanti et al. 2022 less the masks); the first stage holds
    # min(m, 2) = 2 micro-batches in flight, the last one and the fp32 logits (6*s*b*V bytes)
    s, b = 2048, 1
    act = 32 * s * b * h
    mem_h = 16 * (l_h * 12 * h * h + V * h) + l_h * 2 * act
    mem_a = 16 * (l_a * 12 * h * h + V * h) + l_a * 1 * act + 6 * s * b * V
    assert r["memory_gib_by_type"]["h100-sxm"] * GIB == pytest.approx(mem_h, rel=1e-12)
    assert r["memory_gib_by_type"]["a100-80gb"] * GIB == pytest.approx(mem_a, rel=1e-12)
    assert r["gpus_by_type"] == {"h100-sxm": 1, "a100-80gb": 1} and r["gpus"] == 2


def test_data_composition_splits_the_batch_by_speed():
    r = cosearch.estimate({**BASE, "training": {"global_batch": 64}, "cluster": {"inventory": {"h100-sxm": 2, "a100-80gb": 2}},
                           "plan": {"hetero": "data"}})
    mb = r["microbatches_by_type"]
    # 2 replicas of each type; every sequence of the batch is in exactly one micro-batch
    assert r["dp_by_type"] == {"h100-sxm": 2, "a100-80gb": 2}
    assert mb["h100-sxm"] > mb["a100-80gb"] >= 1
    assert 2 * mb["h100-sxm"] + 2 * mb["a100-80gb"] >= 64
    # memory per type equals the homogeneous replica's with the optimizer sharded the same way (dp = 4)
    for gpu in ("h100-sxm", "a100-80gb"):
        hom = cosearch.estimate({**BASE, "training": {"global_batch": 4 * mb[gpu]}, "cluster": {"gpu": gpu, "gpus": 4}})
        assert r["memory_gib_by_type"][gpu] == pytest.approx(hom["memory_gib"], rel=1e-12)


@pytest.mark.parametrize("hetero,plan", [("pipeline", {"tp": 2, "dp": 2}), ("data", {"tp": 2, "pp": 2})])
def test_one_type_inventory_equals_homogeneous(hetero, plan):
    r = _estimate({"h100-sxm": 16}, hetero=hetero, zero=1, **plan)
    size = {"pp": 16 // 4} if hetero == "pipeline" else {"dp": 16 // 4}
    h = cosearch.estimate({**BASE, "cluster": {"gpu": "h100-sxm", "gpus": 16}, "plan": {"zero": 1, **plan, **size}})
    for key in ("step_time_s", "memory_gib", "mfu", "cost_to_train_usd", "breakdown_s", "memory_breakdown_gib", "fits"):
        assert r[key] == h[key], key
    # an inventory of two types whose plan uses one of them is the same job
    r2 = _estimate({"h100-sxm": 16, "a100-80gb": 8}, hetero=hetero, zero=1, gpus_by_type={"a100-80gb": 0}, **plan)
    assert r2["step_time_s"] == h["step_time_s"] and r2["memory_gib_by_type"]["h100-sxm"] == h["memory_gib"]


SPACE = {
    "model": BASE["model"], "training": {"global_batch": 16, "tokens": 1.0e10},
    "cluster": {"inventory": {"h100-sxm": 4, "a100-80gb": [4, 8]}},
    "plan": {"hetero": ["pipeline", "data"], "gpus_by_type": {"h100-sxm": [0, 2, 4], "a100-80gb": [0, 4, 8]},
             "tp": [1, 2], "dp": [1, 2], "pp": [1, 2], "recompute": ["none", "full"]},
    "objectives": ["step_time_s"],
}


def test_search_finds_the_enumerated_optimum(tmp_path):
    from cosearch.search.space import parse_space
    from cosearch.study import best, load_study, run_study

    space = parse_space(SPACE)
    assert space.size == 2 * 2 * 3 * 3 * 2 * 2 * 2 * 2
    storage = f"sqlite:///{tmp_path}/s.db"
    run_study(space, "inv", storage=storage, sampler="exhaustive")
    found = best(load_study("inv", storage))
    # enumeration: every point through cosearch.estimate (the scalar path, one scenario at a time)
    grid = []
    for d in space.dims:
        grid.append([(d.path, c) for c in d.choices])
    truth = np.inf
    for combo in itertools.product(*grid):
        try:
            r = cosearch.estimate(space.scenario(dict(combo)))
        except CosearchError:
            continue
        if r["fits"]:
            truth = min(truth, r["step_time_s"])
    assert np.isfinite(truth)
    assert found["metrics"]["step_time_s"] == pytest.approx(truth, rel=1e-12)


@pytest.mark.parametrize("cluster,plan,field", [
    ({"inventory": {"h100-sxm": 8}, "gpu": "h100-sxm"}, {}, "cluster.gpu"),
    ({"inventory": {"h100-sxx": 8}}, {}, "cluster.inventory"),
    ({"inventory": {}}, {}, "cluster.inventory"),
    ({"inventory": {"h100-sxm": -1}}, {}, "cluster.inventory.h100-sxm"),
    ({"inventory": {"h100-sxm": 8}, "network_gbps": 100}, {}, "cluster.network_gbps"),
    ({"inventory": {"h100-sxm": 8}}, {"gpus_by_type": {"h100-sxm": 16}}, "plan.gpus_by_type.h100-sxm"),
    ({"inventory": {"h100-sxm": 8}}, {"gpus_by_type": {"a100-80gb": 8}}, "plan.gpus_by_type.a100-80gb"),
    ({"inventory": {"h100-sxm": 8, "a100-80gb": 8}}, {"zero": 3}, "plan.zero"),
    ({"inventory": {"h100-sxm": 8, "a100-80gb": 6}}, {"tp": 4}, "plan.gpus_by_type.a100-80gb"),
    ({"gpu": "h100-sxm", "gpus": 8}, {"gpus_by_type": {"h100-sxm": 8}}, "plan.gpus_by_type"),
    ({}, {}, "cluster.gpu"),
    ({"inventory": {"h100-sxm": 8, "a100-80gb": 8}}, {"tp": 8}, "training.precision"),  # fp8: A100 has none
    # the mixed compositions run 1F1B/interleaved and no DeepPool: other knobs are refused, not ignored
    ({"inventory": {"h100-sxm": 8, "a100-80gb": 8}}, {"pp": 2, "schedule": "zb-h1"}, "plan.schedule"),
    ({"inventory": {"h100-sxm": 8, "a100-80gb": 8}}, {"hetero": "data", "burst": True}, "plan.burst"),
    ({"inventory": {"h100-sxm": 8, "a100-80gb": 8}}, {"multiplex": True}, "plan.multiplex"),
])
def test_bad_inventory_is_one_line_naming_the_field(cluster, plan, field):
    training = {**BASE["training"], "precision": "fp8"} if field == "training.precision" else BASE["training"]
    with pytest.raises(CosearchError) as err:
        cosearch.estimate({**BASE, "training": training, "cluster": cluster, "plan": plan})
    assert err.value.field == field and "\n" not in str(err.value)


def test_unused_type_without_fp8_does_not_block_an_fp8_plan():
    sc = {**BASE, "training": {**BASE["training"], "precision": "fp8"}}
    mixed = {"inventory": {"h100-sxm": 8, "a100-80gb": 8}}
    r = cosearch.estimate({**sc, "cluster": mixed, "plan": {"tp": 8, "gpus_by_type": {"a100-80gb": 0}}})
    h = cosearch.estimate({**sc, "cluster": {"gpu": "h100-sxm", "gpus": 8}, "plan": {"tp": 8}})
    assert r["step_time_s"] == h["step_time_s"]


@pytest.mark.parametrize("idle,precision", [("v100-32gb", "bf16"), ("t4", "bf16"), ("v100-32gb", "fp8")])
def test_unused_type_without_bf16_does_not_block_the_plan(idle, precision):
    """An idle V100 or T4 (fp16 only) in the inventory: the plan on the H100s is the single-type job, as the
    search path evaluates it (estimate used to refuse it: 'bf16 is not supported on v100-32gb')."""
    sc = {**BASE, "training": {**BASE["training"], "precision": precision}}
    for hetero, plan in (("pipeline", {"tp": 2, "dp": 2}), ("data", {"tp": 2, "pp": 2})):
        r = cosearch.estimate({**sc, "cluster": {"inventory": {"h100-sxm": 16, idle: 8}},
                               "plan": {"hetero": hetero, "gpus_by_type": {idle: 0}, **plan}})
        size = {"pp": 4} if hetero == "pipeline" else {"dp": 4}
        h = cosearch.estimate({**sc, "cluster": {"gpu": "h100-sxm", "gpus": 16}, "plan": {**plan, **size}})
        for key in ("step_time_s", "memory_gib", "mfu", "cost_to_train_usd", "breakdown_s", "memory_breakdown_gib"):
            assert r[key] == h[key], (hetero, key)
        space = parse_space({**sc, "cluster": {"inventory": {"h100-sxm": 16, idle: 8}},
                             "plan": {"hetero": hetero, "gpus_by_type": {idle: 0}, "microbatch": [1, 2], **plan},
                             "objectives": ["step_time_s"]}, prune=False)
        out = space.evaluate_rows(np.array([[0.0]]))
        assert bool(out["valid"][0]) and out["step_time_s"][0] == r["step_time_s"]


def test_one_type_inventory_with_burst_equals_homogeneous():
    """DeepPool burst on an inventory plan that uses one type: estimate's burst schedule is the single-type job's
    (it used to fail with 'columns: missing model input columns: layers, ...')."""
    plan = {"tp": 2, "burst": True, "burst_block_layers": 4, "multiplex": True}
    r = cosearch.estimate({**BASE, "training": {**BASE["training"], "global_batch": 64},
                           "cluster": {"inventory": {"h100-sxm": 16, "a100-80gb": 8}},
                           "plan": {**plan, "hetero": "data", "gpus_by_type": {"a100-80gb": 0}}})
    h = cosearch.estimate({**BASE, "training": {**BASE["training"], "global_batch": 64},
                           "cluster": {"gpu": "h100-sxm", "gpus": 16}, "plan": plan})
    assert r["deeppool"] == h["deeppool"] and r["deeppool"]["schedule"]
    assert r["step_time_s"] == h["step_time_s"]


def test_cli_estimate_reports_by_type(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text(json.dumps({**BASE, "cluster": {"inventory": {"h100-sxm": 2, "a100-80gb": 2}}}))
    out = subprocess.run([sys.executable, "-m", "cosearch", "estimate", str(path), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["gpus_by_type"] == {"h100-sxm": 2, "a100-80gb": 2} and set(r["memory_gib_by_type"]) == {"h100-sxm", "a100-80gb"}
    path.write_text(json.dumps({**BASE, "cluster": {"inventory": {"h100-sxm": 2}, "gpus": 2}}))
    bad = subprocess.run([sys.executable, "-m", "cosearch", "estimate", str(path)], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "cluster.gpus" in bad.stderr


def test_calibrated_range_warns_per_type_in_use():
    rng = {"rows": 3, "gpu_types": ["h100-sxm"], "params_b": (0.1, 100.0), "gpus": (1, 64), "seq_len": (1024, 4096)}
    r = cosearch.estimate({**BASE, "cluster": {"inventory": {"h100-sxm": 2, "a100-80gb": 2}}}, calibrated_range=rng)
    assert [w for w in r["warnings"] if "calibrated" in w] == [
        "cluster.gpu a100-80gb is outside the calibrated range (profile fitted on h100-sxm)"]


def test_cli_run_pareto_best_report_explain_on_an_inventory(tmp_path, capsys):
    from cosearch.cli import main


    space = tmp_path / "space.yaml"
    space.write_text(json.dumps({**SPACE, "objectives": ["step_time_s", "cost_usd_per_step"]}))
    store = ["--storage", str(tmp_path / "j.journal")]
    assert main(["run", str(space), "--study", "inv", *store]) == 0
    assert main(["pareto", "--study", "inv", *store]) == 0
    table = capsys.readouterr().out
    head = table[table.index("┏"):table.index("┡")]  # the header rows (long names wrap onto two lines)
    assert all(word in head for word in ("have", "use", "a100-80gb", "h100-sxm", "hetero"))
    assert main(["best", "--study", "inv", *store, "--json"]) == 0
    best = json.loads(capsys.readouterr().out)
    scenario = tmp_path / "best.yaml"
    scenario.write_text(json.dumps(best["scenario"]))
    assert "inventory" in best["scenario"]["cluster"] and "gpus" not in best["scenario"]["cluster"]
    assert main(["explain", str(scenario)]) == 0
    assert "inventory" in capsys.readouterr().out  # the header names the inventory and the GPUs in use
    assert main(["report", "--study", "inv", *store, "--out", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").stat().st_size > 0


def test_mixed_rows_with_unmodelled_schedule_or_burst_are_invalid():
    """Vectorized guard (search spaces): a zero-bubble/DualPipe schedule or DeepPool knob on a row that
    mixes types is flagged invalid, 1F1B/interleaved and absent knobs are not."""
    from cosearch.model.hetero import composable
    from cosearch.model.schedules import SCHEDULE_CODES

    nan = np.nan
    sched = np.array([nan, SCHEDULE_CODES["1f1b"], SCHEDULE_CODES["interleaved"], SCHEDULE_CODES["zb-h1"],
                      SCHEDULE_CODES["dualpipe"], nan, nan])
    burst = np.array([nan, nan, nan, nan, nan, 1.0, 0.0])
    ok = composable({"schedule": sched, "burst": burst, "multiplex": np.full(7, nan)})
    assert ok.tolist() == [True, True, True, False, False, False, True]


def test_a_batch_whose_rows_use_no_gpu_has_every_metric():
    """One-trial batches (random/gp samplers) of an inventory space: a row that uses no GPU type got only
    ``valid`` back, and the study step read ``feasible`` (KeyError). Every metric is there, blank."""
    sp = cosearch.load_space("searchspaces/hetero-inventory.yaml")
    rows = sp.rows_of_flat(np.arange(int(sp.size)))
    out = sp.evaluate_rows(rows)
    # a row with every gpus_by_type 0, evaluated alone (one row per call)
    none = [r for r, sc in zip(rows, sp.scenarios(rows)) if not any(sc["plan"]["gpus_by_type"].values())][:1]
    assert none, "the shipped inventory space has a plan that uses no GPU"
    one = sp.evaluate_rows(np.array(none))
    assert set(one) == set(out)
    assert not one["valid"][0] and not one["feasible"][0] and np.isnan(one["step_time_s"][0])
