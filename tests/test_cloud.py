"""Cloud provisioning: instance catalog, the scenario's cloud section, transient-server economics."""
import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from cosearch import CosearchError, estimate, load_scenario
from cosearch.cloud import (CLOUD_COLUMNS, INSTANCE_COLUMNS, evaluate_cloud, expected_wall_time, instance_codes,
                            load_catalog, optimal_interval, transient_metrics, wall_time_moments, wall_time_quantiles)
from cosearch.cloud.transient import CHECKPOINT_BYTES_PER_PARAM, checkpoint_write_s
from cosearch.hardware import catalog as gpu_catalog


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "cosearch", *args], capture_output=True, text=True, cwd=cwd)


def _main(capsys, *args):
    """The CLI in-process (fast): (exit code, stdout, stderr)."""
    from cosearch.cli import main

    try:
        rc = main(list(args))
    except SystemExit as e:  # argparse usage errors
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def _scenario(**cloud):
    return {
        "model": "llama2-70b",
        "training": {"global_batch": 1024, "precision": "bf16", "tokens": 1.0e12},
        "cloud": {"instance": "aws/p5.48xlarge", "instances": 32, **cloud},
        "plan": {"tp": 8, "pp": 4, "microbatch": 1, "recompute": "selective", "sequence_parallel": True, "zero": 1},
    }


# --- catalog ------------------------------------------------------------------------------------

def test_catalog_loads_and_every_gpu_exists():
    cat = load_catalog()
    providers = {it.provider for it in cat.instances.values()}
    assert {"aws", "gcp", "azure"} <= providers and providers & {"lambda", "coreweave"}
    gpus = gpu_catalog()
    for it in cat.instances.values():
        assert it.gpu in gpus, it.key
        assert it.on_demand_usd_per_hour > 0 and it.gpus > 0 and it.network_gbps > 0 and it.regions
        assert it.price_date, it.key
        if it.has_spot:
            assert it.revocation_per_hour is not None and it.revocation_per_hour > 0
            assert it.spot_usd_per_hour < it.on_demand_usd_per_hour
        assert cat.providers[it.provider].get("sources") or it.sources  # every price has a source
    assert sorted(instance_codes().values()) == list(range(len(cat.instances)))


def test_catalog_override_file_changes_prices_and_adds_instances(tmp_path):
    extra = tmp_path / "negotiated.yaml"
    extra.write_text(yaml.safe_dump({"providers": {
        "aws": {"instances": {"p5.48xlarge": {"on_demand_usd_per_hour": 40.0}}},
        "mycloud": {"name": "on-prem", "instances": {"h100x8": {
            "gpu": "h100-sxm", "gpus": 8, "network_gbps": 3200, "regions": ["dc1"], "on_demand_usd_per_hour": 16.0}}},
    }}))
    cat = load_catalog(extra)
    assert cat.get("aws/p5.48xlarge").on_demand_usd_per_hour == 40.0
    assert cat.get("aws/p5.48xlarge").spot_usd_per_hour == load_catalog().get("aws/p5.48xlarge").spot_usd_per_hour
    assert cat.get("h100x8", "mycloud").failure_per_hour > 0   # defaults filled in
    r = estimate(_scenario(catalog=str(extra)))
    assert r["cloud"]["instance_usd_per_hour"] == 40.0
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"providers": {"x": {"instances": {"y": {
        "gpu": "h900", "gpus": 8, "network_gbps": 1, "regions": ["r"], "on_demand_usd_per_hour": 1}}}}}))
    with pytest.raises(CosearchError, match=r"instances\.y\.gpu: unknown GPU id 'h900'"):
        load_catalog(bad)


def test_catalog_cli_lists_filters_and_writes_csv(tmp_path, capsys):
    rc, out, err = _main(capsys, "catalog", "--gpu", "h100-sxm", "--csv", str(tmp_path / "c.csv"))
    assert rc == 0, err
    assert "p5.48xlarge" in out and "a3-highgpu-8g" in out and "p4d.24xlarge" not in out
    rows = (tmp_path / "c.csv").read_text().splitlines()
    assert rows[0].startswith("provider,instance,gpu") and len(rows) >= 4
    rc, out, _ = _main(capsys, "catalog", "--provider", "gcp", "--json")
    assert rc == 0 and {x["provider"] for g in json.loads(out) for x in g["instances"]} == {"gcp"}


