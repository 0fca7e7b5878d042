"""Values of a search space: dimensions, word columns as codes, path helpers, the base/assignment resolver."""
from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..errors import CosearchError
from ..model.columns import CATEGORICAL_CODES


@dataclass
class Dimension:
    """One free knob. ``choices`` is the finite list of values (None for a continuous range)."""

    path: str
    kind: str  # "categorical" | "int" | "float"
    choices: list[Any] | None = None
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False

    @property
    def size(self) -> float:
        return float(len(self.choices)) if self.choices is not None else math.inf

    @property
    def finite(self) -> bool:
        return self.choices is not None

    def values(self, index: np.ndarray) -> list[Any] | np.ndarray:
        """Choice values at integer indices."""
        return np.asarray(self.choices, dtype=object)[index]

    def table(self) -> np.ndarray:
        """Choices as floats (``None`` -> NaN, booleans -> 0/1); numeric or boolean dims only."""
        return np.array([np.nan if c is None else float(c) for c in self.choices], dtype=float)

    @property
    def is_words(self) -> bool:
        """Categorical with non-boolean values (preset names, GPU ids, recompute modes)."""
        return self.kind == "categorical" and not all(isinstance(c, bool) for c in self.choices)

    def value(self, x: float) -> Any:
        """The scenario value of one row entry (index for finite dims, value for ranges)."""
        if self.choices is not None:
            return self.choices[int(x)]
        if self.kind == "int":
            return int(round(x))
        return float(x)


class _Cat:
    """A column of words as integer codes into ``names`` (no object array per configuration)."""

    __slots__ = ("codes", "names")

    def __init__(self, codes: np.ndarray, names: Sequence[Any]) -> None:
        self.codes = np.asarray(codes, dtype=np.intp)
        self.names = list(names)

    def __len__(self) -> int:
        return len(self.codes)

    def lookup(self, fn) -> np.ndarray:
        table = np.array([fn(x) for x in self.names], dtype=float)
        return table[self.codes]

    @classmethod
    def of(cls, values: Any) -> "_Cat":
        codes, uniques = pd.factorize(np.asarray(values, dtype=object), sort=False)
        return cls(codes, list(uniques))


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _all_numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in values) or all(
        isinstance(v, bool) for v in values
    )


def _copy_tree(d: Any) -> Any:
    """Copy of nested dicts and lists (the base scenario holds nothing else)."""
    if isinstance(d, dict):
        return {k: _copy_tree(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_copy_tree(v) for v in d]
    return d


def _set_path(d: dict, path: str, value: Any) -> None:
    parts = path.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = value


def _del_path(d: dict, path: str) -> None:
    parts = path.split(".")
    for p in parts[:-1]:
        d = d.get(p, {})
    d.pop(parts[-1], None)


class _Resolver:
    """Looks a path up in the assignment first, then in the base scenario."""

    def __init__(self, base: Mapping[str, Any], assign: Mapping[str, Any], n: int) -> None:
        self.base, self.assign, self.n = base, assign, n

    def has(self, path: str) -> bool:
        return path in self.assign or self._base(path) is not None

    def _base(self, path: str) -> Any:
        d: Any = self.base
        for part in path.split("."):
            if not isinstance(d, Mapping) or part not in d:
                return None
            d = d[part]
        return d

    def raw(self, path: str, default: Any = None) -> Any:
        """Assigned column (numbers as a float array, words as :class:`_Cat`) or the base value."""
        if path in self.assign:
            v = self.assign[path]
            if isinstance(v, _Cat):
                return v
            arr = np.asarray(v)
            if arr.dtype == object or arr.dtype.kind in "USb":
                if arr.dtype.kind != "b" and all(isinstance(x, (int, float)) and not isinstance(x, bool) or x is None
                                                for x in pd.unique(arr.ravel())):
                    return np.array([np.nan if x is None else float(x) for x in arr.tolist()])
                return _Cat.of(arr)
            return arr
        v = self._base(path)
        return default if v is None else v

    def number(self, path: str, default: Any = None) -> np.ndarray | float:
        v = self.raw(path, default)
        if v is None:
            raise CosearchError(path, "required field is missing")
        try:
            if isinstance(v, _Cat):
                return v.lookup(lambda x: np.nan if x is None else float(x))
            return np.asarray(v, dtype=float)
        except (TypeError, ValueError, OverflowError):
            raise CosearchError(path, f"expected a number or a list/range of numbers (got {_short(v)})") from None

    def coded(self, path: str, default: str | None) -> np.ndarray | float:
        v = self.raw(path, default)
        codes = CATEGORICAL_CODES[path.rsplit(".", 1)[-1]]
        try:
            if isinstance(v, _Cat):
                return v.lookup(lambda x: float(codes[x]))
            return float(codes[v])
        except (KeyError, TypeError):
            raise CosearchError(path, f"expected one of {', '.join(codes)} (got {_short(v)})") from None


def _short(v: Any) -> str:
    text = repr(v.names if isinstance(v, _Cat) else v)
    return text if len(text) <= 60 else text[:57] + "..."


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


def _first_value(d: Dimension) -> Any:
    return d.choices[0] if d.choices is not None else (d.low if d.kind == "float" else int(d.low))

