"""cosearch.evaluate on raw columns: wrong columns are one-line errors, unphysical rows are never feasible."""
import numpy as np
import pytest

import cosearch
from cosearch.errors import CosearchError
from cosearch.model import evaluate_scalar
from cosearch.scenario import load_scenario, scenario_columns

GPT3 = "examples/gpt3-175b.yaml"


@pytest.fixture(scope="module")
def cols():
    return scenario_columns(load_scenario(GPT3))


@pytest.mark.parametrize("column,value", [("hbm_tbps", -1.0), ("hbm_tbps", np.nan), ("peak_tflops", 0.0),
                                          ("network_gbps", 0.0), ("price_usd_per_gpu_hour", -3.0),
                                          ("tokens", -1e10), ("matmul_efficiency", np.inf)])
def test_unphysical_rows_are_not_feasible(cols, column, value):
    """A negative bandwidth made the step faster and a negative price the cost negative, both 'feasible';
    a network of 0 Gb/s (the plan crosses nodes) made the step infinite, also 'feasible'. In a batch, only
    the bad row is refused."""
    assert cosearch.evaluate(cols)["feasible"].all()
    batch = {**cols, column: np.array([cols[column], value])}
    out = cosearch.evaluate(batch)
    assert out["valid"].tolist() == [True, False] and out["feasible"].tolist() == [True, False]
    # the scalar path gives the vectorized path's answer (it priced such a row as valid)
    one = evaluate_scalar({**cols, column: value})
    assert one["valid"] is False and one["feasible"] is False
    assert evaluate_scalar(cols)["valid"] is True


@pytest.mark.parametrize("missing", [np.nan, None])
def test_not_given_price_and_tokens_stay_valid(cols, missing):
    """NaN or None: not given (None raised AttributeError in the array path, while the scalar path read NaN)."""
    out = cosearch.evaluate({**cols, "price_usd_per_gpu_hour": missing, "tokens": missing})
    assert out["feasible"].all() and np.isnan(out["cost_usd_per_step"]).all()


@pytest.mark.parametrize("change,field,word", [
    (lambda c: {**c, "recompute": "full"}, "columns.recompute", "full=2"),
    (lambda c: {k: v for k, v in c.items() if k != "hidden"}, "columns", "missing model input columns: hidden"),
    (lambda c: {**c, "hiddn": 1.0}, "columns", "unknown model input columns: hiddn"),
    (lambda c: {**c, "tp": np.ones(3), "pp": np.ones(4)}, "columns", "do not broadcast"),
    (lambda c: list(c), "columns", "mapping"),
])
def test_bad_columns_are_one_line_errors(cols, change, field, word):
    with pytest.raises(CosearchError) as err:
        cosearch.evaluate(change(cols))
    assert err.value.field == field and word in str(err.value) and "\n" not in str(err.value)


def test_output_shape_follows_numpy_broadcasting(cols):
    """All-scalar columns give 0-d outputs (it was shape (1,): np.ascontiguousarray promotes 0-d), a length-n
    column gives length-n outputs, and the 0-d values equal the scalar path's."""
    one = cosearch.evaluate(cols)
    assert {np.shape(v) for v in one.values()} == {()}
    assert all(isinstance(v, np.ndarray) for v in one.values())
    assert float(one["step_time_s"]) == evaluate_scalar(cols)["step_time_s"]
    bad = cosearch.evaluate({**cols, "peak_tflops": 0.0})  # the unphysical-row flags keep the 0-d shape too
    assert all(isinstance(bad[k], np.ndarray) and bad[k].shape == () for k in ("valid", "feasible"))
    assert not bad["valid"] and not bad["feasible"]
    two = cosearch.evaluate({**cols, "tp": np.array([cols["tp"], cols["tp"]])})
    assert {np.shape(v) for v in two.values()} == {(2,)}
    assert two["step_time_s"][1] == one["step_time_s"]