@pytest.mark.parametrize("args, field", [
    (("catalog", "--provider", "ibm"), "--provider"),
    (("catalog", "--gpu", "h900"), "--gpu"),
])
def test_catalog_cli_errors_are_one_line(args, field, capsys):
    rc, out, err = _main(capsys, *args)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and field in err and "allowed" in err


# --- scenario cloud section --------------------------------------------------------------------

def test_cluster_and_cost_come_from_instances():
    sc = load_scenario(_scenario(instances=16, pricing="spot"))
    it = load_catalog().get("aws/p5.48xlarge")
    assert sc.cluster.gpu == "h100-sxm" and sc.cluster.gpus == 128 and sc.cluster.gpus_per_node == 8
    assert sc.cluster.network_gbps == pytest.approx(3200 / 8)
    r = estimate(_scenario(instances=16, pricing="spot"))
    c = r["cloud"]
    hours = c["ideal_time_to_train_days"] * 24
    assert c["ideal_cost_to_train_usd"] == pytest.approx(16 * it.spot_usd_per_hour * hours)
    assert r["cost_to_train_usd"] == pytest.approx(16 * it.spot_usd_per_hour * c["expected_time_to_train_days"] * 24)
    assert r["time_to_train_days"] == c["expected_time_to_train_days"] > c["ideal_time_to_train_days"]
    assert c["p10_time_to_train_days"] <= c["p50_time_to_train_days"] <= c["p90_time_to_train_days"]
    # the dumped scenario parses again (derived cluster values repeat without conflict)
    assert load_scenario(r["scenario"]).cluster.gpus == 128


@pytest.mark.parametrize("cloud, field, words", [
    ({"pricing": "reserved"}, "cloud.pricing", ["on_demand", "spot"]),
    ({"instance": "aws/p9.mega"}, "cloud.instance", ["p5.48xlarge"]),
    ({"instance": "p5.48xlarge", "provider": "ibm"}, "cloud.provider", ["aws", "gcp"]),
    ({"instance": "lambda/gpu_8x_h100_sxm5", "pricing": "spot"}, "cloud.pricing", ["on_demand"]),
    ({"region": "mars-1"}, "cloud.region", ["us-east-1"]),
    ({"instances": 0}, "cloud.instances", []),
    ({"checkpoint_every": 2}, "cloud.checkpoint_every", ["checkpoint_interval_h", "revocation_per_hour"]),
])
def test_cloud_section_errors_name_field_and_allowed_values(cloud, field, words):
    with pytest.raises(CosearchError) as err:
        load_scenario(_scenario(**cloud))
    msg = str(err.value)
    assert msg.startswith(field) and "\n" not in msg
    for w in words:
        assert w in msg


def test_cluster_fields_set_by_instance_cannot_conflict():
    data = dict(_scenario(), cluster={"gpu": "a100-80gb"})
    with pytest.raises(CosearchError, match=r"^cluster\.gpu: set by cloud\.instance"):
        load_scenario(data)
    data = dict(_scenario(), cluster={"hbm_gib": 96})  # other overrides are fine
    assert load_scenario(data).cluster.hbm_gib == 96


def test_estimate_cli_cloud_error_exits_2_one_line(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(_scenario(pricing="reserved")))
    r = _cli("estimate", str(p))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "cloud.pricing" in r.stderr


# --- transient economics -------------------------------------------------------------------------

def test_young_daly_interval_hand_computed():
    # delta = 0.1 h, M = 50 h: Young sqrt(2*0.1*50) = sqrt(10) = 3.16228 h; Daly minus delta = 3.06228 h
    assert optimal_interval(0.1, 50.0, "young") == pytest.approx(3.16228, abs=1e-5)
    assert optimal_interval(0.1, 50.0) == pytest.approx(3.06228, abs=1e-5)
    assert optimal_interval(3.0, 1.0) == pytest.approx(1.0)          # delta >= 2M -> tau = M
    assert np.isinf(optimal_interval(0.1, np.inf))
    # checkpoint write: 70e9 params * 14 B over 10 instances at 10 Gbit/s = 9.8e11 / 1.25e10 = 78.4 s
    assert CHECKPOINT_BYTES_PER_PARAM == 14.0
    assert checkpoint_write_s(70e9, 10, 10.0) == pytest.approx(78.4)


