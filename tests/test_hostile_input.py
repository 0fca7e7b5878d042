"""Hostile and bad input (issue 11): every case a one-line CosearchError / exit 2, within seconds.

Each test here failed before the fix: a traceback (UnicodeDecodeError, OverflowError,
RecursionError, PermissionError), a hang (alias bomb, /dev/zero) or a silently coerced value
(``tp: true`` as 1, ``.inf`` accepted).
"""
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from cosearch import CosearchError, estimate, load_scenario
from cosearch._files import CSV_MAX_BYTES, YAML_MAX_BYTES, YAML_MAX_DEPTH, parse_yaml, read_text
from cosearch.calibration import read_profile_file
from cosearch.measured import load_measured
from cosearch.scenario import parse_scenario
from cosearch.search.space import load_space
from cosearch.storages import resolve_storage

ROOT = Path(__file__).resolve().parents[1]
SPACE = ROOT / "searchspaces" / "gpt3-175b-parallelism.yaml"

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


def _cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "cosearch", *args], capture_output=True, text=True, timeout=timeout)


def _one_line_error(res, *words):
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    for w in words:
        assert w in lines[0], lines[0]


def _gpt3(**plan):
    return {"model": "gpt3-175b", "training": {"global_batch": 1536, "tokens": 3e11},
            "cluster": {"gpu": "a100-80gb", "gpus": 1024}, "plan": {"tp": 8, "pp": 16, **plan}}


# --- the file reader -------------------------------------------------------------------------------

def test_binary_and_non_utf8_files_are_refused(tmp_path):
    binary = tmp_path / "b.yaml"
    binary.write_bytes(bytes(range(256)))
    latin = tmp_path / "l.yaml"
    latin.write_bytes("model: gpt3-175b  # caf\xe9\n".encode("latin-1"))
    for path, word in ((binary, "binary"), (latin, "UTF-8")):
        _one_line_error(_cli("estimate", str(path)), str(path), word)
        _one_line_error(_cli("run", str(path), "--study", "s", "--storage", str(tmp_path / "j")), word)
        with pytest.raises(CosearchError, match=word):
            read_profile_file(path)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_dev_zero_and_fifo_refused_without_reading(tmp_path):
    t0 = time.monotonic()
    _one_line_error(_cli("estimate", "/dev/zero"), "not a regular file")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(CosearchError, match="not a regular file"):
        load_scenario(fifo)  # would block forever on open/read
    with pytest.raises(CosearchError, match="directory"):
        load_space(tmp_path)
    assert time.monotonic() - t0 < 30


def test_large_files_refused_at_once(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "w") as f:
        f.write("model: gpt3-175b\nnotes:\n")
        f.write("  - 0123456789012345678901234567890123456789\n" * (YAML_MAX_BYTES // 40 + 10))
    t0 = time.monotonic()
    with pytest.raises(CosearchError, match="too large"):
        load_scenario(big)
    with pytest.raises(CosearchError, match="too large"):
        load_space(big)
    assert time.monotonic() - t0 < 1
    csv = tmp_path / "big.csv"
    with open(csv, "wb") as f:
        f.truncate(CSV_MAX_BYTES + 1)  # sparse: no disk used
    with pytest.raises(CosearchError, match="too large"):
        load_measured(csv)


def test_yaml_alias_bomb_refused_at_once(tmp_path):
    for loader in (load_scenario, load_space, read_profile_file):
        p = tmp_path / "bomb.yaml"
        p.write_text(ALIAS_BOMB)
        t0 = time.monotonic()
        with pytest.raises(CosearchError, match="alias"):
            loader(p)
        assert time.monotonic() - t0 < 1


def test_deep_nesting_refused_without_recursion_error(tmp_path):
    for text in ("[" * 100_000, "{a: " * 100_000, "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)) + " " * 400 + "1",
                 "x: " + "- " * 5000 + "1"):
        t0 = time.monotonic()
        with pytest.raises(CosearchError, match="nested|malformed"):
            parse_yaml(text, "deep.yaml")
        assert time.monotonic() - t0 < 2
    assert parse_yaml("a: " + "[" * (YAML_MAX_DEPTH - 1) + "]" * (YAML_MAX_DEPTH - 1)) is not None  # + the top mapping
    quoted = "a: '" + "[" * 100 + "'  # " + "{" * 100
    assert parse_yaml(quoted) == {"a": "[" * 100}  # brackets in quotes and comments do not count


def test_huge_integer_refused(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(_gpt3()).replace("pp: 16", "pp: " + "9" * 400))
    _one_line_error(_cli("estimate", str(p)), "integer")
    # even where the reader does not see it (dicts from Python), the range names the field
    with pytest.raises(CosearchError, match=r"plan\.pp.*allowed"):
        parse_scenario(_gpt3(pp=10**400))
    with pytest.raises(CosearchError, match=r"training\.tokens"):
        parse_scenario({**_gpt3(), "training": {"global_batch": 8, "tokens": 10**400}})
    with pytest.raises(CosearchError, match=r"cloud\.instances"):
        parse_scenario({**_gpt3(), "cloud": {"instance": "p5.48xlarge", "instances": 10**400}})


def test_error_messages_stay_one_short_line():
    err = CosearchError("model", f"unknown preset {'9' * 5000!r}\nsecond line")
    assert "\n" not in str(err) and len(str(err)) < 300 and "5002 chars" in str(err)


def test_missing_file_and_unsafe_tags():
    with pytest.raises(CosearchError, match="cannot read"):
        read_text("/nonexistent/x.yaml", 100)
    with pytest.raises(CosearchError, match="constructor"):
        parse_yaml("a: !!python/object/apply:os.system [echo hi]")


# --- numbers ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("section,key,value,field", [
    ("plan", "tp", True, "plan.tp"), ("plan", "pp", "8", "plan.pp"), ("plan", "zero", True, "plan.zero"),
    ("plan", "microbatch", 1.0, "plan.microbatch"), ("plan", "sequence_parallel", 1, "plan.sequence_parallel"),
    ("plan", "overlap_grad_reduce", "yes", "plan.overlap_grad_reduce"), ("cluster", "gpus", 1024.5, "cluster.gpus"),
    ("training", "global_batch", False, "training.global_batch"),
])
def test_integers_are_integers_booleans_booleans(section, key, value, field):
    sc = _gpt3()
    sc[section] = {**sc[section], key: value}
    with pytest.raises(CosearchError, match=field.replace(".", r"\.")):
        parse_scenario(sc)


