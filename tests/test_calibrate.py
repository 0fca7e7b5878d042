"""`cosearch calibrate`: user CSV format, recovery of a known profile, held-out error, calibrated range."""
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from cosearch import estimate
from cosearch.calibration import FITTABLE, read_profile_file
from cosearch.model.profile import DEFAULT_PROFILE
from conftest import run_cli

PUBLISHED = Path(__file__).resolve().parents[1] / "experiments" / "data" / "validation" / "published_runs_public.csv"
TRUE = dict(matmul_scale=0.8, network_efficiency=0.6)


def _synthetic_rows():
    """Scenarios a user might have run, with step times 'measured' by the model under TRUE."""
    truth = DEFAULT_PROFILE.model_copy(update=TRUE)
    rows = []
    for model, gpu, nodes, zero in itertools.product(["llama2-7b", "llama2-13b"], ["a100-80gb", "h100-sxm"], [1, 2, 4], [1, 3]):
        gpus = 8 * nodes
        row = dict(model=model, seq_len=2048, global_batch=256, gpu=gpu, gpus=gpus, tp=2 if zero == 1 else 1, pp=1,
                   microbatch=2, recompute="selective", zero=zero, name=f"{model}-{gpu}-{gpus}")
        sc = {"model": model, "training": {"global_batch": 256}, "cluster": {"gpu": gpu, "gpus": gpus},
              "plan": {k: row[k] for k in ("tp", "pp", "microbatch", "recompute", "zero")}}
        sc["model"] = {**__import__("cosearch.presets", fromlist=["preset"]).preset(model), "seq_len": 2048}
        row["measured_step_time_s"] = estimate(sc, truth)["step_time_s"]
        rows.append(row)
    return pd.DataFrame(rows)


def test_fittable_list_of_cli_matches_library():
    from cosearch.cli.calibrate import FITTABLE as CLI_FITTABLE

    assert tuple(FITTABLE) == CLI_FITTABLE


def test_calibration_recovers_known_profile_from_synthetic_measurements(tmp_path, capsys, caplog):
    csv = tmp_path / "measured.csv"
    _synthetic_rows().to_csv(csv, index=False)
    out = tmp_path / "profile.yaml"
    rc, stdout, err = run_cli(capsys, "calibrate", str(csv), "--out", str(out), "--params", "matmul_scale,network_efficiency", "--json")
    assert rc == 0, err
    report = json.loads(stdout)
    assert report["format"] == "user" and report["rows"] == 24
    assert report["fitted"]["matmul_scale"] == pytest.approx(0.8, rel=0.01)
    assert report["fitted"]["network_efficiency"] == pytest.approx(0.6, rel=0.02)
    assert report["after_held_out"]["median"] < 0.01 < report["before"]["median"]
    prof, rng = read_profile_file(out)
    assert prof.matmul_scale == pytest.approx(0.8, rel=0.01)
    assert rng.gpu_types == ["a100-80gb", "h100-sxm"] and tuple(rng.gpus) == (8, 32) and tuple(rng.seq_len) == (2048, 2048)
    # estimate --profile: inside the range no warning; outside (another GPU, bigger model) warnings
    inside = {"model": {**__import__("cosearch.presets", fromlist=["preset"]).preset("llama2-7b"), "seq_len": 2048},
              "training": {"global_batch": 256}, "cluster": {"gpu": "h100-sxm", "gpus": 16}, "plan": {"tp": 2, "zero": 1}}
    sc_in = tmp_path / "in.yaml"
    sc_in.write_text(yaml.safe_dump(inside))
    rc, stdout, _ = run_cli(capsys, "estimate", str(sc_in), "--profile", str(out), "--json")
    assert rc == 0 and json.loads(stdout)["warnings"] == []
    outside = dict(inside, model="llama2-70b", cluster={"gpu": "b200", "gpus": 64}, plan={"tp": 8, "zero": 1})
    sc_out = tmp_path / "out.yaml"
    sc_out.write_text(yaml.safe_dump(outside))
    rc, stdout, err = run_cli(capsys, "estimate", str(sc_out), "--profile", str(out), "--json")
    warnings = json.loads(stdout)["warnings"]
    assert rc == 0 and len(warnings) == 4                      # GPU type, size, GPU count, seq_len
    assert any("b200" in w for w in warnings)
    assert any("extrapolating" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)  # also logged


