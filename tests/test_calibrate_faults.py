"""`cosearch calibrate` faults found by fuzzing: copies of a configuration on both sides of a fold (a held-out
error that was in-sample), per-row plan checks that made a 100k-row CSV take two minutes, and a step time of
1e-300 s accepted as a measurement."""
import functools
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import run_cli

from cosearch import measured
from cosearch.calibration import calibrate, configuration_ids, error_stats, fit_profile, kfold_groups, log_errors, _subset
from cosearch.errors import CosearchError
from cosearch.measured import load_measured
from cosearch.model.profile import DEFAULT_PROFILE
from test_calibrate import PUBLISHED, _synthetic_rows

PARAMS = ("matmul_scale", "network_efficiency")


@functools.lru_cache(maxsize=1)
def _rows() -> pd.DataFrame:
    return _synthetic_rows()


def _noisy(configs: int, copies: int) -> pd.DataFrame:
    """``configs`` distinct configurations, each measured ``copies`` times with a different error per
    configuration (so no profile fits every row, and in-sample and held-out errors differ)."""
    base = _rows().head(configs).copy()
    base["measured_step_time_s"] *= 1 + 0.15 * np.sin(3.0 * np.arange(configs))
    return pd.concat([base] * copies, ignore_index=True)


def _csv(tmp_path, frame: pd.DataFrame, name: str = "m.csv"):
    p = tmp_path / name
    frame.to_csv(p, index=False)
    return p


def _one_line_refusal(capsys, csv, *args) -> str:
    out = csv.parent / "p.yaml"
    rc, stdout, err = run_cli(capsys, "calibrate", str(csv), "--out", str(out), *args)
    assert rc == 2 and stdout == "" and len(err.strip().splitlines()) == 1, (rc, err)
    assert not out.exists()
    return err


# --- 1. held-out error by distinct configuration ---------------------------------------------------


def test_two_identical_rows_are_refused_naming_the_csv(tmp_path, capsys):
    """Two copies of one run are one configuration: no 2-parameter fit, no held-out error (was: 'held out 0.0 %')."""
    csv = _csv(tmp_path, pd.concat([_rows().head(1)] * 2, ignore_index=True))
    err = _one_line_refusal(capsys, csv)
    assert err.startswith(f"error: {csv}") and "1 distinct configuration" in err and "at least 3" in err


def test_copies_of_a_configuration_share_a_fold_whatever_their_measured_times(tmp_path):
    frame = _noisy(3, 10)
    frame["measured_step_time_s"] *= 1 + 0.01 * np.arange(len(frame))  # repeated measurements differ
    frame["name"] = [f"run-{i}" for i in range(len(frame))]             # and so do their names
    c, _ = load_measured(_csv(tmp_path, frame))
    configs = configuration_ids(c)
    assert configs.tolist() == [0, 1, 2] * 10
    for seed in range(5):
        folds = kfold_groups(configs, 5, seed)
        assert folds.max() + 1 == 3                                      # k capped at the configurations
        assert all(len(set(folds[configs == g])) == 1 for g in range(3))


def test_repeating_every_row_leaves_the_held_out_error_unchanged(tmp_path):
    """Leave-one-configuration-out on 6 configurations, then on 5 copies of each: the same fits (the soft-L1
    objective is only scaled), so the same held-out error; with copies across folds it fell to the in-sample one."""
    once, _ = load_measured(_csv(tmp_path, _noisy(6, 1), "once.csv"))
    five, _ = load_measured(_csv(tmp_path, _noisy(6, 5), "five.csv"))
    _, r1 = calibrate(once, PARAMS, DEFAULT_PROFILE, folds=6)
    _, r5 = calibrate(five, PARAMS, DEFAULT_PROFILE, folds=6)
    assert r5["configurations"] == r1["configurations"] == 6 and r5["folds"] == 6
    for k in ("median", "worst"):
        assert r5["after_held_out"][k] == pytest.approx(r1["after_held_out"][k], rel=1e-3)
    assert r5["after_held_out"]["median"] > 1.2 * r5["after_in_sample"]["median"]


def test_too_few_folds_for_the_parameters_are_refused(tmp_path, capsys):
    """3 configurations in 2 folds: one fit sees 1 configuration for 2 parameters."""
    csv = _csv(tmp_path, _noisy(3, 2))
    err = _one_line_refusal(capsys, csv, "--folds", "2")
    assert "3 distinct configurations" in err and "use at least 3 folds" in err


def test_leave_one_source_out_drops_copies_of_the_held_out_configurations(tmp_path):
    """Source a measured configurations 0-3, source b 2-5: a's fit must not see b's copies of 2 and 3."""
    frame = _noisy(6, 1)
    frame = pd.concat([frame.iloc[0:4].assign(source="a"), frame.iloc[2:6].assign(source="b")], ignore_index=True)
    c, _ = load_measured(_csv(tmp_path, frame))
    _, report = calibrate(c, PARAMS, DEFAULT_PROFILE, by_source=True)
    configs, src = configuration_ids(c), c.rows["source_id"].to_numpy()
    expect = np.empty(len(src))
    for s in ("a", "b"):
        test = src == s
        fit = fit_profile(_subset(c, ~np.isin(configs, configs[test])), PARAMS, DEFAULT_PROFILE, multistart=True)
        expect[test] = log_errors(_subset(c, test), fit.profile)
    got, want = report["after_leave_one_source_out"], error_stats(expect)
    assert got["rows"] == 8 and all(got[k] == pytest.approx(want[k], rel=1e-6) for k in ("median", "p90", "worst"))


