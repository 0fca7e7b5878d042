"""The scalar path (one configuration on plain Python floats, cosearch.estimate) equals the vectorized path.

Both run the same model code (cosearch/model/_ops.py dispatches each operation); these tests hold
them to 1e-12 on several hundred random configurations that cover every knob, including rows that
break a rule (where Python floats divide by zero and the scalar path re-runs on 0-d arrays).
"""
import math

from pathlib import Path

import numpy as np
import pytest

from cosearch import estimate
from cosearch.errors import CosearchError
from cosearch.scenario import load_scenario, scenario_columns
from cosearch.model import BREAKDOWN_KEYS, RULES, broadcast_columns, check_scalar, evaluate, evaluate_scalar, scalar_columns
from cosearch.model.evaluate import _evaluate
from cosearch.model.expansion import OFFLOAD_CODES
from cosearch.model.profile import DEFAULT_PROFILE, KERNEL_PROFILE
from tests.test_codesign import _random_codesign
from tests.test_model_invariants import _random_plans

MODELS = [  # layers, hidden, heads, kv_heads, ffn, gated, vocab, seq, tied
    (96, 12288, 96, 96, 49152, 0, 51200, 2048, 1),      # GPT-3
    (80, 8192, 64, 8, 28672, 1, 128256, 8192, 0),       # Llama-3 70B (GQA, gated, untied)
    (126, 16384, 128, 8, 53248, 1, 128256, 8192, 0),    # Llama-3 405B (uneven pipeline splits)
    (32, 4096, 32, 8, 14336, 1, 128256, 8192, 0),
    (48, 7168, 64, 64, 28672, 0, 50432, 8192, 1),       # MPT-30B-like
    (30, 2048, 16, 4, 5632, 1, 32000, 4096, 0),         # 30 layers: odd splits over pp 4/8
]


def _random_everything(n, seed):
    """Every input column drawn at random; about a third of the rows then broken on purpose."""
    rng = np.random.default_rng(seed)
    arch = np.array(MODELS, dtype=float)[rng.integers(len(MODELS), size=n)]
    cols = {k: arch[:, i] for i, k in enumerate(
        ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "gated_mlp", "vocab", "seq_len", "tied_embeddings"))}
    pick = lambda *vals: rng.choice(vals, n).astype(float)  # noqa: E731
    cols.update(
        peak_tflops=pick(312.0, 989.0, 1979.0), matmul_efficiency=pick(0.7, 0.8),
        matmul_efficiency_fp8=pick(np.nan, 0.6), hbm_gib=pick(40.0, 80.0, 141.0), hbm_tbps=pick(2.0, 3.35, 4.8),
        nvlink_gbps=pick(300.0, 450.0, 900.0), nvlink_domain=pick(8.0, 72.0), gpus_per_node=pick(4.0, 8.0),
        network_gbps=pick(100.0, 200.0, 400.0), power_w=pick(400.0, 700.0), price_usd_per_gpu_hour=pick(0.0, 2.0, 4.5),
        precision=pick(0.0, 1.0), attention=pick(0.0, 0.0, 0.0, 1.0, 2.0), dropout=pick(0.0, 1.0),
        tokens=pick(np.nan, 3e11, 1.5e13), target_tokens=pick(np.nan, 1e11),
        critical_batch_tokens=pick(np.nan, 4e6, 6e7), global_batch=pick(512.0, 1024.0, 2048.0),
        expansion_gib=pick(64.0, 256.0, 2048.0), expansion_gbps=pick(16.0, 64.0, 200.0),
        expansion_pooled=pick(0.0, 1.0), oversubscription=pick(1.0, 1.0, 2.0, 4.0),
        leaf_gpus=pick(np.nan, np.nan, 16.0, 64.0),
        tp=pick(1.0, 2.0, 4.0, 8.0), pp=pick(1.0, 2.0, 4.0, 8.0, 16.0), cp=pick(1.0, 1.0, 2.0),
        microbatch=pick(1.0, 2.0, 4.0), interleave=pick(1.0, 1.0, 2.0), recompute=pick(0.0, 1.0, 2.0),
        sequence_parallel=pick(0.0, 1.0), zero=pick(0.0, 1.0, 2.0, 3.0),
        zero_group=pick(np.nan, np.nan, 1.0, 2.0), overlap_grad_reduce=pick(0.0, 1.0),
        tp_comm_overlap=pick(0.0, 1.0), offload=rng.choice(sorted(OFFLOAD_CODES.values()), n).astype(float),
        tp_collective=pick(0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0), dp_collective=pick(0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0),
        sliding_window=pick(0.0, 0.0, 128.0, 4096.0), global_attention_every=pick(0.0, 2.0, 6.0),
        mtp_layers=pick(0.0, 0.0, 1.0),
    )
    cols["attention"][cols["cp"] > 1] = 0.0                # context parallelism needs flash attention
    cols["interleave"][cols["pp"] == 1] = 1.0
    cols["gpus"] = cols["tp"] * cols["pp"] * cols["cp"] * pick(1.0, 2.0, 4.0, 8.0, 16.0)
    # break a third of the rows, one rule each; zero divisors make Python floats raise (numpy: inf/NaN)
    broken = {"tp": 3.0, "zero": 5.0, "offload": 2.0, "oversubscription": 0.5, "tp_collective": 9.0,
              "zero_group": 3.0, "interleave": 3.0, "peak_tflops": np.nan, "expansion_gbps": 0.0,
              "global_batch": 1000.0, "gpus": 7.0, "heads": 0.0, "nvlink_gbps": 0.0, "hbm_tbps": 0.0}
    which = rng.integers(-2 * len(broken), len(broken), n)
    for j, (key, value) in enumerate(broken.items()):
        cols[key][which == j] = value
    return cols