def test_calibration_lowers_held_out_error_on_published_runs(tmp_path, capsys):
    rc, stdout, err = run_cli(capsys, "calibrate", str(PUBLISHED), "--out", str(tmp_path / "p.yaml"), "--base", "kernel",
                            "--params", "matmul_scale,fsdp_overlap", "--folds", "3", "--json")
    assert rc == 0, err
    r = json.loads(stdout)
    assert r["format"] == "published" and r["rows"] >= 100
    assert r["after_held_out"]["median"] < 0.8 * r["before"]["median"]
    assert r["after_held_out"]["p90"] < r["before"]["p90"]
    assert "after_leave_one_source_out" in r


@pytest.mark.parametrize("args, field", [
    (("--params", "matmul_scale,warp_speed"), "--params"),
    (("--folds", "1"), "--folds"),
])
def test_calibrate_option_errors_are_one_line(tmp_path, capsys, args, field):
    csv = tmp_path / "m.csv"
    _synthetic_rows().head(3).to_csv(csv, index=False)
    rc, out, err = run_cli(capsys, "calibrate", str(csv), "--out", str(tmp_path / "p.yaml"), *args)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and field in err


@pytest.mark.parametrize("frame, field", [
    (pd.DataFrame({"model": ["llama2-7b"], "gpu": ["h100-sxm"], "gpus": [8], "global_batch": [64]}), "measured_step_time_s"),
    (pd.DataFrame({"model": ["llama2-7b"], "gpu": ["h100-sxm"], "gpus": [8], "global_batch": [64], "colour": ["red"],
                   "measured_step_time_s": [1.0]}), "column colour"),
    (pd.DataFrame({"model": ["llama2-7b", "llama2-7b"], "gpu": ["h100-sxm", "h900"], "gpus": [8, 8], "global_batch": [64, 64],
                   "measured_step_time_s": [1.0, 1.0]}), "row 2: cluster.gpu"),
    (pd.DataFrame({"model": ["llama2-7b", "llama2-7b"], "gpu": ["h100-sxm"] * 2, "gpus": [24, 8], "global_batch": [64, 64],
                   "tp": [3, 1], "measured_step_time_s": [1.0, 1.0]}), "row 1: plan.tp"),
])
def test_measured_csv_errors_name_row_and_field(tmp_path, capsys, frame, field):
    csv = tmp_path / "m.csv"
    frame.to_csv(csv, index=False)
    rc, out, err = run_cli(capsys, "calibrate", str(csv), "--out", str(tmp_path / "p.yaml"))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and field in err, err


def test_calibrate_cli_subprocess_exit_code(tmp_path):
    r = subprocess.run([sys.executable, "-m", "cosearch", "calibrate", str(tmp_path / "missing.csv"), "--out", "x.yaml"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "missing.csv" in r.stderr


def test_negative_seed_is_a_one_line_error(tmp_path, capsys):
    """numpy's generators take no negative seed: `--seed -5` is refused naming the flag (it raised a numpy
    ValueError from the fold assignment before)."""
    rc, _, err = run_cli(capsys, "calibrate", str(PUBLISHED), "--out", str(tmp_path / "p.yaml"), "--seed", "-5")
    assert rc == 2 and err.startswith("error: --seed") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.yaml").exists()


def test_cross_validate_holds_out_only_the_masked_rows_group_by_group():
    """``held``: only those rows' groups are held out, one at a time; the other rows are in every fit and get no
    held-out error. Each held group's errors are those of a fit on every other row, as without a mask."""
    import numpy as np

    from cosearch.calibration import _subset, cross_validate, fit_profile, log_errors
    from cosearch.validation import build_candidates, load_published_runs

    c = build_candidates(load_published_runs())
    src = c.rows["source_id"].to_numpy()
    held = np.isin(src, ["S4", "S8"])
    params = ("matmul_scale",)
    out = cross_validate(c, src, params, held=held)
    assert np.isnan(out[~held]).all() and np.isfinite(out[held]).all()
    for s in ("S4", "S8"):
        test = src == s
        fit = fit_profile(_subset(c, ~test), params)
        assert np.allclose(out[test], log_errors(_subset(c, test), fit.profile))
    # unmasked, the same groups give the same errors
    full = cross_validate(c, src, params)
    assert np.allclose(full[held], out[held])
