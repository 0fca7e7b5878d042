"""Search spaces: rows, scenarios (derived GPU counts), words and lists, pruning, parse errors."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import random_rows

from cosearch.errors import CosearchError
from cosearch.estimate import estimate
from cosearch.search.space import load_space, parse_space


def base_space(**over):
    d = {
        "model": "gpt3-175b",
        "training": {"global_batch": 1536, "tokens": "3.0e11", "precision": "bf16"},
        "cluster": {"gpu": ["a100-80gb", "h100-sxm"], "gpus": [512, 1024]},
        "plan": {"tp": [2, 4, 8], "pp": [4, 8, 16], "microbatch": [1, 2], "recompute": ["selective", "full"],
                 "sequence_parallel": [True, False]},
        "objectives": ["time_to_train_days", "cost_to_train_usd"],
    }
    d.update(over)
    return d


def test_rows_match_scalar_estimate():
    sp = parse_space(base_space())
    rows = random_rows(sp, 40, seed=0)
    m = sp.evaluate_rows(rows)
    checked = 0
    for i, sc in enumerate(sp.scenarios(rows)):
        if not m["valid"][i]:
            continue
        est = estimate(sc)
        assert est["step_time_s"] == pytest.approx(m["step_time_s"][i], rel=1e-12)
        assert est["memory_gib"] == pytest.approx(m["memory_gib"][i], rel=1e-12)
        # the 80 % band, scalar and vectorized alike (cosearch/model/interval.py)
        assert est["step_time_interval_s"] == pytest.approx([m["step_time_low_s"][i], m["step_time_high_s"][i]], rel=1e-12)
        assert est["time_to_train_interval_days"] == pytest.approx(
            [m["time_to_train_low_days"][i], m["time_to_train_high_days"][i]], rel=1e-12)
        assert est["cost_to_train_high_usd"] == pytest.approx(m["cost_to_train_high_usd"][i], rel=1e-12)
        lo, hi = est["step_time_interval_s"]
        assert lo < est["step_time_s"] < hi and est["interval_coverage"] == 0.8
        checked += 1
    assert checked > 5


def test_scenario_derives_gpus_from_nodes_and_dp():
    sp = parse_space(base_space(cluster={"gpu": "h100-sxm", "nodes": [16, 64]}))
    sc = sp.scenario(sp.values_of_row([1, 0, 0, 0, 0, 0]))
    assert sc["cluster"]["gpus"] == 512 and "nodes" not in sc["cluster"]
    sp2 = parse_space(base_space(cluster={"gpu": "a100-80gb"}, plan={"tp": 8, "pp": [8, 16], "dp": [4, 8]}))
    sc2 = sp2.scenario(sp2.values_of_row([1, 1]))
    assert sc2["cluster"]["gpus"] == 8 * 16 * 8
    m = sp2.evaluate_rows(np.array([[1.0, 1.0]]))
    assert m["gpus"][0] == 1024 and m["dp"][0] == 8
    assert estimate(sc2)["gpus"] == 1024


def test_model_and_gpu_lists_and_null_catalog_override():
    sp = parse_space(base_space(model=["llama2-7b", "llama2-13b"],
                                cluster={"gpu": ["a100-80gb", "h100-sxm"], "gpus": 64, "nvlink_gbps": [None, 900]},
                                plan={"tp": [1, 2, 4]}))
    rows = np.array([[0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 1, 2]], dtype=float)
    m = sp.evaluate_rows(rows)
    for i, sc in enumerate(sp.scenarios(rows)):
        assert sc["model"] in ("llama2-7b", "llama2-13b")
        assert ("nvlink_gbps" in sc["cluster"]) == bool(rows[i, 3])
        assert estimate(sc)["step_time_s"] == pytest.approx(m["step_time_s"][i], rel=1e-12)


def test_pruning_drops_choices_never_valid():
    # tp 3 never divides 96 heads... it does (96/3); tp 5 does not, pp 5 never divides 96 layers
    sp = parse_space(base_space(plan={"tp": [4, 5, 8], "pp": [5, 8, 16]}))
    assert sp.pruned == {"plan.tp": [5], "plan.pp": [5]}
    assert sp.dim("plan.tp").choices == [4, 8]
    assert 0 < sp.valid_fraction <= 1
    with pytest.raises(CosearchError, match="no valid combination"):
        parse_space(base_space(plan={"tp": [5, 7]}))


@pytest.mark.parametrize("bad, match", [
    ({"objectives": ["speed"]}, "unknown metric"),
    ({"constraints": {"max_money": 1}}, "unknown constraint"),
    ({"constraints": {"max_cost_usd": -1}}, "positive number"),
    ({"plan": {"tp": []}}, "must not be empty"),
    ({"plan": {"tp": {"min": 8, "max": 1}}}, "min <= max"),
    ({"plan": {"tp": {"min": 1, "max": 8, "stride": 2}}}, "unknown range key"),
    ({"plan": {"recompute": ["none", "sometimes"]}}, "not allowed"),
    ({"cluster": {"gpu": ["a100-80gb", "tpu-v9"], "gpus": 64}}, "unknown GPU id"),
    ({"model": ["gpt3-175b", "gpt-9"]}, "unknown preset"),
    ({"surprise": 1}, "unknown key"),
    ({"plan": {"tp": [None, 2]}}, "null"),
])
def test_malformed_spaces_are_one_line_errors(bad, match):
    with pytest.raises(CosearchError, match=match) as err:
        parse_space(base_space(**bad))
    assert "\n" not in str(err.value)


def test_shipped_spaces_load():
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1] / "searchspaces"
    sizes = {p.stem: load_space(p).size for p in root.glob("*.yaml")}
    assert {"gpt3-175b-parallelism", "codesign-70b", "large-space"} <= set(sizes)
    assert sizes["large-space"] > 1e8


def test_optimizer_states_are_a_searchable_dimension():
    training = {"global_batch": 1536, "tokens": "3.0e11", "precision": "bf16",
                "optimizer_states": ["fp32", "bf16_moments", "bf16"]}
    sp = parse_space(base_space(training=training, plan={"tp": 8, "pp": 8, "microbatch": 1, "zero": 1}))
    dim = next(d for d in sp.dims if d.path == "training.optimizer_states")
    assert dim.kind == "categorical" and dim.choices == ["fp32", "bf16_moments", "bf16"]
    rows = random_rows(sp, 60, seed=1)
    m = sp.evaluate_rows(rows)
    for i, sc in enumerate(sp.scenarios(rows)):  # the vectorized rows agree with the scalar estimate
        if m["valid"][i]:
            assert estimate(sc)["memory_gib"] == pytest.approx(m["memory_gib"][i], rel=1e-12)
    # on one cluster and plan, memory falls as the states narrow: 12, 8, 4 B of optimizer state per parameter
    at = {s: sp.evaluate({"training.optimizer_states": [s], "cluster.gpu": ["h100-sxm"], "cluster.gpus": [1024]})
          for s in ("fp32", "bf16_moments", "bf16")}
    mem = [float(at[s]["memory_gib"][0]) for s in ("fp32", "bf16_moments", "bf16")]
    assert mem[0] > mem[1] > mem[2]
    assert (mem[0] - mem[1]) == pytest.approx(mem[1] - mem[2], rel=1e-9)  # 4 B per owned parameter each step


def test_a_cost_no_gpu_of_the_space_has_a_price_for_is_refused():
    """b300 and mi355x have no catalog price: a cost objective or budget over them only had no value at any
    point ("0 feasible", "no feasible configuration" where every point was feasible). Now one line naming the
    field; a space with one priced GPU, or a price override, is fine."""
    space = {"model": "llama3-8b", "training": {"global_batch": 64, "tokens": 1.0e11},
             "cluster": {"gpu": ["b300", "mi355x"], "gpus": [8, 16]}, "plan": {"tp": [1, 2]}}
    for extra in ({"objectives": ["cost_to_train_usd"]}, {"objectives": ["time_to_train_days", "cost_usd_per_step"]},
                  {"objectives": ["step_time_s"], "constraints": {"max_cost_usd": 1.0e9}}):
        with pytest.raises(CosearchError, match=r"^cluster\.price_usd_per_gpu_hour: needed by cost_") as err:
            parse_space({**space, **extra})
        assert "\n" not in str(err.value) and "b300, mi355x" in str(err.value)
    inventory = {**space, "cluster": {"inventory": {"b300": 16, "gb300": 8}}, "objectives": ["cost_to_train_usd"]}
    with pytest.raises(CosearchError, match="cluster.price_usd_per_gpu_hour"):
        parse_space(inventory)
    parse_space({**space, "objectives": ["time_to_train_days"]})  # no cost asked for
    parse_space({**space, "cluster": {"gpu": ["b300", "h100-sxm"], "gpus": 8}, "objectives": ["cost_to_train_usd"]})
    parse_space({**space, "cluster": {"gpu": "b300", "gpus": 8, "price_usd_per_gpu_hour": [None, 6.0]},
                 "objectives": ["cost_to_train_usd"]})


@pytest.mark.parametrize("change, field", [
    ({"objectives": []}, "objectives"),
    ({"cluster": {"gpu": "h100-sxm", "gpus": [8, 16], "nodes": [1, 2]}}, "cluster.nodes"),
])
def test_an_empty_objective_list_or_both_gpu_counts_are_refused(change, field):
    """objectives: [] fell back to step_time_s silently; cluster.gpus with cluster.nodes let nodes win while gpus
    still counted as a dimension."""
    data = {"model": "gpt3-1.3b", "training": {"global_batch": 512}, "cluster": {"gpu": "h100-sxm", "gpus": 8},
            "plan": {"tp": [1, 2]}, **change}
    with pytest.raises(CosearchError) as err:
        parse_space(data)
    assert err.value.field == field and "\n" not in str(err.value)