def test_expected_time_without_interruptions_is_plain_time_plus_checkpoints():
    W, tau, delta = 1000.0, 10.0, 0.05
    assert expected_wall_time(W, tau, delta, 0.2, 0.0) == pytest.approx(W + (W / tau) * delta)   # 1005 h
    assert expected_wall_time(W, tau, delta, 0.2, 1e-12) == pytest.approx(1005.0, rel=1e-8)     # continuous at 0
    m = transient_metrics(W, 70e9, 8, 10.0, 0.0, 600.0, 10.0, checkpoint_interval_h=tau)
    d = checkpoint_write_s(70e9, 8, 10.0) / 3600
    assert m["expected_time_to_train_days"] * 24 == pytest.approx(W + (W / tau) * d)
    assert m["p10_time_to_train_days"] == pytest.approx(m["p90_time_to_train_days"])             # no spread
    # optimal interval without interruptions: one final checkpoint
    m = transient_metrics(W, 70e9, 8, 10.0, 0.0, 600.0, 10.0)
    assert m["expected_time_to_train_days"] * 24 == pytest.approx(W + d)


def test_optimal_interval_minimizes_expected_time_and_mc_matches_analytic():
    W, delta, R, lam = 500.0, 0.05, 0.25, np.array([0.02, 0.2, 1.0])
    tau = optimal_interval(delta, 1 / lam)
    best = expected_wall_time(W, tau, delta, R, lam)
    for f in (0.5, 2.0):
        assert np.all(best <= expected_wall_time(W, f * tau, delta, R, lam) + 1e-9)
    mean, _ = wall_time_moments(W, tau, delta, R, lam)
    assert mean == pytest.approx(best)                                   # exact mean = Daly
    an = wall_time_quantiles(W, tau, delta, R, lam, spread="analytic")
    mc = wall_time_quantiles(W, tau, delta, R, lam, spread="mc", samples=20000, seed=1)
    for q in (0.1, 0.5, 0.9):
        assert mc[q] == pytest.approx(an[q], rel=5e-3)
    again = wall_time_quantiles(W, tau, delta, R, lam, spread="mc", samples=20000, seed=1)
    assert np.array_equal(again[0.5], mc[0.5])                           # seeded


def test_spot_wins_when_revocations_are_rare_and_loses_when_frequent():
    od = estimate(_scenario(pricing="on_demand"))
    rare = estimate(_scenario(pricing="spot", revocation_per_hour=1e-4))
    frequent = estimate(_scenario(pricing="spot", revocation_per_hour=0.5))
    assert rare["cost_to_train_usd"] < 0.7 * od["cost_to_train_usd"]
    assert frequent["cost_to_train_usd"] > od["cost_to_train_usd"]
    assert frequent["time_to_train_days"] > 2 * od["time_to_train_days"]
    # vectorized: the same crossover across a sweep of rates, one call
    rates = np.logspace(-4, 0, 41)
    codes = instance_codes()
    cols = _columns(len(rates))
    out = evaluate_cloud({**cols, "instance": codes["aws/p5.48xlarge"], "instances": 32, "spot": 1,
                          "revocation_per_hour": rates})
    cost = out["cost_to_train_usd"]
    assert np.all(np.diff(cost) > 0)                                     # monotone in the rate
    assert cost[0] < od["cost_to_train_usd"] < cost[-1]


def _columns(n=1):
    from cosearch.scenario import scenario_columns

    c = scenario_columns(load_scenario(_scenario()))
    for k in (*INSTANCE_COLUMNS, "dp"):
        c.pop(k)
    return {k: np.full(n, v) for k, v in c.items()}