def _rows(cols, n):
    for i in range(n):
        yield i, {k: (float(v[i]) if np.ndim(v) else float(v)) for k, v in cols.items()}


def _same(scalar, vector) -> bool:
    if isinstance(vector, (bool, np.bool_)):
        return type(scalar) is bool and scalar == bool(vector)
    v = float(vector)
    if type(scalar) is not float:
        return False
    if math.isnan(v) or math.isnan(scalar):
        return math.isnan(v) and math.isnan(scalar)
    if math.isinf(v) or math.isinf(scalar):
        return v == scalar
    return abs(scalar - v) <= 1e-12 * max(abs(scalar), abs(v))


def _spaces(gpt3_columns):
    yield "everything", _random_everything(400, 1), 400, DEFAULT_PROFILE
    yield "codesign", _random_codesign(gpt3_columns, 200, 2), 200, DEFAULT_PROFILE
    yield "plans", _random_plans(gpt3_columns, 200, 3), 200, KERNEL_PROFILE


def _split_by_offload(cols, n, profile):
    """The batch evaluated as two batches, rows that offload and rows that do not. The vectorized model
    computes tier transfers only when some row of the batch offloads; a row that does not then gets
    max(0 - window, 0), which is NaN instead of 0 where its window is NaN (rows that break a rule or
    have a zero rate, whose step time is not finite)."""
    off = np.broadcast_to(cols.get("offload", 0.0), (n,)) > 0
    out = {}
    for part in (off, ~off):
        if part.any():
            sub = evaluate({k: (v[part] if np.ndim(v) else v) for k, v in cols.items()}, profile)
            for k, v in sub.items():
                out.setdefault(k, np.empty(n, dtype=v.dtype))[part] = v
    return out


def test_scalar_path_equals_vectorized_on_random_configurations(gpt3_columns):
    for name, cols, n, profile in _spaces(gpt3_columns):
        batch = evaluate(cols, profile)
        split = _split_by_offload(cols, n, profile)
        fast_rows = valid_rows = 0
        for i, row in _rows(cols, n):
            one = evaluate_scalar(row, profile)
            assert one.keys() == batch.keys()
            bad = [k for k in batch if not _same(one[k], split[k][i])]
            assert not bad, (name, i, {k: (one[k], split[k][i]) for k in bad})
            # against the whole batch: the same, but for the batch-dependent NaN above
            bad = [k for k in batch if not _same(one[k], batch[k][i])
                   and not (k == "time_offload_s" and not row.get("offload", 0.0) and math.isnan(batch[k][i])
                            and not (batch["valid"][i] and math.isfinite(one["step_time_s"])))]
            assert not bad, (name, i, {k: (one[k], batch[k][i]) for k in bad})
            valid_rows += bool(batch["valid"][i])
            try:  # the pure-float path, without the 0-d array fallback
                _evaluate(scalar_columns(row), profile)
                fast_rows += 1
            except (ArithmeticError, ValueError):  # only rows that break a rule or have a zero rate
                positive_rates = row["nvlink_gbps"] > 0 and row["hbm_tbps"] > 0
                assert not (batch["valid"][i] and positive_rates), (name, i, "a valid row must run on plain floats")
        assert valid_rows >= n // 4, name
        assert fast_rows >= 0.9 * valid_rows, name
        if name == "everything":
            assert fast_rows < n  # the 0-d array fallback ran too


def test_scalar_path_covers_the_knobs():
    cols = _random_everything(400, 1)
    out = evaluate(cols)
    ok = out["valid"]
    assert ok.sum() > 100 and (~ok).sum() > 50
    for key, values in [("offload", (1.0, 3.0, 4.0, 5.0, 7.0)), ("zero", (3.0,)), ("cp", (2.0,)), ("precision", (1.0,)),
                        ("interleave", (2.0,)), ("tp_collective", (1.0, 2.0, 3.0, 4.0, 5.0)), ("attention", (1.0, 2.0))]:
        for v in values:
            assert np.any(ok & (cols[key] == v)), (key, v)
    uneven = np.ceil(cols["layers"] / (cols["pp"] * cols["interleave"])) * cols["pp"] * cols["interleave"] != cols["layers"]
    assert np.any(ok & uneven)