# --- 2. bounded work per CSV -----------------------------------------------------------------------


def test_plan_rules_are_checked_on_all_rows_at_once(tmp_path, monkeypatch):
    """No per-row check_scalar (it was ~1 ms a row); a violating row is still named with its rule."""
    calls = []
    real = measured.check_scalar
    monkeypatch.setattr(measured, "check_scalar", lambda cols: (calls.append(1), real(cols))[1])
    c, _ = load_measured(_csv(tmp_path, _rows()))
    assert len(c.rows) == 24 and calls == []
    bad = _rows().copy()
    bad.loc[6, "tp"] = 3  # 3 divides neither the 32 heads nor the 8 GPUs: row 7 (1-based)
    with pytest.raises(CosearchError, match=r"row 7: plan\.tp"):
        load_measured(_csv(tmp_path, bad))
    assert calls == [1]


def test_rows_and_lines_over_the_caps_are_refused_before_parsing(tmp_path, monkeypatch):
    monkeypatch.setattr(measured, "MAX_ROWS", 24)
    monkeypatch.setattr(measured, "MAX_LINES", 40)
    assert len(load_measured(_csv(tmp_path, _rows()))[0].rows) == 24
    with pytest.raises(CosearchError, match=r"25 rows; at most 24 measured rows"):
        load_measured(_csv(tmp_path, pd.concat([_rows(), _rows().head(1)], ignore_index=True)))
    p = tmp_path / "lines.csv"
    p.write_text("measured_step_time_s\n" + "# comment\n" * 40 + "1\n")
    with pytest.raises(CosearchError, match=r"42 lines; a measured CSV holds at most 24 rows"):
        load_measured(p)


def test_a_100k_row_csv_is_refused_in_one_line(tmp_path):
    csv = _csv(tmp_path, pd.concat([_rows()] * 4167, ignore_index=True).head(100_000))
    r = subprocess.run([sys.executable, "-m", "cosearch", "calibrate", str(csv), "--out", str(tmp_path / "p.yaml")],
                       capture_output=True, text=True, timeout=300)  # a hang guard only
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "100,000 rows; at most 10,000" in r.stderr and not (tmp_path / "p.yaml").exists()


# --- 3. physical step times ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1e-300", "5e-324", "9.9e-7", "0", "-1", "2e7", "inf", "nan", "true", "abc"])
def test_unphysical_step_times_are_refused_naming_the_column_and_range(tmp_path, capsys, value):
    frame = _rows().head(3).astype({"measured_step_time_s": object})
    frame.loc[1, "measured_step_time_s"] = value
    err = _one_line_refusal(capsys, _csv(tmp_path, frame))
    assert "row 2: measured_step_time_s" in err and "1e-06 <= x <= 1e+07" in err


def test_step_time_bounds_are_inclusive(tmp_path):
    frame = _rows().head(2).copy()
    frame["measured_step_time_s"] = [1e-6, 1e7]
    assert load_measured(_csv(tmp_path, frame))[0].rows["measured_step_s"].tolist() == [1e-6, 1e7]


def test_a_partial_profile_keeps_the_shipped_values_and_an_empty_one_is_refused(tmp_path):
    """A profile file giving one constant changes that one; the others stay the shipped profile's (they were reset to
    the unfitted kernel constants: an empty file moved a GPT-3 step 7 %). An empty file or a misspelt key is refused
    with the allowed names."""
    from cosearch.calibration import read_profile_file
    from cosearch.errors import CosearchError
    from cosearch.model.profile import DEFAULT_PROFILE

    f = tmp_path / "p.yaml"
    f.write_text("matmul_scale: 0.9\n")
    prof = read_profile_file(f)[0]
    assert prof.matmul_scale == 0.9
    assert prof.model_dump() == {**DEFAULT_PROFILE.model_dump(), "matmul_scale": 0.9}
    for text, field in (("# nothing\n", str(f)), ("profile: {}\n", str(f)), ("matmul_sclae: 0.9\n", f"{f}:matmul_sclae")):
        f.write_text(text)
        with pytest.raises(CosearchError) as err:
            read_profile_file(f)
        assert err.value.field == field and "allowed: " in str(err.value) and "matmul_scale" in str(err.value)


@pytest.mark.parametrize("args,flag,words", [
    (["--params", "matmul_scale,matmul_scale"], "--params", "each parameter once"),
    (["--base", "fancy"], "--base", "neither default, kernel nor a profile file"),
])
def test_repeated_params_and_an_unknown_base_name_the_flag(tmp_path, capsys, args, flag, words):
    """--params matmul_scale,matmul_scale fitted one constant twice (exit 0); --base fancy said 'fancy: cannot read file'."""
    rc, _, err = run_cli(capsys, "calibrate", str(PUBLISHED), "--out", str(tmp_path / "p.yaml"), *args)
    assert rc == 2 and err.startswith(f"error: {flag}") and words in err and err.count("\n") == 1, err