def test_vectorized_cloud_path_matches_estimate():
    codes = instance_codes()
    keys = ["aws/p5.48xlarge", "gcp/a3-highgpu-8g", "azure/Standard_ND96isr_H100_v5", "lambda/gpu_8x_h100_sxm5"]
    spot = np.array([1, 1, 0, 0])
    out = evaluate_cloud({**_columns(4), "instance": [codes[k] for k in keys], "instances": 32, "spot": spot})
    for i, k in enumerate(keys):
        r = estimate(_scenario(instance=k, pricing="spot" if spot[i] else "on_demand"))
        assert out["step_time_s"][i] == pytest.approx(r["step_time_s"])
        assert out["time_to_train_days"][i] == pytest.approx(r["time_to_train_days"])
        assert out["cost_to_train_usd"][i] == pytest.approx(r["cost_to_train_usd"])
        assert out["p90_cost_to_train_usd"][i] == pytest.approx(r["cloud"]["p90_cost_to_train_usd"])
    # spot asked of an instance type without spot: flagged, not raised
    bad = evaluate_cloud({**_columns(1), "instance": codes["lambda/gpu_8x_h100_sxm5"], "instances": 32, "spot": 1})
    assert not bad["spot_available"][0] and not bad["feasible"][0]
    assert set(CLOUD_COLUMNS) >= {"instance", "instances", "spot", "checkpoint_interval_h"}


def test_vectorized_precision_column_and_split_api_match_estimate():
    from cosearch.cloud import apply_cloud, instance_columns
    from cosearch.model import evaluate

    codes = instance_codes()
    sc = _scenario(pricing="spot")
    sc["training"] = dict(sc["training"], precision="fp8")
    r = estimate(sc)
    cols = _columns(1)
    cols["precision"] = np.full(1, 1.0)  # fp8 code
    out = evaluate_cloud({**cols, "instance": codes["aws/p5.48xlarge"], "instances": 32, "spot": 1})
    assert out["step_time_s"][0] == pytest.approx(r["step_time_s"])
    assert out["cost_to_train_usd"][0] == pytest.approx(r["cost_to_train_usd"])
    # the two-step API a search space uses: hardware columns in, economics on the model output
    cloud = {"instance": codes["aws/p5.48xlarge"], "instances": 32, "spot": 1}
    hw = instance_columns(cloud["instance"], cloud["instances"], cloud["spot"], cols["precision"])
    split = apply_cloud(evaluate({**cols, **hw}), cloud)
    assert split["cost_to_train_usd"][0] == pytest.approx(r["cost_to_train_usd"])


def test_data_dir_replaces_the_shipped_catalog(tmp_path, monkeypatch):
    (tmp_path / "instances.yaml").write_text(yaml.safe_dump({
        "defaults": {"failure_per_gpu_hour": 0.0, "restart_s": 60, "storage_gbps": 100},
        "providers": {"site": {"instances": {"box": {"gpu": "a100-80gb", "gpus": 8, "network_gbps": 800,
                                                     "regions": ["here"], "on_demand_usd_per_hour": 12.0}}}}}))
    monkeypatch.setenv("COSEARCH_DATA_DIR", str(tmp_path))
    cat = load_catalog()
    assert cat.keys() == ["site/box"] and cat.defaults.restart_s == 60
    monkeypatch.delenv("COSEARCH_DATA_DIR")
    assert "aws/p5.48xlarge" in load_catalog().keys()


@pytest.mark.parametrize("value", [".inf", "1e300", "-1"])
def test_catalog_prices_must_be_finite_and_in_range(tmp_path, capsys, value):
    """A catalog override with spot_usd_per_hour .inf or 1e300 was accepted (the table printed inf, the JSON null)
    and failed only in estimate, named cluster.price_usd_per_gpu_hour. Now the catalog key is named at once."""
    cat = tmp_path / "cat.yaml"
    cat.write_text(f"providers: {{aws: {{instances: {{p5.48xlarge: {{spot_usd_per_hour: {value}}}}}}}}}\n")
    rc, _, err = _main(capsys, "catalog", "--catalog", str(cat))
    assert rc == 2 and err.count("\n") == 1 and "spot_usd_per_hour" in err, err
