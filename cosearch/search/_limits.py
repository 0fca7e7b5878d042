"""Caps that keep a hostile space file from hanging or exhausting memory (issue 11).

* :data:`MAX_DIM_POINTS`: choices of one dimension, a list or a range with a step (``{min: 1.0,
  max: 1e12, step: 0.5}`` would be 2e12 floats, 14.6 TiB). A wider range takes a larger step, or
  float bounds without a step (a continuous range, no enumeration).
* :data:`MAX_TOTAL_CHOICES`: choices of all dimensions together (the lists the parsed space holds:
  about 100 MB of Python objects at the cap).
* :data:`MAX_ABS_VALUE`: every number in a choice list or a range bound is finite and at most this
  large in magnitude (``.inf``, ``.nan`` and 400-digit integers are refused; physical ranges per
  field are the scenario's business).
* :data:`ENUMERATE_LIMIT`: the largest space an exhaustive method enumerates (about 3 hours on one
  core at 1 M points/s; flat positions stay far inside int64). The size of any space is a product
  of the dimension sizes, computed at once whatever it is (1e20 points included); sampled methods
  never enumerate it.
* :data:`CHECK_ALL_CHOICES`: a numeric dimension with at most this many choices has each checked
  against the scenario schema; a larger one is checked at its smallest and largest value, its
  first non-integer value and :data:`CHECK_SPREAD` evenly spaced choices (the schema's numeric rules
  are types and intervals, so the extremes decide them). Word dimensions are checked choice by
  choice (an unknown word fails at once; the valid words are a short catalog).
"""
from __future__ import annotations

import math
from typing import Any

from ..errors import CosearchError

MAX_DIM_POINTS = 1_000_000
MAX_TOTAL_CHOICES = 4_000_000
MAX_ABS_VALUE = 1e18
ENUMERATE_LIMIT = 10_000_000_000
CHECK_ALL_CHOICES = 256
CHECK_SPREAD = 64


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_number(path: str, what: str, x: Any) -> None:
    """A one-line error unless ``x`` is a finite number of magnitude at most :data:`MAX_ABS_VALUE`."""
    if not is_number(x):
        raise CosearchError(path, f"{what} must be a number (got {_short(x)})")
    try:
        ok = math.isfinite(float(x)) and abs(x) <= MAX_ABS_VALUE
    except OverflowError:
        ok = False
    if not ok:
        raise CosearchError(path, f"{what} must be finite and at most {MAX_ABS_VALUE:.0e} in magnitude (got {_short(x)})")


def check_count(path: str, n: float, what: str = "range") -> None:
    if not n <= MAX_DIM_POINTS:  # also NaN
        raise CosearchError(path, f"{what} has {n:.3g} values, more than the limit of {MAX_DIM_POINTS:,} per dimension; "
                            "give a larger step (or float bounds without a step for a continuous range)")


def _short(x: Any) -> str:
    s = repr(x)
    return s if len(s) <= 40 else s[:20] + "..." + f" ({len(s)} characters)"
