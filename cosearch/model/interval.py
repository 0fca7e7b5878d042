"""The 80 % prediction interval of a step-time estimate, as two multiplicative factors.

``data/prediction_interval.yaml`` (made by experiments/prediction_interval.py) holds the
split-conformal band ``[log_low, log_high]`` of leave-one-source-out residuals
log(measured / predicted) on the published training runs: a prediction ``t`` becomes the band
``[t * exp(log_low), t * exp(log_high)]``. Its ``moe`` section holds the band of the mixture-of-experts
runs, made the same way from their own residuals (wider: the MoE rows' errors are), which rows with
routed experts take. The file is read once, through :func:`cosearch.data.data_doc` (so ``COSEARCH_DATA_DIR``
may replace it, read with the user-file caps). Without the file, or with one that cannot be read, there is no
band: both factors are NaN (logged once), and every ``*_low``/``*_high`` metric is NaN.
"""
from __future__ import annotations

import logging
import math
from functools import lru_cache
from typing import Any

log = logging.getLogger(__name__)

INTERVAL_FILE = "prediction_interval.yaml"


@lru_cache(maxsize=1)
def interval_info() -> dict[str, Any]:
    """The band file's contents (``coverage``, ``log_low``, ``log_high``, ``rows``, ``method``, ...),
    or ``{}`` when it is missing or unreadable."""
    import yaml

    from ..data import data_doc
    from ..errors import CosearchError

    try:
        doc = data_doc(INTERVAL_FILE) or {}
    except FileNotFoundError:
        log.warning("no %s: estimates carry no prediction interval (run experiments/prediction_interval.py)", INTERVAL_FILE)
        return {}
    except (yaml.YAMLError, CosearchError) as err:  # CosearchError: a COSEARCH_DATA_DIR copy the safe reader refuses
        log.warning("%s is unreadable (%s): estimates carry no prediction interval", INTERVAL_FILE, err)
        return {}
    dense = _bounds(doc, "band", "estimates carry no prediction interval")
    if dense is None:
        return {}
    moe = doc.get("moe")
    moe = None if moe is None else _bounds(moe, "moe band", "MoE estimates take the dense band")
    return {**doc, "log_low": dense[0], "log_high": dense[1],
            "moe": None if moe is None else {**doc["moe"], "log_low": moe[0], "log_high": moe[1]}}


def _bounds(part: Any, what: str, otherwise: str) -> tuple[float, float] | None:
    """(log_low, log_high) of a band section of the file, or None, logged with ``otherwise`` (what happens
    then), when it is unreadable or does not contain the estimate (log 0)."""
    try:
        lo, hi = float(part["log_low"]), float(part["log_high"])
    except (KeyError, TypeError, ValueError) as err:
        log.warning("%s: %s unreadable (%s): %s", INTERVAL_FILE, what, err, otherwise)
        return None
    if not lo <= 0.0 <= hi:
        log.warning("%s: %s [%g, %g] does not contain the estimate: %s", INTERVAL_FILE, what, lo, hi, otherwise)
        return None
    return lo, hi


@lru_cache(maxsize=2)
def interval_factors(moe: bool = False) -> tuple[float, float]:
    """(low, high) factors on a step-time estimate for its prediction interval; (NaN, NaN) without a band.
    ``moe``: the band of models with routed experts (the dense one where the file has none)."""
    info = interval_info()
    if not info:
        return math.nan, math.nan
    band = (info.get("moe") if moe else None) or info
    return math.exp(band["log_low"]), math.exp(band["log_high"])


def interval_coverage() -> float:
    """Nominal coverage of the band (0.8), NaN without one."""
    return float(interval_info().get("coverage", math.nan))


def reload() -> None:
    """Forget the cached band (after replacing the file or ``COSEARCH_DATA_DIR``)."""
    interval_info.cache_clear()
    interval_factors.cache_clear()
