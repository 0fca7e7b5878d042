"""CLI and docs polish (issue 11): each test failed before its fix."""
from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
GPT3 = yaml.safe_load((ROOT / "examples" / "gpt3-175b.yaml").read_text())


def _write(tmp_path, sc, name="s.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(sc))
    return str(p)


def _no_fit():
    return {**GPT3, "plan": {**GPT3["plan"], "tp": 2, "recompute": "none", "zero": 0}}


# ------------------------------------------------------------------------------------- estimate
def test_estimate_of_a_plan_that_does_not_fit_says_so_first(tmp_path, capsys):
    rc, out, err = run_cli(capsys, "estimate", _write(tmp_path, _no_fit()))
    assert rc == 0
    first = out.strip().splitlines()[0]
    assert re.match(r"DOES NOT FIT: [\d.]+ GiB of [\d.]+ usable per GPU", first), first


def test_require_fit_exits_3(tmp_path, capsys):
    rc, out, err = run_cli(capsys, "estimate", _write(tmp_path, _no_fit()), "--require-fit")
    assert rc == 3 and out.startswith("DOES NOT FIT")
    rc, out, err = run_cli(capsys, "estimate", _write(tmp_path, _no_fit()), "--require-fit", "--json")
    assert rc == 3 and json.loads(out)["fits"] is False and "DOES NOT FIT" in err and len(err.strip().splitlines()) == 1
    rc, out, _ = run_cli(capsys, "estimate", _write(tmp_path, GPT3), "--require-fit")
    assert rc == 0 and "DOES NOT FIT" not in out
    from cosearch.cli import build_parser

    est = build_parser()._subparsers._group_actions[0].choices["estimate"]
    assert "code 3" in est.format_help()


# ------------------------------------------------------------------------------------- flags and help
def test_version(capsys):
    from cosearch import __version__

    rc, out, _ = run_cli(capsys, "--version")
    assert rc == 0 and out.strip() == f"cosearch {__version__}"


def test_verbose_after_the_subcommand(tmp_path):
    path = _write(tmp_path, GPT3)
    for argv in (["-v", "estimate", path, "--json"], ["estimate", path, "--json", "-v"], ["estimate", "-v", path, "--json"]):
        r = subprocess.run([sys.executable, "-m", "cosearch", *argv], capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert r.returncode == 0, (argv, r.stderr)
    from cosearch.cli import build_parser

    p = build_parser()
    assert p.parse_args(["estimate", "x.yaml", "-v"]).verbose is True
    assert p.parse_args(["-v", "estimate", "x.yaml"]).verbose is True
    assert p.parse_args(["estimate", "x.yaml"]).verbose is False


def test_every_option_has_help():
    from cosearch.cli import build_parser

    missing = []

    def walk(p, name):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for n, sp in a.choices.items():
                    walk(sp, f"{name} {n}")
            elif not a.help:
                missing.append(f"{name} {'/'.join(a.option_strings) or a.dest}")

    walk(build_parser(), "cosearch")
    assert missing == []


def test_best_help_lists_the_metrics(capsys):
    from cosearch.search.space import OBJECTIVE_METRICS

    rc, out, _ = run_cli(capsys, "best", "--help")
    flat = " ".join(out.split())
    assert rc == 0 and all(m in flat for m in OBJECTIVE_METRICS)
    assert "--study STUDY name of the study" in flat


# ------------------------------------------------------------------------------------- explain, rules
@pytest.mark.parametrize("gain, text", [(0.05, "-5.0 %"), (-0.002, "+0.2 %"), (-0.1234, "+12.3 %"), (0.0, "0.0 %"),
                                        (-1e-5, "0.0 %")])
def test_explain_step_change_sign(gain, text):
    from cosearch.cli.explain import step_change

    assert step_change(gain) == text
    assert "--" not in step_change(gain) and "+-" not in step_change(gain)


def test_tp_that_does_not_divide_heads_is_blamed_on_tp():
    from cosearch import estimate
    from cosearch.errors import CosearchError

    sc = {**GPT3, "plan": {**GPT3["plan"], "tp": 7}}  # 1024 GPUs: dp would not be an integer either
    with pytest.raises(CosearchError) as e:
        estimate(sc)
    assert e.value.field == "plan.tp"
    assert "tp (7) must divide model.heads (96)" in str(e.value)
    assert "gpus" not in str(e.value)


# ------------------------------------------------------------------------------------- exhaustive run wording
def test_exhaustive_run_explains_stored_count_vs_front(tmp_path, capsys):
    space = {
        "model": "gpt3-175b",
        "training": {"global_batch": 1536, "tokens": 3.0e11, "precision": "bf16"},
        "cluster": {"gpu": ["a100-80gb", "h100-sxm"], "gpus": [512, 1024]},
        "plan": {"tp": [4, 8], "pp": [8, 16], "microbatch": [1, 2], "recompute": ["selective", "full"]},
        "objectives": ["time_to_train_days", "cost_to_train_usd"],
    }
    sp = tmp_path / "space.yaml"
    sp.write_text(yaml.safe_dump(space))
    rc, out, err = run_cli(capsys, "run", str(sp), "--study", "w", "--storage", str(tmp_path / "j.journal"),
                        "--sampler", "exhaustive")
    flat = " ".join(out.split())
    assert rc == 0, err
    assert "stored front:" not in flat
    m = re.search(r"stored (\d+) configurations \(the front over the objectives and the budgeted metrics", flat)
    f = re.search(r"Pareto front \((\d+) configurations", flat)
    assert m and f and int(f.group(1)) <= int(m.group(1))


# ------------------------------------------------------------------------------------- docs
def test_docs_calibration_csv_pastes_with_its_comment_line(tmp_path):
    from cosearch.measured import load_measured

    doc = (ROOT / "docs" / "calibration.md").read_text()
    block = re.search(r"```csv\n(.*?)```", doc, re.S).group(1)
    assert block.lstrip().startswith("#")
    p = tmp_path / "m.csv"
    p.write_text(block)
    cands, fmt = load_measured(p)
    assert fmt == "user" and len(cands.rows) == 3
    # a '#' inside a cell is data, not a comment
    p.write_text(block.replace("7b-1node", "7b#1node"))
    from cosearch.measured import read_csv

    assert "7b#1node" in set(read_csv(p)["name"])


def test_readme_states_plan_defaults_and_hbm_units():
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "Plan defaults." in readme
    for d in ("tp: 1", "pp: 1", "microbatch: 1", "recompute: none", "sequence_parallel: false", "zero: 0"):
        assert d in readme, d
    assert '`hbm_gib` holds the datasheet "GB" number' in readme
    assert "`hbm_gib` GiB" not in readme
    header = (ROOT / "cosearch" / "data" / "gpus.yaml").read_text().split("\ngpus:")[0]
    assert "NOT a converted GiB value" in header


def test_a_closed_pipe_ends_quietly(monkeypatch):
    """`cosearch estimate --json | head -c 10`: when the reader leaves, plain prints raise BrokenPipeError;
    the CLI returns 141 (128 + SIGPIPE, as a shell reports it) instead of a traceback."""
    from cosearch.cli import main

    class ClosedPipe(io.StringIO):
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["estimate", "examples/gpt3-175b.yaml", "--json"]) == 141


def test_readme_quickstart_output_is_what_estimate_prints():
    """The README's sample output block is the first lines `cosearch estimate examples/gpt3-175b.yaml` prints
    now: a model change that moves the quick-start answer makes this fail until the README is updated."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```text\n1024 x a100-80gb", 1)[1].split("```", 1)[0]
    shown = ("1024 x a100-80gb" + block).strip().splitlines()
    out = subprocess.run([sys.executable, "-m", "cosearch", "estimate", str(ROOT / "examples" / "gpt3-175b.yaml")],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    printed = [ln.rstrip() for ln in out.stdout.splitlines()[:len(shown)]]
    assert printed == [ln.rstrip() for ln in shown]
