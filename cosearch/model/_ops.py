"""Array-namespace-agnostic elementwise operations for the model functions.

Every model function is written once. Called with numpy arrays it evaluates whole columns of
configurations; called with plain Python numbers (one configuration, :func:`cosearch.model.evaluate_scalar`)
the same expressions run on floats, about 20x faster than numpy on 0-d arrays. Each operation here
dispatches on the types of its arguments: all plain Python scalars (float, int, bool) -> a ``math``
implementation with numpy's semantics (NaN propagates through maximum/minimum/clip, floor/ceil return
floats and pass NaN/inf through, log2(0) = -inf); anything else -> the numpy function.

Python floats differ from numpy in one way that matters: dividing by zero raises instead of returning
inf/NaN. The scalar entry point catches that and re-runs the configuration on 0-d numpy arrays, so
results are identical either way. Use :func:`logical_not` (never ``~``, which is -2 for ``True``).
(``_S`` and ``type`` are bound as keyword defaults only to make them local lookups: this runs a few
hundred times per scalar evaluation.)
"""
from __future__ import annotations

import builtins
import math
import struct

import numpy as np

_SCALARS = (float, int, bool)
_INF = math.inf
_BOOL, _F64 = np.dtype(bool), np.dtype(np.float64)
#: Rows from which :func:`where` selects float64 bits with masks instead of calling np.where.
_MASK_MIN_ROWS = 1024


def where(cond, a, b, *, _S=_SCALARS, type=type, _A=np.ndarray):
    if type(cond) is bool and type(a) in _S and type(b) in _S:
        return a if cond else b
    if type(cond) is _A and cond.dtype == _BOOL and cond.size >= _MASK_MIN_ROWS:
        a_bits, b_bits = _bits(a, cond.shape), _bits(b, cond.shape)
        if a_bits is not None and b_bits is not None:
            return _select_bits(cond, a_bits, b_bits)
    return np.where(cond, a, b)


def _bits(x, shape, *, type=type, _A=np.ndarray, _pack=struct.Struct("<d").pack, _unpack=struct.Struct("<q").unpack):
    """The bits of a float64 branch as int64: a view of an array of ``shape``, a Python int for a
    float constant; None for anything else (np.where handles it)."""
    if type(x) is float or type(x) is np.float64:
        return _unpack(_pack(x))[0]
    if type(x) is _A and x.dtype == _F64 and x.shape == shape:
        return x.view(np.int64)
    return None


def _select_bits(cond, a, b):
    """np.where(cond, a, b) on int64 bits (``a``, ``b`` arrays or Python ints), bit for bit, as float64.
    np.where's element loop branches on every row: about 4.7 ns a row on random masks, this 1.8
    (65,536 rows, 2-core EPYC VM); a +0.0 branch (bits 0) takes one bit operation fewer."""
    c8, mask = cond.view(np.int8), np.empty(cond.shape, np.int64)  # one pass from the bools (not astype + negate)
    if type(a) is int and a == 0:
        np.subtract(c8, 1, out=mask, casting="unsafe")  # False -> all ones
        return np.bitwise_and(mask, b, out=mask).view(_F64)
    np.negative(c8, out=mask, casting="unsafe")  # True -> all ones
    if type(b) is int and b == 0:
        return np.bitwise_and(mask, a, out=mask).view(_F64)
    np.bitwise_and(mask, np.bitwise_xor(a, b), out=mask)
    return np.bitwise_xor(mask, b, out=mask).view(_F64)


def maximum(a, b, *, _S=_SCALARS, type=type):
    if type(a) in _S and type(b) in _S:
        return a if (a >= b or a != a) else b  # numpy: NaN in either argument wins
    return np.maximum(a, b)


def minimum(a, b, *, _S=_SCALARS, type=type):
    if type(a) in _S and type(b) in _S:
        return a if (a <= b or a != a) else b
    return np.minimum(a, b)


def clip(x, lo, hi, *, _S=_SCALARS, type=type):
    if type(x) in _S and type(lo) in _S and type(hi) in _S:
        # numpy's clip: minimum(maximum(x, lo), hi), NaN propagating (maximum and minimum inlined)
        x = x if (x >= lo or x != x) else lo
        return x if (x <= hi or x != x) else hi
    if type(lo) is float and lo != 0.0 and lo == lo:
        # np.clip's own loop is scalar: minimum(maximum()) gives the same bits in about 60 % of its time
        # (NaN, infinities and lo > hi included; tests/test_model_speed_paths.py). Not for a zero lower
        # bound: np.maximum(-0.0, 0.0) may return either zero, np.clip keeps x.
        return np.minimum(np.maximum(x, lo), hi)
    return np.clip(x, lo, hi)


def floor(x, *, _S=_SCALARS, type=type):
    if type(x) in _S:
        return float(math.floor(x)) if -_INF < x < _INF else float(x)
    return np.floor(x)


def ceil(x, *, _S=_SCALARS, type=type):
    if type(x) in _S:
        return float(math.ceil(x)) if -_INF < x < _INF else float(x)
    return np.ceil(x)


def log2(x, *, _S=_SCALARS, type=type):
    if type(x) in _S:
        if x > 0:
            return math.log2(x)
        return -_INF if x == 0 else math.nan
    return np.log2(x)


def isnan(x, *, _S=_SCALARS, type=type):
    if type(x) in _S:
        return x != x
    return np.isnan(x)


def isfinite(x, *, _S=_SCALARS, type=type):
    if type(x) in _S:
        return -_INF < x < _INF
    return np.isfinite(x)


def isin(x, values, *, _S=_SCALARS, type=type):
    if type(values) is not tuple:
        return np.isin(x, values)
    if type(x) in _S:
        return x == x and x in values  # ``in`` matches by identity first: keep NaN out
    # a few codes: one comparison each (np.isin's set machinery costs ~25 us a call, even on 0-d)
    out = np.equal(x, values[0])
    for v in values[1:]:
        out = out | np.equal(x, v)
    return out


def logical_not(x, *, _S=_SCALARS, type=type):
    if type(x) is bool:
        return not x
    return np.logical_not(x)


def select(condlist, choicelist, default=0, *, _S=_SCALARS, type=type):
    if builtins.all(type(c) is bool for c in condlist) and builtins.all(type(v) in _S for v in (*choicelist, default)):
        for cond, choice in zip(condlist, choicelist):
            if cond:
                return choice
        return default
    return np.select(condlist, choicelist, default=default)


def any(x, *, _S=_SCALARS, type=type, _A=np.ndarray) -> bool:  # noqa: A001 - numpy's name
    if type(x) in _S:
        return bool(x)
    return bool(x.any() if type(x) is _A else np.any(x))


def all(x, *, _S=_SCALARS, type=type, _A=np.ndarray) -> bool:  # noqa: A001 - numpy's name
    if type(x) in _S:
        return bool(x)
    return bool(x.all() if type(x) is _A else np.all(x))


def asarray(x, *, _S=_SCALARS, type=type):
    """``x`` itself for a plain Python scalar, else ``np.asarray(x)``."""
    if type(x) in _S:
        return x
    return np.asarray(x)


def zeros_like(x, *, _S=_SCALARS, type=type):
    if type(x) in _S:
        return 0.0
    return np.zeros_like(x)


def is_scalar(x) -> bool:
    """True for a plain Python float, int or bool (the scalar path)."""
    return type(x) in _SCALARS
