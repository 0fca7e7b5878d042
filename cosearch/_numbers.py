"""Strict number types for the scenario models: integers are integers, floats are finite and bounded.

Pydantic's lax mode turns ``true`` into 1, ``"8"`` into 8 and accepts ``.inf``/NaN; these
annotated types refuse all of those with a one-line message. Use them with ``Field(gt=..., le=...)``
so every number has a physical range; :func:`allowed_range` words that range for error messages.
"""
from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import numpy as np
from annotated_types import Ge, Gt, Le, Lt
from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError


def kind_of(v: Any) -> str:
    """How an error message names the kind of ``v`` ("a boolean", "text", "an integer", "a list", ...)."""
    if isinstance(v, (bool, np.bool_)):
        return "a boolean"
    if isinstance(v, np.integer):
        return "an integer"
    if isinstance(v, np.floating):
        return "a float"
    kind = type(v).__name__
    named = {"str": "text", "float": "a float", "int": "an integer", "NoneType": "null"}.get(kind)
    return named or f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def _int(v: Any) -> int:
    if isinstance(v, np.integer):
        v = int(v)
    if type(v) is not int:  # bool is a subclass of int: refused here
        raise PydanticCustomError("int_strict", "must be an integer, not {kind}", {"kind": kind_of(v)})
    return v


def _float(v: Any) -> float:
    if isinstance(v, str):  # YAML 1.1 reads 3e11 (no dot) as text: accept numeric text, nothing else
        try:
            v = float(v.strip().replace("_", ""))
        except ValueError:
            raise PydanticCustomError("float_strict", "must be a number, not text") from None
    elif isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise PydanticCustomError("float_strict", "must be a number, not {kind}", {"kind": kind_of(v)})
    try:
        f = float(v)
    except OverflowError:
        raise PydanticCustomError("float_finite", "number too large") from None
    if not math.isfinite(f):
        raise PydanticCustomError("float_finite", "must be a finite number")
    return f


def _bool(v: Any) -> bool:
    if isinstance(v, np.bool_):
        v = bool(v)
    if type(v) is not bool:
        raise PydanticCustomError("bool_strict", "must be true or false, not {kind}", {"kind": kind_of(v)})
    return v


#: An integer (Python or numpy), never a bool, string or float.
Int = Annotated[int, BeforeValidator(_int)]
#: A finite float (int accepted; numeric text accepted because YAML 1.1 reads ``3e11`` as text).
Float = Annotated[float, BeforeValidator(_float)]
#: ``true`` or ``false``, never 0/1 or text.
Bool = Annotated[bool, BeforeValidator(_bool)]
#: ZeRO stage 0-3 as an integer (``zero: true`` is refused).
ZeroStage = Annotated[Literal[0, 1, 2, 3], BeforeValidator(_int)]


def _fmt(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else f"{x:,}".replace(",", "_") if isinstance(x, int) and abs(x) >= 10**5 else str(x)


def allowed_range(metadata: list[Any]) -> str:
    """``"0 < x <= 1e+05"``-style words for the Gt/Ge/Lt/Le constraints of a field ('' if none)."""
    lo = hi = ""
    for m in metadata:
        if isinstance(m, Gt):
            lo = f"{_fmt(m.gt)} < "
        elif isinstance(m, Ge):
            lo = f"{_fmt(m.ge)} <= "
        elif isinstance(m, Lt):
            hi = f" < {_fmt(m.lt)}"
        elif isinstance(m, Le):
            hi = f" <= {_fmt(m.le)}"
    return f"{lo}x{hi}" if lo or hi else ""