def _first_error(cols):
    try:
        check_scalar(cols)
    except CosearchError as err:
        return str(err)
    return None


def test_check_scalar_first_violated_rule_is_the_same_on_floats_and_arrays(gpt3_columns):
    cols = _random_everything(400, 4)
    seen = set()
    for _, row in _rows(cols, 400):
        on_floats = _first_error(scalar_columns(row))
        assert on_floats == _first_error(broadcast_columns(row))
        seen.add(on_floats)
    assert len(seen) >= 6  # several different rules fire (and valid rows pass)
    assert None in seen
    assert len(RULES) > 10


_EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "gpt3-175b.yaml")
_SCENARIOS = [
    _EXAMPLE,
    {"model": "llama3-70b", "training": {"global_batch": 512, "precision": "fp8", "tokens": 1.5e13},
     "cluster": {"gpu": "h100-sxm", "gpus": 512},
     "plan": {"tp": 4, "pp": 4, "cp": 2, "zero": 3, "zero_group": 8, "tp_comm_overlap": True, "dp_collective": "auto"}},
    {"model": "llama3-405b", "training": {"global_batch": 1024, "tokens": 1e12, "critical_batch_tokens": 2e7,
                                          "target_tokens": 1e11},
     "cluster": {"gpu": "h100-sxm", "gpus": 2048, "expansion_gib": 1024, "expansion_gbps": 64, "oversubscription": 2},
     "plan": {"tp": 8, "pp": 16, "interleave": 2, "recompute": "full", "sequence_parallel": True, "zero": 1,
              "offload": "optimizer", "tp_collective": "tree"}},
]


@pytest.mark.parametrize("scenario", _SCENARIOS, ids=["example", "fp8-fsdp-cp", "offload-uneven"])
def test_estimate_equals_the_vectorized_model(scenario):
    sc = load_scenario(scenario)
    result = estimate(scenario)
    out = evaluate(scenario_columns(sc))
    for key in ("step_time_s", "tokens_per_s", "mfu", "memory_gib", "fits", "params", "idle_share", "num_microbatches",
                "time_to_accuracy_days", "expansion_used_gib"):
        want = out[key].reshape(-1)[0].item()
        assert _same(result[key], want) or (result[key] is None and math.isnan(want)), key
    for k in BREAKDOWN_KEYS:
        assert _same(result["breakdown_s"][k], out[f"time_{k}_s"].reshape(-1)[0].item()), k
    assert estimate(sc) == result


@pytest.mark.parametrize("plan", [{"tp": 5}, {"zero": 3, "zero_group": 5}, {"pp": 64, "interleave": 2}, {"cp": 2}])
def test_estimate_error_is_the_first_violated_rule(plan):
    scenario = {"model": "gpt3-175b", "training": {"global_batch": 1536, "attention": "standard"},
                "cluster": {"gpu": "a100-80gb", "gpus": 1920}, "plan": {"tp": 8, "pp": 8, **plan}}
    with pytest.raises(CosearchError) as err:
        estimate(scenario)
    with pytest.raises(CosearchError) as want:
        check_scalar(broadcast_columns(scenario_columns(load_scenario(scenario))))
    assert str(err.value) == str(want.value)


def test_ops_on_floats_follow_numpy_semantics():
    from cosearch.model import _ops as ops

    vals = [math.nan, 0.0, -0.0, 1.0, 2.5, -1.0, 5.0, math.inf, -math.inf]
    same = lambda a, b: type(a) is type(b) and (a == b or (a != a and b != b))  # noqa: E731
    with np.errstate(all="ignore"):
        for x in vals:
            for f, g in ((ops.floor, np.floor), (ops.ceil, np.ceil), (ops.log2, np.log2), (ops.isnan, np.isnan),
                         (ops.isfinite, np.isfinite)):
                assert same(f(x), g(x).item()), (f.__name__, x)
            assert ops.isin(x, (0.0, 1.0, 5.0)) == bool(np.isin(x, (0.0, 1.0, 5.0)))
            for y in vals:
                for f, g in ((ops.maximum, np.maximum), (ops.minimum, np.minimum)):
                    assert same(f(x, y), g(x, y).item()), (f.__name__, x, y)
                for z in vals:
                    assert same(ops.clip(x, y, z), np.clip(x, y, z).item()), (x, y, z)
    assert ops.logical_not(True) is False and ops.where(False, 1.0, 2.0) == 2.0
    assert ops.select([False, True], [1.0, 2.0], default=3.0) == 2.0 and ops.select([False], [1.0], default=3.0) == 3.0
    assert isinstance(ops.where(np.array([True, False]), 1.0, 2.0), np.ndarray)  # arrays still go to numpy
