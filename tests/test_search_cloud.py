"""Cloud search spaces: instance types, counts and spot pricing as knobs; the vectorized path
agrees with the scalar `estimate` of the stored scenario; p90 budgets; time-to-accuracy objectives."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import random_rows

from cosearch.errors import CosearchError
from cosearch.estimate import estimate
from cosearch.samplers import run_exhaustive
from cosearch.search.space import parse_space


def cloud_space(**over):
    d = {
        "model": "llama2-7b",
        "training": {"global_batch": 512, "tokens": 2.0e11, "precision": "bf16"},
        "cloud": {"instance": ["aws/p5.48xlarge", "lambda/gpu_8x_h100_sxm5", "gcp/a2-ultragpu-8g"],
                  "instances": [2, 4, 8], "pricing": ["on_demand", "spot"]},
        "plan": {"tp": [1, 2, 4], "pp": [1, 2], "microbatch": [1, 2], "recompute": ["selective", "full"]},
        "objectives": ["time_to_train_days", "cost_to_train_usd"],
    }
    d.update(over)
    return d


def test_rows_match_scalar_estimate_of_stored_scenario():
    sp = parse_space(cloud_space())
    rows = random_rows(sp, 60, seed=1)
    m = sp.evaluate_rows(rows)
    checked = 0
    for i, sc in enumerate(sp.scenarios(rows)):
        if not (m["valid"][i] and m["spot_available"][i]):
            continue
        # the stored scenario repeats what the instance decides, and estimate accepts it as is
        assert sc["cluster"]["gpus"] == sc["cloud"]["instances"] * 8
        est = estimate(sc)
        assert est["step_time_s"] == pytest.approx(m["step_time_s"][i], rel=1e-12)
        # expected (interruption-aware) time and cost, and the P90, agree with the scalar path
        assert est["time_to_train_days"] == pytest.approx(m["time_to_train_days"][i], rel=1e-9)
        assert est["cost_to_train_usd"] == pytest.approx(m["cost_to_train_usd"][i], rel=1e-9)
        assert est["cloud"]["p90_time_to_train_days"] == pytest.approx(m["p90_time_to_train_days"][i], rel=1e-9)
        checked += 1
    assert checked > 10


def test_spot_without_a_spot_market_is_infeasible_and_on_demand_has_no_revocations():
    sp = parse_space(cloud_space())
    res = run_exhaustive(sp)
    assert res.summary["feasible"] > 0
    plan = {"plan.tp": 2, "plan.pp": 1, "plan.microbatch": 1, "plan.recompute": "selective", "cloud.instances": 4}
    rows = np.array([sp.row_of_values({**plan, "cloud.instance": inst, "cloud.pricing": pricing}) for inst, pricing in (
        ("lambda/gpu_8x_h100_sxm5", "spot"), ("lambda/gpu_8x_h100_sxm5", "on_demand"),
        ("aws/p5.48xlarge", "spot"), ("aws/p5.48xlarge", "on_demand"))], dtype=float)
    m = sp.evaluate_rows(rows)
    assert list(m["feasible"]) == [False, True, True, True]
    # spot costs less per hour but suffers revocations: expected time is longer than on-demand's
    assert m["time_to_train_days"][2] > m["time_to_train_days"][3]
    assert m["cost_to_train_usd"][2] < m["cost_to_train_usd"][3]
    # expected time >= the failure-free time; P90 >= expected
    assert np.all(m["time_to_train_days"][1:] >= m["ideal_time_to_train_days"][1:])
    assert np.all(m["p90_time_to_train_days"][1:] >= m["p50_time_to_train_days"][1:])


def test_p90_budget_is_enforced_on_the_exact_front():
    """An exhaustive study under max_p90_days keeps exactly the points whose P90 time is within it."""
    from itertools import product

    free = parse_space(cloud_space())
    grid = np.array(list(product(*[range(len(d.choices)) for d in free.dims])), dtype=float)
    m = free.evaluate_rows(grid)
    p90 = m["p90_time_to_train_days"][m["feasible"]]
    bound = float(np.median(p90))
    tight = run_exhaustive(parse_space(cloud_space(constraints={"max_p90_days": bound})))
    assert tight.summary["feasible"] == int(np.count_nonzero(p90 <= bound))
    assert 0 < tight.summary["feasible"] < int(m["feasible"].sum())


@pytest.mark.parametrize("change, field", [
    ({"cluster": {"gpu": "h100-sxm"}}, "cluster.gpu"),
    ({"plan": {"tp": [1, 2], "dp": [2]}}, "plan.dp"),
    ({"cloud": {"instance": ["aws/p5.48xlarge"]}}, "cloud.instances"),
    ({"cloud": {"instance": ["aws/nope"], "instances": [2]}}, "cloud.instance"),
    ({"cloud": {"instance": "aws/p5.48xlarge", "instances": 2, "pricing": ["spot", "reserved"]}}, "cloud.pricing"),
    ({"cloud": {"instance": "p5.48xlarge", "instances": 2, "provider": ["aws", "gcp"]}}, "cloud.provider"),
])
def test_bad_cloud_spaces_name_the_field(change, field):
    with pytest.raises(CosearchError) as err:
        parse_space(cloud_space(**change))
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_p90_objective_needs_a_cloud_section_and_accuracy_needs_target_tokens():
    plain = {"model": "llama2-7b", "training": {"global_batch": 512, "tokens": 2.0e11},
             "cluster": {"gpu": "h100-sxm", "gpus": [8, 16]}, "plan": {"tp": [1, 2]}}
    with pytest.raises(CosearchError) as err:
        parse_space({**plain, "objectives": ["p90_time_to_train_days"]})
    assert err.value.field == "cloud"
    with pytest.raises(CosearchError) as err:
        parse_space({**plain, "objectives": ["time_to_accuracy_days"]})
    assert err.value.field == "training.target_tokens"


def test_time_to_accuracy_objective_prefers_batches_near_the_critical_batch():
    """McCandlish et al. (2018): steps = S_min (1 + B_noise / B); past B_noise larger batches buy little,
    so with many GPUs the accuracy-optimal global batch is not the smallest one."""
    d = {"model": "llama2-7b",
         "training": {"global_batch": [64, 128, 256, 512, 1024, 2048], "tokens": 2.0e11, "target_tokens": 5.0e10,
                      "critical_batch_tokens": 2.0e6},
         "cluster": {"gpu": "h100-sxm", "gpus": 256}, "plan": {"tp": [1, 2], "microbatch": [1, 2]},
         "objectives": ["time_to_accuracy_days"]}
    sp = parse_space(d)
    res = run_exhaustive(sp)
    best = res.summary["best"]["time_to_accuracy_days"]
    from itertools import product
    grid = np.array(list(product(*[range(len(x.choices)) for x in sp.dims])), dtype=float)
    m = sp.evaluate_rows(grid)
    ok = m["feasible"]
    assert best == pytest.approx(float(m["time_to_accuracy_days"][ok].min()), rel=1e-12)
    i = int(np.argmin(np.where(ok, m["time_to_accuracy_days"], np.inf)))
    chosen_batch = sp.dim("training.global_batch").choices[int(grid[i, [x.path for x in sp.dims].index("training.global_batch")])]
    assert chosen_batch not in (64, 2048)  # small batches waste the GPUs, huge ones waste samples


def test_instance_any_expands_by_provider_region_and_gpu():
    sp = parse_space(cloud_space(cloud={"provider": ["aws", "gcp"], "gpu": "h100-sxm", "instances": [2, 4]}))
    assert sp.dim("cloud.instance").choices == ["aws/p5.48xlarge", "gcp/a3-highgpu-8g"]
    with pytest.raises(CosearchError) as err:
        parse_space(cloud_space(cloud={"instance": "aws/p5.48xlarge", "region": "westeurope", "instances": 2}))
    assert err.value.field == "cloud.region"


def test_checkpoint_interval_knob_never_beats_the_young_daly_optimum():
    """Expected time with the optimal interval (cloud.checkpoint_interval_h unset) is at most the
    expected time with any explicit interval, everything else equal (Daly 2006)."""
    fixed = {"instance": "aws/p5.48xlarge", "instances": 8, "pricing": "spot"}
    knob = parse_space(cloud_space(cloud={**fixed, "checkpoint_interval_h": [0.05, 0.2, 0.5, 1, 2, 4, 8, 24]},
                                   plan={"tp": 2, "pp": 1, "microbatch": 1, "recompute": "selective"}))
    opt = parse_space(cloud_space(cloud=fixed, plan={"tp": 2, "pp": 1, "microbatch": 1, "recompute": "selective"}))
    rows = np.arange(len(knob.dim("cloud.checkpoint_interval_h").choices), dtype=float).reshape(-1, 1)
    t_knob = knob.evaluate_rows(rows)["time_to_train_days"]
    t_opt = float(opt.evaluate({})["time_to_train_days"][0])
    assert np.all(t_knob >= t_opt * (1 - 1e-9))
    assert t_knob.min() <= t_opt * 1.05  # the grid brackets the optimum: its best point is close
    assert t_knob[0] > t_opt * 1.001 and t_knob[-1] > t_opt * 1.001  # too often and too rarely both cost time
