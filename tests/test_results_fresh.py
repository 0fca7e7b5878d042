"""The committed experiment results were computed by the model as it is now.

Each script in experiments/ that reports model outputs stamps its results JSON with
``cosearch.fingerprint.model_fingerprint()``; a change to the physics, the catalog or the shipped
profile changes the digest, and these tests name the scripts to re-run (stop 29 found five scripts'
results stale and one script broken after model changes that re-ran only validate.py).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from cosearch import fingerprint
from cosearch.fingerprint import PROBES, model_fingerprint

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results"

#: results file -> the script that writes it
STAMPED = {
    "validation.json": "validate.py", "validation_bridge.json": "validate.py",
    "validation_long_context.json": "validate.py", "validation_moe.json": "validate.py",
    "validation_torchtitan.json": "validate.py", "validation_jax.json": "validate.py",
    "prediction_interval.json": "prediction_interval.py", "calibrate_published.json": "calibrate_published.py",
    "cloud_case_study.json": "cloud_case_study.py", "codesign_memory_expansion.json": "codesign_memory_expansion.py",
    "codesign_network.json": "codesign_network.py", "codesign_strong_scaling.json": "codesign_strong_scaling.py",
    "deeppool_burst.json": "deeppool_burst.py", "hetero_inventory.json": "hetero_inventory.py",
    "moe_worked_example.json": "moe_worked_example.py", "spot_check_llama3.json": "spot_check_llama3.py",
    # model vs our own GPU measurements (no GPU needed to re-run: they read results/gpu/*.csv)
    "gpu/compare_layer.json": "gpu/compare_layer.py", "gpu/compare_moe.json": "gpu/compare_moe.py",
    "gpu/compare_step.json": "gpu/compare_step.py",
}


@pytest.mark.parametrize("name", sorted(STAMPED))
def test_committed_results_come_from_the_current_model(name):
    stamp = json.loads((RESULTS / name).read_text()).get("model_fingerprint")
    assert stamp == model_fingerprint(), (
        f"experiments/results/{name} was computed by another model (fingerprint {stamp}, now {model_fingerprint()}): "
        f"re-run experiments/{STAMPED[name]} (after calibrate_default.py and prediction_interval.py if the profile moved)")


def test_every_script_that_writes_a_stamped_file_stamps_it():
    scripts = Path(__file__).resolve().parents[1] / "experiments"
    for script in set(STAMPED.values()):
        assert "model_fingerprint()" in (scripts / script).read_text(), script


def test_fingerprint_moves_with_an_answer_and_not_with_rounding():
    base = fingerprint.probe_values()
    assert fingerprint.digest(base) == model_fingerprint()
    # a step time 0.1 % slower on one probe is a different model
    moved = copy.deepcopy(base)
    moved[3][1]["step_time_s"] *= 1.001
    assert fingerprint.digest(moved) != fingerprint.digest(base)
    # a last-bit difference (another machine's libm) is not
    nudged = copy.deepcopy(base)
    nudged[3][1]["step_time_s"] *= 1 + 1e-12
    assert fingerprint.digest(nudged) == fingerprint.digest(base)
    # the probes are distinct and each evaluates (a probe that raised would break every stamp)
    assert len({n for n, _ in PROBES}) == len(PROBES) >= 8
    assert all(o["step_time_s"] > 0 for _, o in base)
