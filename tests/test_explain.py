"""explain(): breakdowns, the limiter on constructed plans, and suggestions the model confirms."""
import copy
import json
import subprocess
import sys

import pytest

from cosearch import estimate, load_scenario
from cosearch.explain import changed_scenario, explain, rank_changes

BASE = {
    "model": "gpt3-175b",
    "training": {"global_batch": 1536, "precision": "bf16", "tokens": 3.0e11},
    "cluster": {"gpu": "a100-80gb", "gpus": 1024},
    "plan": {"tp": 8, "pp": 16, "microbatch": 1, "interleave": 1, "recompute": "full", "sequence_parallel": True, "zero": 1},
}


def _with(**sections):
    sc = copy.deepcopy(BASE)
    for section, values in sections.items():
        sc[section].update(values)
    return sc


def _assert_suggestion_improves(x, sc):
    s = x["suggestion"]
    assert s is not None
    base = estimate(sc)
    again = estimate(s["scenario"])  # the changed scenario, through the public scalar path
    assert again["fits"] and again["step_time_s"] == pytest.approx(s["step_time_s"])
    assert again["step_time_s"] < base["step_time_s"]
    assert s["gain"] == pytest.approx(1 - again["step_time_s"] / base["step_time_s"])
    return s


def test_breakdowns_add_up_and_match_estimate():
    x = explain(BASE)
    r = estimate(BASE)
    assert x["time"]["total_s"] == pytest.approx(r["step_time_s"])
    assert sum(p["seconds"] for p in x["time"]["parts"]) == pytest.approx(r["step_time_s"])
    assert sum(p["share"] for p in x["time"]["parts"]) == pytest.approx(1.0)
    assert sum(p["gib"] for p in x["memory"]["parts"]) == pytest.approx(r["memory_gib"])
    assert x["memory"]["usable_gib"] == pytest.approx(r["usable_memory_gib"])
    assert sum(x["limits"]["shares"].values()) == pytest.approx(1.0)
    json.dumps(x)  # JSON-able


def test_healthy_plan_is_compute_bound():
    x = explain(BASE)
    assert x["limits"]["limiter"] == "compute"


def test_deep_pipeline_with_few_microbatches_is_bubble_bound():
    sc = _with(training={"global_batch": 64})  # dp=8, 8 micro-batches for 16 stages
    x = explain(sc)
    assert x["limits"]["limiter"] == "bubble"
    assert x["limits"]["shares"]["bubble"] > 0.5
    s = _assert_suggestion_improves(x, sc)
    assert estimate(s["scenario"])["breakdown_s"]["bubble"] < estimate(sc)["breakdown_s"]["bubble"]


def test_tiny_network_is_communication_bound_and_more_bandwidth_helps():
    sc = _with(cluster={"network_gbps": 2})
    x = explain(sc)
    assert x["limits"]["limiter"] == "communication"
    assert x["limits"]["largest_overhead"]["link"] == "network"
    s = _assert_suggestion_improves(x, sc)
    assert s["kind"] == "hardware" and "cluster.network_gbps" in s["updates"]
    # the best change on the same hardware is a plan change, and it helps too
    bp = x["best_plan_change"]
    assert bp["kind"] == "plan" and estimate(bp["scenario"])["step_time_s"] < estimate(sc)["step_time_s"]


def test_plan_that_does_not_fit_is_memory_bound_and_suggestion_fits():
    sc = _with(plan={"recompute": "none", "microbatch": 4, "sequence_parallel": False})
    assert not estimate(sc)["fits"]
    x = explain(sc)
    assert x["limits"]["limiter"] == "memory" and x["limits"]["memory_bound"]
    s = x["suggestion"]
    assert s is not None and estimate(s["scenario"])["fits"]