FLOAT_FIELDS = [("training", "tokens"), ("training", "target_tokens"), ("training", "critical_batch_tokens"),
                ("cluster", "hbm_gib"), ("cluster", "hbm_tbps"), ("cluster", "nvlink_gbps"), ("cluster", "network_gbps"),
                ("cluster", "power_w"), ("cluster", "price_usd_per_gpu_hour"), ("cluster", "expansion_gib"),
                ("cluster", "expansion_gbps"), ("cluster", "oversubscription")]


@pytest.mark.parametrize("section,key", FLOAT_FIELDS)
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 1e308, True, "fast"])
def test_every_float_field_is_finite_and_bounded(section, key, value):
    sc = _gpt3()
    sc[section] = {**sc[section], key: value}
    with pytest.raises(CosearchError, match=rf"{section}\.{key}") as err:
        parse_scenario(sc)
    if not isinstance(value, (bool, str)):
        assert "allowed" in str(err.value)


@pytest.mark.parametrize("key", ["checkpoint_interval_h", "revocation_per_hour", "failure_per_hour", "restart_s", "storage_gbps"])
def test_cloud_floats_finite(key):
    sc = {**_gpt3(), "cloud": {"instance": "p5.48xlarge", "instances": 4, key: math.inf}}
    sc["cluster"] = {}
    with pytest.raises(CosearchError, match=rf"cloud\.{key}"):
        parse_scenario(sc)


def test_inf_in_yaml_cli(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(_gpt3()) + "")
    text = p.read_text().replace("tokens: 300000000000.0", "tokens: .inf")
    p.write_text(text)
    _one_line_error(_cli("estimate", str(p)), "training.tokens", "finite")


def test_valid_values_still_accepted():
    sc = parse_scenario({**_gpt3(tp=np.int64(8), zero=1), "training": {"global_batch": 1536, "tokens": "3e11"}})
    assert sc.plan.tp == 8 and sc.training.tokens == 3e11 and sc.plan.zero == 1
    for path in (ROOT / "examples").glob("*.yaml"):
        assert estimate(load_scenario(path))["step_time_s"] > 0
    for path in (ROOT / "searchspaces").glob("*.yaml"):
        load_space(path)


def test_profile_numbers(tmp_path):
    cases = {"matmul_scale: .inf": "finite", "gemm_overhead_s: 1e308": "out of range", "hbm_efficiency: true": "boolean",
             "network_latency_s: .nan": "finite", "hbm_reserved_gib: 1.0e+9": "out of range",
             # a rate near zero made estimate print "inf" bands and costs, and explain fail on NaN bars
             "matmul_scale: 1.0e-300": "greater than or equal to 0.01", "hbm_efficiency: 1.0e-320": "0.01"}
    for line, word in cases.items():
        p = tmp_path / "p.yaml"
        p.write_text(f"profile:\n  {line}\n")
        with pytest.raises(CosearchError, match=word):
            read_profile_file(p)
    p.write_text("profile: {hbm_efficiency: 0.8}\ncalibrated_range: {rows: 3, gpu_types: [a100-80gb], params_b: [1, .nan], "
                 "gpus: [8, 64], seq_len: [2048, 2048]}\n")
    with pytest.raises(CosearchError, match="params_b"):
        read_profile_file(p)


