"""Property-based test (hypothesis) of the input edge: scenarios, profiles, measured CSVs, raw files.

Whatever the input: no traceback (only :class:`CosearchError`, naming a field or the file), and an
accepted scenario gives results without NaN or infinity.
"""
import math
import string

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cosearch import CosearchError, estimate  # noqa: E402
from cosearch.calibration import read_profile_file  # noqa: E402
from cosearch.measured import USER_COLUMNS, load_measured  # noqa: E402
from cosearch.model.profile import Profile  # noqa: E402
from cosearch.scenario import ClusterSpec, PlanSpec, TrainingSpec, load_scenario, parse_scenario  # noqa: E402
from cosearch.search.space import load_space  # noqa: E402

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

BASE = {"model": "gpt3-6.7b", "training": {"global_batch": 512, "tokens": 3e11},
        "cluster": {"gpu": "a100-80gb", "gpus": 64}, "plan": {"tp": 4, "pp": 2}}
SECTIONS = {"training": TrainingSpec, "cluster": ClusterSpec, "plan": PlanSpec}
MODEL_KEYS = ["layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "gated_mlp", "tied_embeddings"]

junk = st.one_of(
    st.integers(-10, 10**5), st.integers(), st.integers(10**20, 10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, -1e308, 5e-324, 0.0, -0.0, 1.5, 0.5]),
    st.booleans(), st.none(), st.text(max_size=12), st.sampled_from(["8", "3e11", "inf", "nan", "bf16", "full", "flash"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def _finite(value, where="result"):
    """Every number in ``value`` (nested dicts/lists) is finite."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        assert math.isfinite(value), f"{where} = {value}"
    elif isinstance(value, dict):
        for k, v in value.items():
            _finite(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _finite(v, f"{where}[{i}]")


def _named(err: CosearchError) -> None:
    assert err.field, str(err)
    assert "\n" not in str(err) and len(str(err)) < 1000, str(err)
    assert max(map(len, str(err).split())) <= 200, str(err)


def _load_measured_finite(p):
    """A measured CSV either loads with finite input columns or fails with an error naming a field."""
    try:
        c, _ = load_measured(p)
    except CosearchError as err:
        _named(err)
        return
    for v in c.columns.values():
        assert not any(map(math.isinf, v.tolist())), "infinite input column accepted"


@st.composite
def scenarios(draw):
    sc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for _ in range(draw(st.integers(1, 4))):
        section = draw(st.sampled_from(["model", "training", "cluster", "plan", "top"]))
        if section == "top":
            sc[draw(st.sampled_from(["model", "training", "cluster", "plan", "cloud", "junk"]))] = draw(junk)
        elif section == "model":
            if not isinstance(sc.get("model"), dict):
                sc["model"] = {"layers": 32, "hidden": 4096, "heads": 32, "vocab": 50257, "seq_len": 2048}
            sc["model"][draw(st.sampled_from(MODEL_KEYS))] = draw(junk)
        else:
            if not isinstance(sc.get(section), dict):
                sc[section] = {}
            key = draw(st.sampled_from(list(SECTIONS[section].model_fields) + ["junk"]))
            sc[section][key] = draw(junk)
    return sc


@SETTINGS
@given(scenarios())
@example({**BASE, "training": {"global_batch": 512, "tokens": 3e11, "critical_batch_tokens": 5e-324}})
@example({**BASE, "cluster": {"gpu": "a100-80gb", "gpus": 64, "hbm_tbps": 1e-300}})
def test_scenarios_never_traceback_and_results_finite(sc):
    try:
        parsed = parse_scenario(sc)
        result = estimate(parsed)
    except CosearchError as err:
        _named(err)
        return
    result.pop("scenario", None)
    _finite(result)


@SETTINGS
@given(st.dictionaries(st.sampled_from(list(Profile.model_fields) + ["junk"]), junk, max_size=4),
       st.one_of(st.none(), st.fixed_dictionaries({"rows": junk, "gpu_types": st.just(["a100-80gb"]),
                                                   "params_b": st.lists(junk, max_size=3), "gpus": st.just([8, 64]),
                                                   "seq_len": st.just([2048, 2048])})))
@example({"gemm_overhead_s": math.inf}, None)
@example({"network_latency_s": 1e308}, None)
def test_profile_files(tmp_path, fields, rng):
    p = tmp_path / "profile.yaml"
    doc = {"profile": fields} if rng is None else {"profile": fields, "calibrated_range": rng}
    p.write_text(yaml.safe_dump(doc))
    try:
        prof, _ = read_profile_file(p)
    except CosearchError as err:
        _named(err)
        return
    _finite(prof.model_dump())


cell = st.one_of(junk.map(str), st.sampled_from(["", "inf", "-inf", "nan", "1e400", "9" * 400, "true", "\"a,b\""]))


@SETTINGS
@given(st.lists(st.sampled_from(["model", "gpu", "gpus", "global_batch", "tp", "pp", "zero", "sequence_parallel",
                                 "hbm_gib", "measured_step_time_s"]), min_size=1, max_size=6, unique=True),
       st.lists(st.lists(cell, min_size=6, max_size=6), min_size=1, max_size=3))
@example(["measured_step_time_s", "model"], [["9" * 400, "9" * 400, "", "", "", ""]])
def test_measured_csvs(tmp_path, columns, rows):
    base = {"model": "gpt3-6.7b", "gpu": "a100-80gb", "gpus": "64", "global_batch": "512", "tp": "4", "pp": "2",
            "measured_step_time_s": "10"}
    cols = list(dict.fromkeys([*base, *columns]))
    lines = [",".join(cols)]
    for r in rows:
        vals = dict(base)
        vals.update(dict(zip(columns, r)))
        lines.append(",".join(str(vals.get(c, "")).replace("\n", " ") for c in cols))
    p = tmp_path / "m.csv"
    p.write_text("\n".join(lines) + "\n")
    assert set(cols) <= set(USER_COLUMNS)
    _load_measured_finite(p)


raw_text = st.one_of(st.binary(max_size=300).map(lambda b: ("bytes", b)),
                     st.text(alphabet=string.printable + "[]{}&*!|>-:'\"#%@`", max_size=300).map(lambda t: ("text", t)))


@SETTINGS
@given(raw_text)
def test_raw_files_as_scenario_space_and_profile(tmp_path, raw):
    kind, data = raw
    p = tmp_path / "f.yaml"
    p.write_bytes(data if kind == "bytes" else data.encode("utf-8"))
    for reader in (load_scenario, load_space, read_profile_file):
        try:
            reader(p)
        except CosearchError as err:
            _named(err)


PUBLISHED = ROOT_CSV = __import__("pathlib").Path(__file__).resolve().parents[1] / "experiments/data/validation/published_runs_public.csv"


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 39),
                          st.sampled_from(["inf", "-inf", "nan", "1e400", "9" * 400, "true", "", "-1", "0", "abc",
                                           "1e308", "24.0", "0.5", "\u00e9"])), min_size=1, max_size=3))
def test_published_format_csvs(tmp_path, edits):
    import csv
    import io

    rows = list(csv.reader(PUBLISHED.read_text().splitlines()))
    head, body = rows[0], [list(r) for r in rows[1:3]]
    for i, j, v in edits:
        body[i][j % len(head)] = v
    out = io.StringIO()
    csv.writer(out).writerows([head, *body])
    p = tmp_path / "pub.csv"
    p.write_text(out.getvalue())
    _load_measured_finite(p)


SPACE = {"model": "gpt3-175b", "training": {"global_batch": 1536, "tokens": 3e11},
         "cluster": {"gpu": "a100-80gb", "gpus": 1024}, "plan": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8, 16]},
         "objectives": ["time_to_train_days"]}


@SETTINGS
@given(st.sampled_from(["training", "cluster", "plan"]),
       st.sampled_from(["tp", "pp", "zero", "gpus", "hbm_gib", "tokens", "global_batch", "microbatch", "sequence_parallel",
                        "network_gbps", "junk"]),
       st.one_of(junk, st.lists(junk, max_size=4)))
@example("cluster", "gpus", "")
def test_space_files(tmp_path, section, key, value):
    """A space file whose leaf is junk or a list of junk choices: a space or a one-line error."""
    space = {k: (dict(v) if isinstance(v, dict) else v) for k, v in SPACE.items()}
    space[section][key] = value
    p = tmp_path / "space.yaml"
    p.write_text(yaml.safe_dump(space))
    try:
        load_space(p)
    except CosearchError as err:
        _named(err)
