"""CLI of studies: one-line errors with exit code 2, best/pareto/studies, and resume after SIGKILL
of a real `cosearch run` subprocess on the default journal storage."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from cosearch.cli import main

ROOT = Path(__file__).resolve().parents[1]
SPACE = {
    "model": "gpt3-175b",
    "training": {"global_batch": 1536, "tokens": 3.0e11, "precision": "bf16"},
    "cluster": {"gpu": ["a100-80gb", "h100-sxm"], "gpus": [512, 1024]},
    "plan": {"tp": [2, 4, 8], "pp": [4, 8, 16], "microbatch": [1, 2], "recompute": ["none", "selective", "full"],
             "zero": [0, 1]},
    "objectives": ["time_to_train_days", "cost_to_train_usd"],
    "constraints": {"max_cost_usd": 1.2e6},
}


def write_space(tmp_path: Path, **over) -> str:
    d = dict(SPACE, **over)
    p = tmp_path / "space.yaml"
    p.write_text(yaml.safe_dump(d))
    return str(p)


def run_cli(args, capsys):
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("content, match", [
    ("model: gpt3-175b\ntraining: {global_batch: 8\n", "malformed YAML"),
    ("model: gpt3-175b\ntraining: {global_batch: 8}\ncluster: {gpu: a100-80gb, gpus: 8}\nplan: {tp: [1, 3, 5]}\n"
     "objectives: [speed]\n", "unknown metric"),
    ("model: gpt3-175b\ntraining: {global_batch: 8}\ncluster: {gpu: a100-80gb, gpus: 8}\nplan: {tp: {min: 4, max: 1}}\n",
     "min <= max"),
])
def test_malformed_space_one_line_exit_2(tmp_path, capsys, content, match):
    p = tmp_path / "bad.yaml"
    p.write_text(content)
    rc, out, err = run_cli(["run", str(p), "--study", "x", "--storage", str(tmp_path / "j.journal")], capsys)
    assert rc == 2
    assert err.startswith("error: ") and match in err and err.count("\n") == 1


def test_unknown_sampler_and_empty_region_exit_2(tmp_path, capsys):
    sp = write_space(tmp_path)
    rc, _, err = run_cli(["run", sp, "--study", "x", "--sampler", "magic", "--storage", str(tmp_path / "j")], capsys)
    assert rc == 2 and "unknown sampler 'magic'" in err and err.count("\n") == 1
    empty = write_space(tmp_path, constraints={"max_cost_usd": 5.0})
    for sampler in ("tpe", "exhaustive"):
        rc, _, err = run_cli(["run", empty, "--study", f"e-{sampler}", "--sampler", sampler, "--storage",
                              str(tmp_path / "j")], capsys)
        assert rc == 2 and "empty feasible region" in err and err.count("\n") == 1
    rc, _, err = run_cli(["best", "--study", "nope", "--storage", str(tmp_path / "j")], capsys)
    assert rc == 2 and "no study named 'nope'" in err and err.count("\n") == 1


def test_run_best_pareto_studies(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # default storage: ./cosearch_studies.journal
    sp = write_space(tmp_path)
    rc, out, _ = run_cli(["run", sp, "--study", "s", "--sampler", "nsga2", "--trials", "100"], capsys)
    assert rc == 0 and "Pareto front" in out and (tmp_path / "cosearch_studies.journal").exists()
    rc, out, _ = run_cli(["best", "--study", "s", "--max-gpus", "512", "--json"], capsys)
    assert rc == 0
    res = json.loads(out)
    assert res["metrics"]["gpus"] <= 512 and res["scenario"]["cluster"]["gpus"] <= 512
    rc, out, err = run_cli(["best", "--study", "s", "--max-cost-usd", "1"], capsys)
    assert rc == 1 and "nothing qualifies" in err
    rc, out, _ = run_cli(["pareto", "--study", "s", "--csv", "f.csv", "--plot", "f.png"], capsys)
    assert rc == 0 and (tmp_path / "f.csv").read_text().startswith("trial,")
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    rc, _, _ = run_cli(["pareto", "--study", "s", "--plot", "f.html", "--parquet", "f.parquet"], capsys)
    assert rc == 0 and "plotly" in (tmp_path / "f.html").read_text()[:100000].lower()
    import pandas as pd

    csv, parquet = pd.read_csv(tmp_path / "f.csv"), pd.read_parquet(tmp_path / "f.parquet")
    assert list(parquet["trial"]) == list(csv["trial"])  # the same front in both tables
    assert parquet["time_to_train_days"].to_numpy() == pytest.approx(csv["time_to_train_days"].to_numpy())
    rc, out, _ = run_cli(["studies", "--json"], capsys)
    assert rc == 0 and json.loads(out)[0]["trials"] == 100


def _states(journal: Path, name: str = "k") -> dict[int, tuple]:
    st = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    study = optuna.load_study(study_name=name, storage=st)
    return {t.number: (t.state, tuple(t.values or ()), json.dumps(t.params, sort_keys=True)) for t in study.get_trials()}


def test_resume_after_sigkill(tmp_path):
    """A real `cosearch run` killed with SIGKILL while a batch is RUNNING: finished trials are kept
    as they were, the RUNNING ones are marked FAIL by the next run, which completes to N."""
    sp = write_space(tmp_path)
    journal = tmp_path / "cosearch_studies.journal"
    env = dict(os.environ, COSEARCH_DEBUG_BATCH_PAUSE="0.3", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "cosearch", "run", sp, "--study", "k", "--sampler", "random", "--trials", "60",
           "--batch-size", "4", "--seed", "1"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    before = {}
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            time.sleep(0.05)
            if not journal.exists():
                continue
            try:
                states = _states(journal)
            except Exception:  # study not created yet
                continue
            done = [n for n, s in states.items() if s[0] == TrialState.COMPLETE]
            running = [n for n, s in states.items() if s[0] == TrialState.RUNNING]
            if len(done) >= 8 and running:
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(timeout=30)
        before = _states(journal)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    finished = {n: s for n, s in before.items() if s[0] == TrialState.COMPLETE}
    running = [n for n, s in before.items() if s[0] == TrialState.RUNNING]
    assert finished and running
    env.pop("COSEARCH_DEBUG_BATCH_PAUSE")
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    after = _states(journal)
    for n, s in finished.items():  # no finished trial lost or changed
        assert after[n] == s
    for n in running:  # the crash's RUNNING trials are FAIL now
        assert after[n][0] == TrialState.FAIL
    complete = [n for n, s in after.items() if s[0] == TrialState.COMPLETE]
    assert len(complete) == 60  # N in total, none duplicated
    assert not [n for n, s in after.items() if s[0] == TrialState.RUNNING]


def test_run_with_calibrated_profile_and_resume_guard(tmp_path, capsys):
    """`run --profile` evaluates with the user's profile (a slower GEMM scale gives exactly the step
    times `estimate` gives with that profile), and the study refuses to resume under another profile."""
    from cosearch.calibration import read_profile_file
    from cosearch.estimate import estimate

    slow = tmp_path / "slow.yaml"
    slow.write_text("profile:\n  matmul_scale: 0.6\n  flash_attention_relative: 0.4238\n  fsdp_overlap: 0.0\n")
    space = write_space(tmp_path)
    journal = str(tmp_path / "p.journal")
    rc, _, err = run_cli(["run", space, "--study", "slow", "--storage", journal, "--sampler", "random", "--trials", "30",
                          "--profile", str(slow)], capsys)
    assert rc == 0, err
    prof, _ = read_profile_file(slow)
    study = optuna.load_study(study_name="slow", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(journal)))
    done = [t for t in study.trials if t.state == TrialState.COMPLETE and t.user_attrs.get("metrics", {}).get("valid")]
    assert done
    for t in done[:5]:
        scalar = estimate(t.user_attrs["scenario"], prof)["step_time_s"]
        default = estimate(t.user_attrs["scenario"])["step_time_s"]
        assert t.user_attrs["metrics"]["step_time_s"] == pytest.approx(scalar, rel=1e-12)
        assert scalar > default  # 0.6 < the shipped 0.9055: matrix multiplies run slower
    rc, _, err = run_cli(["run", space, "--study", "slow", "--storage", journal, "--sampler", "random", "--trials", "40"],
                         capsys)
    assert rc == 2 and err.startswith("error: --profile") and err.count("\n") == 1


def test_ctrl_c_saves_the_batch_in_flight_and_exits_130(tmp_path):
    """SIGINT to a real `cosearch run` while a batch is RUNNING: the batch is finished and stored,
    nothing is left RUNNING, exit code 130 with a one-line hint; the same command then completes."""
    sp = write_space(tmp_path)
    journal = tmp_path / "cosearch_studies.journal"
    env = dict(os.environ, COSEARCH_DEBUG_BATCH_PAUSE="0.5", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "cosearch", "run", sp, "--study", "c", "--sampler", "random", "--trials", "60",
           "--batch-size", "4", "--seed", "2"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    running_at_signal: list[int] = []
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not running_at_signal:
            time.sleep(0.05)
            if not journal.exists():
                continue
            try:
                states = _states(journal, "c")
            except Exception:  # study not created yet
                continue
            done = [n for n, s in states.items() if s[0] == TrialState.COMPLETE]
            running_at_signal = [n for n, s in states.items() if s[0] == TrialState.RUNNING] if len(done) >= 4 else []
        assert running_at_signal, "never caught a batch in flight"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert "interrupted" in err and "Traceback" not in err
    after = _states(journal, "c")
    assert all(after[n][0] == TrialState.COMPLETE for n in running_at_signal)  # the batch in flight was saved
    assert not [n for n, s in after.items() if s[0] == TrialState.RUNNING]
    assert len(after) < 60
    env.pop("COSEARCH_DEBUG_BATCH_PAUSE")
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    final = _states(journal, "c")
    assert sum(s[0] == TrialState.COMPLETE for s in final.values()) == 60 == len(final)


def test_run_warns_when_the_front_leaves_the_calibrated_range(tmp_path, capsys):
    prof = tmp_path / "narrow.yaml"
    prof.write_text("profile:\n  matmul_scale: 0.9\ncalibrated_range:\n  rows: 10\n  gpu_types: [a100-80gb]\n"
                    "  params_b: [1, 200]\n  gpus: [8, 600]\n  seq_len: [2048, 2048]\n")
    rc, _, err = run_cli(["run", write_space(tmp_path), "--study", "n", "--storage", str(tmp_path / "n.journal"),
                          "--sampler", "exhaustive", "--profile", str(prof)], capsys)
    assert rc == 0
    lines = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    # the space holds 512 and 1024 GPUs of A100 and H100: front points on H100 or on 1024 GPUs warn,
    # one summary line per field, never about the fields inside the range (model size, seq_len)
    assert lines and all("front configurations extrapolate" in ln for ln in lines)
    fields = {ln.split(" in ")[1].split(" ")[0] for ln in lines}
    assert fields <= {"cluster.gpu", "cluster.gpus"}
    study = optuna.load_study(study_name="n", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "n.journal"))))
    outside = sum(t.user_attrs["scenario"]["cluster"]["gpus"] > 600 or t.user_attrs["scenario"]["cluster"]["gpu"] != "a100-80gb"
                  for t in study.trials)
    assert outside > 0


MIXED = {"model": "llama3-8b", "training": {"global_batch": 64, "precision": "bf16", "tokens": 1.0e11},
         "cluster": {"gpu": ["h100-sxm", "b300"], "gpus": [8, 16]},
         "plan": {"tp": [1, 2], "microbatch": [1, 2], "recompute": ["none", "full"]},
         "objectives": ["time_to_train_days", "cost_to_train_usd"]}


@pytest.mark.parametrize("sampler", ["exhaustive", "nsga2"])
def test_cli_shows_a_plan_without_a_cost_as_missing(tmp_path, capsys, sampler):
    """b300 has no price, so its cost is unknown. best named a 9.84-day H100 plan (the 2.97-day b300 one was
    a FAIL trial, or off the exhaustive front); pareto, its CSV and plot left the b300 plan out. Now best finds
    it and says its cost is unknown, pareto lists it with "-" (CSV: empty), the plot draws it as a line."""
    import csv

    p = tmp_path / "mixed.yaml"
    p.write_text(yaml.safe_dump(MIXED))
    j = str(tmp_path / "j.journal")
    rc, out, err = run_cli(["run", str(p), "--study", "m", "--storage", j, "--sampler", sampler, "--trials", "300"], capsys)
    assert rc == 0, err
    rc, out, _ = run_cli(["best", "--study", "m", "--storage", j, "--json"], capsys)
    res = json.loads(out)
    assert res["scenario"]["cluster"]["gpu"] == "b300" and res["value"] == pytest.approx(2.9251, rel=1e-3)
    assert res["values"]["cost_to_train_usd"] is None and res["metrics"]["cost_to_train_usd"] is None
    rc, out, _ = run_cli(["best", "--study", "m", "--storage", j], capsys)
    assert rc == 0 and re.search(r"cost_to_train_usd +- \(unknown: no price", out)
    rc, out, _ = run_cli(["best", "--study", "m", "--storage", j, "--max-cost-usd", "1e9", "--json"], capsys)
    assert json.loads(out)["scenario"]["cluster"]["gpu"] == "h100-sxm"  # a cost budget never holds an unknown cost
    rc, out, err = run_cli(["pareto", "--study", "m", "--storage", j, "--csv", str(tmp_path / "f.csv"),
                            "--plot", str(tmp_path / "f.png")], capsys)
    assert rc == 0, err
    rows = list(csv.DictReader((tmp_path / "f.csv").open()))
    assert [r["cluster.gpu"] for r in rows] == ["b300", "h100-sxm", "h100-sxm"]
    assert rows[0]["cost_to_train_usd"] == "" and float(rows[1]["cost_to_train_usd"]) > 0
    assert (tmp_path / "f.png").stat().st_size > 0
    rc, out, _ = run_cli(["pareto", "--study", "m", "--storage", j, "--plot", str(tmp_path / "f.html")], capsys)
    assert rc == 0 and "front, no cost_to_train_usd" in (tmp_path / "f.html").read_text()
    rc, out, _ = run_cli(["studies", "--storage", j, "--json"], capsys)
    assert json.loads(out)[0]["best"]["time_to_train_days"] == pytest.approx(res["value"], rel=1e-12)


def test_cli_a_cost_without_any_price(tmp_path, capsys):
    """A space whose only GPUs have no price and a cost objective: one line naming the field, exit 2 (it ran
    and said "0 feasible ... no feasible configuration found" of 32 feasible points). A study whose feasible
    trials are all unpriced: best on cost says so (it blamed a missing training.tokens, which the space sets)."""
    p = tmp_path / "unpriced.yaml"
    p.write_text(yaml.safe_dump(dict(MIXED, cluster={"gpu": ["b300", "mi355x"], "gpus": [8, 16]})))
    j = str(tmp_path / "j.journal")
    rc, out, err = run_cli(["run", str(p), "--study", "u", "--storage", j, "--sampler", "random", "--trials", "20"], capsys)
    assert rc == 2 and err.startswith("error: cluster.price_usd_per_gpu_hour: needed by cost_to_train_usd")
    assert err.count("\n") == 1
    p.write_text(yaml.safe_dump(dict(MIXED, cluster={"gpu": ["a10g", "b300"], "gpus": 8},  # a10g: out of memory
                                     plan={"microbatch": 2}, objectives=["step_time_s"])))
    rc, out, err = run_cli(["run", str(p), "--study", "o", "--storage", j, "--sampler", "random", "--trials", "10"], capsys)
    assert rc == 0, err
    rc, out, err = run_cli(["best", "--study", "o", "--storage", j, "--objective", "cost_to_train_usd"], capsys)
    assert rc == 2 and "no price for their GPUs (b300)" in err and "training.tokens" not in err
