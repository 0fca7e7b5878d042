"""`cosearch catalog` for every GPU, fp8 efficiency status per precision, and the warnings and MoE figures
that `estimate` and `explain` print alike."""
import json
import re

import pytest
import yaml

from cosearch import estimate, hardware, load_scenario, scenario_columns
from cosearch.cli import main
from cosearch.model.columns import scalar_columns
from cosearch.model.evaluate import kernel_rates
from cosearch.model.power import slowest_pace_factor
from cosearch.model.profile import DEFAULT_PROFILE

#: GPUs no instance type of the shipped cloud catalog rents.
UNRENTED = ("gb300", "h800", "mi300x")
#: GPUs with an fp8 peak but no fp8 GEMM measurement (large_gemm_fp8: null, measured: true for bf16).
FP8_DEFAULT = ("h100-pcie", "mi300x", "l40s", "l4", "mi325x", "mi355x")


def _llama8b(gpu, precision="bf16"):
    return {"model": "llama3-8b", "training": {"global_batch": 256, "precision": precision, "tokens": 1e11},
            "cluster": {"gpu": gpu, "gpus": 64}, "plan": {"tp": 2, "zero": 1, "recompute": "full", "sequence_parallel": True}}


MOE = {"model": "qwen3-30b-a3b", "training": {"global_batch": 256, "precision": "bf16", "tokens": 1e11},
       "cluster": {"gpu": "h100-sxm", "gpus": 32},
       "plan": {"tp": 1, "pp": 1, "ep": 8, "microbatch": 1, "recompute": "selective", "zero": 1}}


def _run(capsys, *args):
    rc = main(list(args))
    out = capsys.readouterr().out
    return rc, " ".join(out.split())


