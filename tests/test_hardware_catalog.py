"""GPU catalog: per-GPU GEMM efficiency with sources, the one conversion to the model's eta, new GPUs."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from cosearch import CosearchError, estimate, load_scenario, scenario_columns
from cosearch import hardware
from cosearch.hardware import REFERENCE_FIT_ETA, catalog, matmul_eta

NEW_GPUS = ("gb300", "h800", "mi325x", "mi355x")


def _llama8b(gpu, precision="bf16"):
    return {"model": "llama3-8b", "training": {"global_batch": 256, "precision": precision, "tokens": 1e11},
            "cluster": {"gpu": gpu, "gpus": 8}, "plan": {"tp": 2, "pp": 1, "recompute": "selective", "zero": 1}}


def test_every_gpu_has_an_efficiency_block_with_a_source():
    for gid, entry in catalog().items():
        eff = entry["efficiency"]
        assert isinstance(eff["measured"], bool), gid
        assert isinstance(eff["source"], str) and len(eff["source"].strip()) > 20, gid
        assert 0.2 < eff["large_gemm_bf16"] < 0.95, gid
        fp8 = eff.get("large_gemm_fp8")
        if entry["peak_tflops"].get("fp8") is None:
            assert fp8 is None, f"{gid} has no fp8 but an fp8 efficiency"
        if fp8 is not None:
            assert 0.2 < fp8 < 0.95, gid
        if not eff["measured"]:
            assert eff.get("assumption"), f"{gid}: an assumed efficiency must say what it is assumed from"
            assert "ASSUMED" in eff["source"] or "assumed" in eff["source"], gid
        assert entry["efficiency_measured"] is eff["measured"]
        assert entry["efficiency_source"] == eff["source"]


def test_reference_gpu_reproduces_its_fitted_eta_exactly():
    h100 = catalog()["h100-sxm"]
    assert h100["efficiency"]["measured"] is True
    assert h100["matmul_efficiency"] == REFERENCE_FIT_ETA == 0.707
    # fp8: the same conversion, i.e. 0.707 x (fp8 fraction / bf16 fraction) of the H100
    ratio = h100["efficiency"]["large_gemm_fp8"] / h100["efficiency"]["large_gemm_bf16"]
    assert h100["matmul_efficiency_fp8"] == pytest.approx(0.707 * ratio)
    assert 0.55 < h100["matmul_efficiency_fp8"] < 0.70


def test_one_conversion_for_every_gpu_and_precision():
    ref = catalog()["h100-sxm"]["efficiency"]["large_gemm_bf16"]
    for gid, entry in catalog().items():
        eff = entry["efficiency"]
        assert entry["matmul_efficiency"] == pytest.approx(eff["large_gemm_bf16"] * 0.707 / ref), gid
        if eff.get("large_gemm_fp8") is None:
            assert math.isnan(entry["matmul_efficiency_fp8"]), gid
        else:
            assert entry["matmul_efficiency_fp8"] == pytest.approx(eff["large_gemm_fp8"] * 0.707 / ref), gid
    assert math.isnan(matmul_eta(None, ref))
    assert not hasattr(hardware, "MATMUL_EFFICIENCY") and not hasattr(hardware, "MATMUL_EFFICIENCY_DEFAULT")


def test_measured_efficiencies_order_vendors_as_the_measurements_do():
    cat = catalog()
    # MI300X's measured large-GEMM fraction is well below H100's: it no longer gets the H100 fit
    assert cat["mi300x"]["matmul_efficiency"] < 0.8 * cat["h100-sxm"]["matmul_efficiency"]
    # the new AMD parts improve on MI300X, as measured
    assert cat["mi300x"]["matmul_efficiency"] < cat["mi325x"]["matmul_efficiency"] < cat["h100-sxm"]["matmul_efficiency"]
    # Blackwell fp8 is no longer the H100 value
    assert cat["b200"]["matmul_efficiency_fp8"] != cat["h100-sxm"]["matmul_efficiency_fp8"]


@pytest.mark.parametrize("gpu", NEW_GPUS)
def test_new_gpus_load_and_estimate(gpu):
    entry = hardware.gpu(gpu)
    for key in ("hbm_gib", "hbm_tbps", "nvlink_gbps", "network_gbps", "power_w", "release_year"):
        assert entry[key] > 0, (gpu, key)
    assert set(entry["sources"]) >= {"peak_tflops", "hbm", "nvlink", "network", "power", "price"}
    r = estimate(_llama8b(gpu))
    assert np.isfinite(r["step_time_s"]) and r["step_time_s"] > 0 and 0 < r["mfu"] < 1
    assert r["fits"] is True
    if math.isnan(entry["price_usd_per_gpu_hour"]):
        assert r["cost_to_train_usd"] is None          # no public price: cost is empty, nothing crashes
    else:
        assert r["cost_to_train_usd"] > 0
    # with a price given in the scenario, cost is back
    sc = _llama8b(gpu)
    sc["cluster"]["price_usd_per_gpu_hour"] = 5.0
    assert estimate(sc)["cost_to_train_usd"] > 0


def test_h800_is_an_h100_with_less_nvlink():
    h100, h800 = hardware.gpu("h100-sxm"), hardware.gpu("h800")
    assert h800["peak_tflops"] == h100["peak_tflops"]
    assert h800["nvlink_gbps"] == 200 and h800["gpus_per_node"] == 8
    sc_tp = lambda g: {**_llama8b(g), "plan": {"tp": 8, "pp": 1, "recompute": "selective", "zero": 1}}  # noqa: E731
    assert estimate(sc_tp("h800"))["breakdown_s"]["tp_comm"] > estimate(sc_tp("h100-sxm"))["breakdown_s"]["tp_comm"]


def test_price_null_reaches_the_vectorized_path_as_nan():
    cols = scenario_columns(load_scenario(_llama8b("gb300")))
    assert math.isnan(cols["price_usd_per_gpu_hour"])
    assert cols["matmul_efficiency_fp8"] == pytest.approx(hardware.gpu("gb300")["matmul_efficiency_fp8"])


def test_unmeasured_gpu_warns_measured_gpu_does_not():
    unmeasured = [g for g, e in catalog().items() if not e["efficiency_measured"]]
    assert unmeasured, "some GPUs have no public GEMM measurement"
    for gpu in unmeasured:
        r = estimate(_llama8b(gpu))
        lines = [w for w in r["warnings"] if "no public GEMM measurement" in w]
        assert len(lines) == 1 and lines[0].startswith(f"{gpu}:") and "assumed" in lines[0]
    for gpu in ("h100-sxm", "mi300x", "b200"):
        assert not any("GEMM" in w for w in estimate(_llama8b(gpu))["warnings"])


def test_cli_estimate_prints_the_assumed_efficiency_warning(tmp_path):
    import yaml

    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump(_llama8b("gb300")))
    p = subprocess.run([sys.executable, "-m", "cosearch", "estimate", str(path)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "gb300: no public GEMM measurement" in " ".join(p.stdout.split())
    p = subprocess.run([sys.executable, "-m", "cosearch", "estimate", str(path), "--json"], capture_output=True, text=True)
    assert any("gb300" in w for w in json.loads(p.stdout)["warnings"])


def test_fp8_on_a_gpu_without_fp8_is_a_one_line_error():
    for gpu in ("a100-80gb", "v100-32gb"):
        with pytest.raises(CosearchError) as err:
            estimate(_llama8b(gpu, "fp8"))
        assert "\n" not in str(err.value) and "fp8" in str(err.value)


def test_fp8_uses_the_catalog_fp8_efficiency_where_measured():
    cols = scenario_columns(load_scenario(_llama8b("b200", "fp8")))
    assert cols["matmul_efficiency_fp8"] == pytest.approx(hardware.gpu("b200")["matmul_efficiency_fp8"])
    fast = estimate(_llama8b("b200", "fp8"))["step_time_s"]
    assert fast < estimate(_llama8b("b200"))["step_time_s"]
    # no fp8 measurement: NaN in the column, the model's bf16 x profile ratio applies (still faster than bf16)
    cols = scenario_columns(load_scenario(_llama8b("mi355x", "fp8")))
    assert math.isnan(cols["matmul_efficiency_fp8"])
    assert estimate(_llama8b("mi355x", "fp8"))["step_time_s"] < estimate(_llama8b("mi355x"))["step_time_s"]


def test_search_space_carries_fp8_efficiency_per_gpu():
    from cosearch.search.space import parse_space

    gpus = ["h100-sxm", "b200", "mi355x"]
    sp = parse_space({
        "model": "llama3-8b", "training": {"global_batch": 256, "precision": "fp8", "tokens": 1e11},
        "cluster": {"gpu": gpus, "gpus": 8}, "plan": {"tp": 2, "pp": 1, "recompute": "selective"},
        "objectives": ["time_to_train_days", "cost_to_train_usd"],
    })
    rows = np.array([[0.0], [1.0], [2.0]])
    cols, _ = sp.columns(sp.assign_from_rows(rows))
    fp8 = np.broadcast_to(np.asarray(cols["matmul_efficiency_fp8"], dtype=float), (3,))
    for i, g in enumerate(gpus):
        want = hardware.gpu(g)["matmul_efficiency_fp8"]
        assert (math.isnan(want) and math.isnan(fp8[i])) or fp8[i] == pytest.approx(want)
    m = sp.evaluate_rows(rows)
    for i, sc in enumerate(sp.scenarios(rows)):
        assert estimate(sc)["step_time_s"] == pytest.approx(m["step_time_s"][i], rel=1e-12)


def test_catalog_cli_shows_efficiency():
    p = subprocess.run([sys.executable, "-m", "cosearch", "catalog", "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rows = [r for g in json.loads(p.stdout) for r in g["instances"]]
    assert rows and all({"large_gemm_bf16", "efficiency_measured", "efficiency_source"} <= set(r) for r in rows)
    p = subprocess.run([sys.executable, "-m", "cosearch", "catalog"], capture_output=True, text=True)
    assert "GEMM eff" in p.stdout
