"""Code written once where it was written twice: the one version gives what each copy gave."""
from __future__ import annotations

import math

import pytest

import cosearch.data
from cosearch import hardware
from cosearch.errors import CosearchError
from cosearch.inventory import type_hardware
from cosearch.model.hetero import HARDWARE_COLUMNS
from cosearch.scenario import ClusterSpec, hardware_values


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("gpu", hardware.gpu_ids())
@pytest.mark.parametrize("precision", hardware.PRECISIONS)
def test_type_hardware_is_the_scenario_path(gpu, precision):
    """An inventory type's columns (hardware.type_columns + its peak) equal what a one-GPU-type scenario's
    hardware_values gives for them, and a precision the type lacks fails with the same error."""
    try:
        want = {k: v for k, v in hardware_values(ClusterSpec(gpu=gpu, gpus=1), precision).items()
                if k in HARDWARE_COLUMNS}
    except CosearchError as e:
        with pytest.raises(CosearchError) as got:
            type_hardware(gpu, precision)
        assert (got.value.field, str(got.value)) == (e.field, str(e))
        return
    got = type_hardware(gpu, precision)
    assert set(got) == set(want) == set(HARDWARE_COLUMNS)
    assert all(_same(got[k], want[k]) for k in want), gpu


def test_data_dir_copies_are_parsed_by_the_safe_reader(tmp_path, monkeypatch):
    """Every YAML data file goes through cosearch.data.data_doc: a COSEARCH_DATA_DIR copy with an alias is
    refused with a one-line error naming that copy (instances.yaml named only the file; profile_published.yaml
    was parsed by plain yaml.safe_load, aliases and all)."""
    from cosearch.cloud import catalog
    from cosearch.model.profile import _published_profile

    monkeypatch.setenv("COSEARCH_DATA_DIR", str(tmp_path))
    for name, read in (("instances.yaml", catalog.load_catalog), ("profile_published.yaml", _published_profile),
                       ("gpus.yaml", lambda: cosearch.data.data_yaml("gpus.yaml", "gpus"))):
        path = tmp_path / name
        path.write_text("a: &a [1, 2]\nb: *a\n")
        with pytest.raises(CosearchError) as err:
            read()
        assert err.value.field == f"COSEARCH_DATA_DIR: {path}" and "aliases" in str(err.value), str(err.value)
        path.unlink()
    catalog.clear_cache()


def test_shipped_data_files_parse_as_before(monkeypatch):
    """The shipped files (no COSEARCH_DATA_DIR) come back as plain yaml.safe_load gives them."""
    from importlib import resources

    import yaml

    monkeypatch.delenv("COSEARCH_DATA_DIR", raising=False)
    for name in ("gpus.yaml", "instances.yaml", "models.yaml", "prediction_interval.yaml", "profile_published.yaml"):
        assert cosearch.data.data_doc(name) == yaml.safe_load(resources.files("cosearch.data").joinpath(name).read_text())


def test_dense_model_refuses_dense_ffn_hidden():
    """model.dense_ffn_hidden (the MLP width of a MoE model's leading dense layers) on a dense model was accepted
    and ignored (gpt3-175b with dense_ffn_hidden: 1234 estimated as without it); now refused as shared_ffn_hidden."""
    from cosearch.presets import preset
    from cosearch.scenario import parse_scenario

    base = {"model": dict(preset("gpt3-175b")), "training": {"global_batch": 1536, "tokens": 3e11, "precision": "bf16"},
            "cluster": {"gpu": "a100-80gb", "gpus": 1024}, "plan": {"tp": 8, "pp": 8}}
    parse_scenario(base)
    with pytest.raises(CosearchError) as err:
        parse_scenario({**base, "model": {**base["model"], "dense_ffn_hidden": 1234}})
    assert err.value.field == "model.dense_ffn_hidden" and "needs model.experts > 0" in str(err.value)
