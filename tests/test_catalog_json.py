"""`cosearch catalog --gpu ID --json` carries what the text output shows: it printed ``[]`` for a catalog GPU no
instance type rents (gb300, h800, ...), nothing of the GPU's datasheet numbers, efficiency or sources. Without
``--gpu`` the JSON was the list of instance types, so it left out the GPUs nobody rents that the text's efficiency
table lists; it is now one ``--gpu ID --json`` object per catalog GPU."""
from __future__ import annotations

import json
import math

import pytest

from cosearch import hardware
from cosearch.cli import main
from cosearch.model.profile import DEFAULT_PROFILE


def _run(capsys, *args):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def _instances_of(capsys, gpu):
    rc, out, err = _run(capsys, "catalog", "--json")
    assert rc == 0, err
    return [r for g in json.loads(out) for r in g["instances"] if r["gpu"] == gpu]


@pytest.mark.parametrize("gpu", hardware.gpu_ids())
def test_gpu_json_carries_the_entry_and_its_instances(gpu, capsys):
    rc, out, err = _run(capsys, "catalog", "--gpu", gpu, "--json")
    assert rc == 0 and err == ""
    d = json.loads(out)  # strict JSON: no NaN (a missing price is null)
    assert set(d) == {"gpu", "instances"}
    g, e = d["gpu"], hardware.gpu(gpu)
    assert g["id"] == gpu and g["name"] == e["name"]
    for key in ("hbm_gib", "hbm_tbps", "nvlink_gbps", "nvlink_domain", "gpus_per_node", "network_gbps", "power_w",
                "efficiency_measured", "efficiency_fp8", "efficiency_source", "efficiency_assumption"):
        assert g[key] == e[key], key
    assert g["peak_tflops"] == e["peak_tflops"]
    assert g["efficiency"]["large_gemm_bf16"] == e["efficiency"]["large_gemm_bf16"]
    assert g["matmul_efficiency"] == pytest.approx(e["matmul_efficiency"])
    price = e["price_usd_per_gpu_hour"]
    assert g["price_usd_per_gpu_hour"] is None if math.isnan(price) else g["price_usd_per_gpu_hour"] == price
    if e["efficiency_fp8"] == "none":
        assert g["matmul_efficiency_fp8_used"] is None
    else:
        assert g["matmul_efficiency_fp8_used"] == pytest.approx(
            hardware.fp8_eta_used(e, DEFAULT_PROFILE.fp8_matmul_relative))
    rows = _instances_of(capsys, gpu)
    assert d["instances"] == rows and g["instance_types"] == len(rows)


def test_gpu_nobody_rents_is_not_an_empty_list(capsys):
    """The case of the defect: the shipped catalog rents no GB300; text and JSON both describe it."""
    assert _instances_of(capsys, "gb300") == []
    rc, out, _ = _run(capsys, "catalog", "--gpu", "gb300", "--json")
    d = json.loads(out)
    assert rc == 0 and d["instances"] == [] and d["gpu"]["instance_types"] == 0
    assert d["gpu"]["hbm_gib"] == 288 and d["gpu"]["price_usd_per_gpu_hour"] is None
    assert d["gpu"]["efficiency_assumption"]  # assumed, with its reason, as the text table says


def test_gpu_and_provider_json_filters_the_instances_only(capsys):
    rc, out, _ = _run(capsys, "catalog", "--gpu", "h100-sxm", "--provider", "gcp", "--json")
    d = json.loads(out)
    assert rc == 0 and d["gpu"]["id"] == "h100-sxm"
    assert d["instances"] and {r["provider"] for r in d["instances"]} == {"gcp"}
    assert d["gpu"]["instance_types"] == len(d["instances"])


@pytest.mark.parametrize("provider", [None, "aws", "gcp"])
def test_without_gpu_the_json_lists_every_gpu_as_gpu_json_prints_it(capsys, provider):
    """Every catalog GPU, in the text efficiency table's order, each exactly what ``--gpu ID --json`` prints (with the
    same --provider); together their instance lists are the instance types the text table shows, each once."""
    from cosearch.cloud.catalog import load_catalog

    extra = [] if provider is None else ["--provider", provider]
    rc, out, err = _run(capsys, "catalog", *extra, "--json")
    assert rc == 0 and err == ""
    got = json.loads(out)  # strict JSON: no NaN
    assert isinstance(got, list) and [g["gpu"]["id"] for g in got] == list(hardware.catalog())
    for g in got:
        assert set(g) == {"gpu", "instances"} and g["gpu"]["instance_types"] == len(g["instances"])
        assert all(r["gpu"] == g["gpu"]["id"] for r in g["instances"])
        rc, one, _ = _run(capsys, "catalog", "--gpu", g["gpu"]["id"], *extra, "--json")
        assert rc == 0 and json.loads(one) == g
    rows = [r for g in got for r in g["instances"]]
    table = load_catalog().table(provider=provider)
    assert sorted((r["provider"], r["instance"]) for r in rows) == sorted(zip(table["provider"], table["instance"]))
    if provider is not None:
        assert rows and {r["provider"] for r in rows} == {provider}
    by_id = {g["gpu"]["id"]: g for g in got}
    assert by_id["gb300"]["instances"] == [] and by_id["gb300"]["gpu"]["hbm_gib"] == 288  # nobody rents it: listed


@pytest.mark.parametrize("extra", [[], ["--json"], ["--provider", "aws", "--json"]])
def test_unknown_gpu_is_one_line_listing_the_ids(extra, capsys):
    rc, out, err = _run(capsys, "catalog", "--gpu", "h100", *extra)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --gpu: unknown GPU id 'h100'; allowed: ")
    assert all(gid in lines[0] for gid in hardware.gpu_ids())


def test_csv_of_a_gpu_nobody_rents_is_a_header(tmp_path, capsys):
    """`catalog --gpu gb300 --csv F` wrote a single empty line; it now writes the table's header and no rows, and a
    GPU with instances writes the same columns."""
    import pandas as pd

    from cosearch.cloud.catalog import TABLE_COLUMNS

    empty, full = tmp_path / "gb300.csv", tmp_path / "h100.csv"
    assert _run(capsys, "catalog", "--gpu", "gb300", "--csv", str(empty))[0] == 0
    assert _run(capsys, "catalog", "--gpu", "h100-sxm", "--csv", str(full))[0] == 0
    e, f = pd.read_csv(empty), pd.read_csv(full)
    assert e.empty and tuple(e.columns) == TABLE_COLUMNS
    assert len(f) >= 1 and tuple(f.columns) == TABLE_COLUMNS and set(f["gpu"]) == {"h100-sxm"}