def _file(tmp_path, scenario, name="sc.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(scenario))
    return str(path)


def _warnings(text):
    return re.findall(r"warning: (.*?)(?= warning: | step time | where the step time goes|$)", text)


# --- 1. catalog: every GPU, and a GPU nobody rents ----------------------------------------------------------


def test_catalog_efficiency_table_lists_every_gpu_with_its_flag(capsys):
    rc, out = _run(capsys, "catalog")
    assert rc == 0
    for gid, entry in hardware.catalog().items():
        flag = r"no \(assumed, \*\)" if not entry["efficiency_measured"] else "(yes|bf16 only)"
        assert re.search(rf"│ {re.escape(gid)} │ .*│ {flag} │ \d+ │ {re.escape(entry['efficiency_source'][:20])}", out), gid
    assert "cloud instance catalog" in out and "p5.48xlarge" in out  # the instance table is still there


@pytest.mark.parametrize("gpu", UNRENTED)
def test_catalog_gpu_without_instances_shows_its_entry(gpu, capsys):
    rc, out = _run(capsys, "catalog", "--gpu", gpu)
    entry = hardware.gpu(gpu)
    assert rc == 0
    assert f"{gpu}: no rentable instance type in the catalog" in out
    assert entry["name"] in out and f"{entry['hbm_gib']:g} GiB" in out
    assert " ".join(entry["efficiency_source"].split()) in " ".join(out.replace("│", " ").split())  # all of it
    assert re.search(rf"│ {gpu} │ .* │ 0 │", out)
    assert "cloud instance catalog" not in out
    assert main(["catalog", "--gpu", gpu, "--json"]) == 0  # the entry, not an empty list (tests/test_catalog_json.py)
    d = json.loads(capsys.readouterr().out)
    assert d["instances"] == [] and d["gpu"]["id"] == gpu and d["gpu"]["name"] == entry["name"]


def test_catalog_gpu_not_rented_by_a_provider(capsys):
    rc, out = _run(capsys, "catalog", "--gpu", "b200", "--provider", "aws")
    assert rc == 0 and "b200: no rentable instance type in the catalog from aws" in out


# --- 2. fp8 efficiency: measured or default, per precision --------------------------------------------------


def test_fp8_status_per_precision():
    status = {g: e["efficiency_fp8"] for g, e in hardware.catalog().items()}
    assert {g for g, s in status.items() if s == "default"} == set(FP8_DEFAULT)
    assert status["h100-sxm"] == "measured" and status["gb300"] == "assumed" and status["a100-80gb"] == "none"


@pytest.mark.parametrize("gpu", FP8_DEFAULT)
def test_fp8_estimate_without_fp8_measurement_warns_the_value_the_model_uses(gpu):
    sc = _llama8b(gpu, "fp8")
    lines = [w for w in estimate(sc)["warnings"] if "fp8 GEMM" in w]
    assert len(lines) == 1 and lines[0].startswith(f"{gpu}: no public fp8 GEMM measurement")
    c = scalar_columns(scenario_columns(load_scenario(sc)))
    # the GPU's own efficiency: the job's pace (its slowest of 8 GPUs, model/power.py) taken out
    pace = slowest_pace_factor(c["gpus"])
    used = kernel_rates(c, DEFAULT_PROFILE).gemm_Fps / (c["peak_tflops"] * 1e12 * DEFAULT_PROFILE.matmul_scale * pace)
    assert f"assumed {float(used):.3f} " in lines[0]
    other = DEFAULT_PROFILE.model_copy(update={"fp8_matmul_relative": 0.5})
    assert f"assumed {hardware.gpu(gpu)['matmul_efficiency'] * 0.5:.3f} " in " ".join(estimate(sc, other)["warnings"])


@pytest.mark.parametrize("gpu, precision", [("h100-sxm", "fp8"), ("b200", "fp8"), ("mi300x", "bf16")])
def test_measured_fp8_or_bf16_run_does_not_warn(gpu, precision):
    assert not any("GEMM" in w for w in estimate(_llama8b(gpu, precision))["warnings"])


def test_catalog_shows_fp8_not_measured(capsys):
    _, out = _run(capsys, "catalog")
    for gpu in FP8_DEFAULT:
        assert re.search(rf"│ {gpu} │ +[0-9.]+ │ not measured │ [0-9.]+ │ +[0-9.]+ │ bf16 only │", out), gpu
    assert re.search(r"│ h100-sxm │ +0\.80 │ +0\.70 │ 0\.707 │ +0\.619 │ yes │", out)


# --- 3. explain prints the warnings estimate prints ---------------------------------------------------------


@pytest.mark.parametrize("gpu, precision", [("gb300", "bf16"), ("h800", "bf16"), ("mi300x", "fp8")])
def test_explain_prints_the_same_warnings_as_estimate(gpu, precision, tmp_path, capsys):
    path = _file(tmp_path, _llama8b(gpu, precision))
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump({"profile": {"matmul_scale": 1.0}, "calibrated_range": {
        "rows": 3, "gpu_types": ["a100-80gb"], "params_b": [1, 2], "gpus": [8, 16], "seq_len": [2048, 2048]}}))
    for extra in ([], ["--profile", str(profile)]):
        _, est = _run(capsys, "estimate", path, *extra)
        _, exp = _run(capsys, "explain", path, *extra)
        want = _warnings(est)
        assert want and _warnings(exp) == want
        assert any(w.startswith(f"{gpu}: no public") for w in want)
    assert len(want) > 1  # the calibrated range's warnings too


# --- 4. MoE: throughput counted on active and on all parameters ---------------------------------------------


def test_moe_output_shows_total_parameter_tflops(tmp_path, capsys):
    path = _file(tmp_path, MOE)
    r = estimate(MOE)
    assert r["active_params"] < r["params"]
    total = f"{r['model_tflops_per_gpu']:.1f} (active parameters; {r['total_param_tflops_per_gpu']:,.1f} counting all parameters)"
    _, out = _run(capsys, "estimate", path)
    assert f"model TFLOP/s per GPU {total} (MFU" in out
    _, out = _run(capsys, "explain", path)
    assert f"model TFLOP/s per GPU: {total}" in out


def test_dense_output_is_unchanged(tmp_path, capsys):
    sc = _llama8b("h100-sxm")
    path = _file(tmp_path, sc)
    r = estimate(sc)
    _, out = _run(capsys, "estimate", path)
    assert f"model TFLOP/s per GPU {r['model_tflops_per_gpu']:.1f} (MFU {100 * r['mfu']:.1f} %)" in out
    _, exp = _run(capsys, "explain", path)
    assert "counting all parameters" not in out + exp and "model TFLOP/s" not in exp
    _, js = _run(capsys, "estimate", path, "--json")
    assert json.loads(js)["total_param_tflops_per_gpu"] == pytest.approx(r["model_tflops_per_gpu"])