def test_every_ranked_change_matches_the_scalar_model():
    """The vectorized screening and estimate() on the changed scenario agree for every neighbour."""
    sc = load_scenario("examples/gpt3-175b.yaml")
    ranked = rank_changes(sc)
    assert len(ranked) > 10
    for e in ranked:
        r = estimate(changed_scenario(sc, e["updates"]))
        assert r["fits"]
        assert r["step_time_s"] == pytest.approx(e["step_time_s"], rel=1e-9), e["label"]
    steps = [e["step_time_s"] for e in ranked]
    assert steps == sorted(steps)


def test_gpu_count_is_kept_by_mesh_moves():
    sc = load_scenario(BASE)
    for e in rank_changes(sc):
        if e["kind"] == "plan":
            changed = load_scenario(changed_scenario(sc, e["updates"]))
            assert changed.cluster.gpus == 1024


def test_cli_explain_human_and_json(tmp_path, capsys, monkeypatch):
    import yaml

    from cosearch.cli import main

    monkeypatch.setenv("COLUMNS", "120")
    path = tmp_path / "bubble.yaml"
    path.write_text(yaml.safe_dump(_with(training={"global_batch": 64})))
    assert main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    assert "where the step time goes" in out and "where the memory goes" in out
    assert "limited by: bubble" in out and "best change:" in out
    assert main(["explain", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["limits"]["limiter"] == "bubble" and data["suggestion"]["scenario"]["plan"]


def test_cli_explain_gpu_without_a_price(tmp_path, capsys, monkeypatch):
    """A GPU the catalog has no price for (h800) leaves the cost unknown: the human view prints "$-"
    where the cost goes (it raised a TypeError on None before), and the JSON carries null."""
    import yaml

    from cosearch.cli import main

    monkeypatch.setenv("COLUMNS", "120")
    path = tmp_path / "h800.yaml"
    path.write_text(yaml.safe_dump(_with(cluster={"gpu": "h800", "gpus": 1024})))
    assert main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    assert "$- per step" in out and "where the memory goes" in out
    assert main(["explain", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["estimate"]["cost_usd_per_step"] is None


def test_cli_explain_with_nothing_usable(tmp_path, capsys, monkeypatch):
    """An HBM override under the reserved memory leaves 0 GiB usable: the plan does not fit, the memory
    shares have no value ("-" in the table, null in JSON) instead of a ZeroDivisionError."""
    import yaml

    from cosearch.cli import main

    monkeypatch.setenv("COLUMNS", "120")
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(_with(cluster={"gpu": "a100-80gb", "gpus": 1024, "hbm_gib": 1})))
    assert main(["explain", str(path)]) == 0
    assert "DOES NOT FIT" in capsys.readouterr().out
    assert main(["explain", str(path), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["memory"]
    assert m["usable_gib"] == 0 and not m["fits"] and all(p["share_of_usable"] is None for p in m["parts"])


def test_cli_explain_bad_input_is_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model: gpt3-175b\ntraining: {global_batch: 8}\ncluster: {gpu: nope, gpus: 8}\n")
    out = subprocess.run([sys.executable, "-m", "cosearch", "explain", str(path)], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.startswith("error:") and len(out.stderr.strip().splitlines()) == 1


def test_rented_cluster_is_offered_instance_types_not_upgrades():
    """A cloud scenario bound by a 100 Gbit/s-per-node network: the suggestions swap the instance
    type (same GPU count, catalog prices), never a bandwidth the instance does not have, and every
    ranked change re-estimates identically from its changed scenario."""
    sc = {"model": "llama2-70b", "training": {"global_batch": 1024, "tokens": 1.0e12},
          "cloud": {"instance": "lambda/gpu_8x_h100_sxm5", "instances": 32},
          "plan": {"tp": 8, "pp": 1, "microbatch": 1, "recompute": "full", "sequence_parallel": True, "zero": 3}}
    x = explain(sc)
    assert x["limits"]["limiter"] == "communication"
    ranked = rank_changes(load_scenario(sc))
    hardware = [e for e in ranked if e["kind"] == "hardware"]
    assert hardware and all(set(e["updates"]) == {"cloud.instance", "cloud.instances"} for e in hardware)
    for e in ranked:
        changed = changed_scenario(load_scenario(sc), e["updates"])
        r = estimate(changed)
        assert r["step_time_s"] == pytest.approx(e["step_time_s"], rel=1e-9), e["label"]
        assert r["gpus"] == 256  # the same GPUs, rented differently
    # the suggestion moves to an instance type with a faster network and is confirmed by estimate
    s = _assert_suggestion_improves(x, sc)
    if s["kind"] == "hardware":
        new = load_scenario(s["scenario"])
        assert new.cluster.network_gbps > load_scenario(sc).cluster.network_gbps


MOE = {"model": "qwen3-30b-a3b", "training": {"global_batch": 256, "precision": "fp8"},
       "cluster": {"gpu": "h100-sxm", "gpus": 32},
       "plan": {"tp": 1, "pp": 1, "ep": 16, "microbatch": 1, "recompute": "selective", "zero": 1}}


def test_moe_plan_with_cross_node_experts_is_all_to_all_bound_and_ep_moves_help():
    """ep 16 on 8-GPU nodes: half of every token's copies cross the network, the all-to-all dominates;
    explain names it, over the network, and offers the expert-parallel moves, each one the model confirms."""
    x = explain(MOE)
    lim = x["limits"]
    assert lim["limiter"] == "communication" and lim["largest_overhead"]["part"] == "ep_comm"
    assert x["links"]["ep_comm"] == "network"
    assert "expert-parallel all-to-all" in lim["reason"]
    labels = [a["label"] for a in x["alternatives"]]
    assert "ep 16 -> 8" in labels  # the EP group inside one NVLink domain
    assert any(lb.startswith("moe_dispatcher alltoall -> deepep") for lb in labels)
    s = _assert_suggestion_improves(x, MOE)
    assert s["kind"] in ("plan", "hardware")
    for a in x["alternatives"]:
        assert estimate(a["scenario"])["step_time_s"] == pytest.approx(a["step_time_s"])
    inside = copy.deepcopy(MOE)
    inside["plan"]["ep"] = 8
    assert explain(inside)["links"]["ep_comm"] == "NVLink"


def test_dense_plans_get_no_expert_moves():
    from cosearch.explain import neighbours
    from cosearch.scenario import parse_scenario, scenario_columns

    sc = parse_scenario(BASE)
    labels = [c.label for c in neighbours(sc, scenario_columns(sc))]
    assert not any(lb.startswith(("ep ", "etp ", "moe_")) for lb in labels)
    moe = parse_scenario(MOE)
    moe_labels = [c.label for c in neighbours(moe, scenario_columns(moe))]
    assert {"ep 16 -> 8", "ep 16 -> 32", "moe_a2a_overlap 0 -> 1", "moe_fp8_dispatch false -> true"} <= set(moe_labels)


def test_moe_moves_offer_one_launch_grouped_gemms_and_it_saves_time():
    """A per-expert-launch plan (Megatron-Core's) is offered one-launch grouped GEMMs; the move never slows the
    step (it only removes the 25 us host cost of each expert's GEMM launch); a grouped plan is not offered it."""
    from cosearch.neighbours import moe_changes
    from cosearch.scenario import parse_scenario

    sc = parse_scenario(MOE)
    moves = {c.label: c for c in moe_changes(sc)}
    assert "moe_grouped_gemm per_expert -> grouped" in moves
    grouped = copy.deepcopy(MOE)
    grouped["plan"]["moe_grouped_gemm"] = "grouped"
    assert estimate(grouped)["step_time_s"] < estimate(MOE)["step_time_s"]
    assert not any(lb.startswith("moe_grouped_gemm") for lb in (c.label for c in moe_changes(parse_scenario(grouped))))