def test_rates_at_their_floor_still_give_finite_answers():
    """Every rate fraction at :data:`RATE_FLOOR` at once: a slow GPU, but every number of the estimate finite."""
    from cosearch.model.profile import RATE_FLOOR, Profile

    rates = {k: RATE_FLOOR for k, f in Profile.model_fields.items()
             if any(getattr(m, "ge", None) == RATE_FLOOR for m in f.metadata)}
    assert {"matmul_scale", "hbm_efficiency", "network_efficiency"} <= set(rates)
    r = estimate(load_scenario(ROOT / "examples" / "gpt3-175b.yaml"), Profile(**rates))
    base = estimate(load_scenario(ROOT / "examples" / "gpt3-175b.yaml"))
    assert math.isfinite(r["step_time_s"]) and r["step_time_s"] > 10 * base["step_time_s"]
    assert all(math.isfinite(x) for x in r["step_time_interval_s"])


def test_measured_csv_numbers(tmp_path):
    head = "model,gpu,gpus,global_batch,tp,pp,measured_step_time_s\n"
    cases = {"gpt3-175b,a100-80gb,1024,1536,8,16,inf\n": "measured_step_time_s",
             "gpt3-175b,a100-80gb,1024,1536,true,16,20\n": "plan.tp",
             f"gpt3-175b,a100-80gb,1024,1536,8,{'9' * 400},20\n": "plan.pp"}
    for row, word in cases.items():
        p = tmp_path / "m.csv"
        p.write_text(head + row)
        with pytest.raises(CosearchError, match=word):
            load_measured(p)


def test_published_format_junk_cells(tmp_path):
    src = (ROOT / "experiments/data/validation/published_runs_public.csv").read_text().splitlines()
    head = src[0].split(",")
    for col, value, word in (("n_layers", "inf", "out of range"), ("tp", "abc", "must be a number"),
                             ("hidden_size", "9" * 400, "out of range"), ("n_heads", "24.5", "integer"),
                             ("n_layers", "0", "out of range")):
        j = head.index(col)
        import csv
        import io

        rows = list(csv.reader(src[:3]))
        rows[1][j] = value
        out = io.StringIO()
        csv.writer(out).writerows(rows)
        p = tmp_path / "pub.csv"
        p.write_text(out.getvalue())
        with pytest.raises(CosearchError, match=rf"row 1: {col}.*{word}"):
            load_measured(p)


# --- storage ---------------------------------------------------------------------------------------

def test_unwritable_journal_is_one_line(tmp_path):
    fifo = tmp_path / "journal.fifo"
    os.mkfifo(fifo)
    with pytest.raises(CosearchError, match="not a regular file"):
        resolve_storage(str(fifo))
    bad = Path("/sys/cosearch-test/j.journal")  # not writable even for root
    if os.path.isdir("/sys/kernel"):
        with pytest.raises(CosearchError, match="--storage.*not writable"):
            resolve_storage(str(bad))
        _one_line_error(_cli("run", str(SPACE), "--study", "s", "--storage", str(bad), "--sampler", "random",
                             "--trials", "2"), "--storage", "not writable")
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        try:
            with pytest.raises(CosearchError, match="not writable"):
                resolve_storage(str(ro / "j.journal"))
        finally:
            ro.chmod(0o755)


def test_a_key_given_twice_in_one_mapping_is_refused(tmp_path):
    """YAML keeps the last of repeated keys silently: `plan: {tp: 8, tp: 4}` ran tp 4. Refused, with where."""
    from cosearch._files import parse_yaml
    from cosearch.errors import CosearchError

    for text, line in (("plan: {tp: 8, tp: 4}", 1), ("model: gpt3-1.3b\nplan:\n  tp: 8\n  pp: 2\n  tp: 4\n", 5)):
        with pytest.raises(CosearchError) as err:
            parse_yaml(text, "s.yaml")
        assert "'tp' given twice" in str(err.value) and f"line {line}" in str(err.value)
    assert parse_yaml("a: [{x: 1}, {x: 2}]\nb: {x: {x: 1}}\nc: [1, 1]") == {"a": [{"x": 1}, {"x": 2}], "b": {"x": {"x": 1}}, "c": [1, 1]}


def test_data_dir_files_are_user_files(tmp_path):
    """COSEARCH_DATA_DIR's files replace the shipped catalog and presets: an alias bomb or a wrong shape gave a
    KeyError traceback; now one line naming the variable and the file."""
    import subprocess
    import sys

    for text, words in (("a: &a [1, 2]\nb: *a\n", "aliases"), ("gpus: 3\n", "'gpus' section")):
        (tmp_path / "gpus.yaml").write_text(text)
        res = subprocess.run([sys.executable, "-m", "cosearch", "estimate", str(ROOT / "examples" / "gpt3-175b.yaml")],
                             capture_output=True, text=True, timeout=60, env={**os.environ, "COSEARCH_DATA_DIR": str(tmp_path)})
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr[-2000:]
        assert "COSEARCH_DATA_DIR" in res.stderr and words in res.stderr, res.stderr
