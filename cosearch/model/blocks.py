"""A large batch evaluated in blocks of rows, each written straight into whole-length outputs.

The model is elementwise, so a block's values do not depend on the other rows: blocks of a few
thousand rows keep every temporary in the core's cache (:data:`.evaluate.CHUNK_ROWS`). A batch that
holds dense and MoE/MLA rows (``split``: the row indices of each kind) is evaluated in blocks of one
kind, gathered with ``np.take`` and scattered back. A gathered block takes each column on first
use (:class:`BlockColumns`): a dense block never reads most of the MoE columns (12 of the 50 of
experiments/bench_model.py's MoE mix), and a gather costs about 1 ns a row per column.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .._malloc import keep_heap


class BlockColumns(dict):
    """The columns of one block of rows (``rows``: sorted row indices of ``full``), each gathered when
    first read; 0-d (single-valued) columns are shared. ``values``/``items`` gather them all."""

    __slots__ = ("_full", "_rows")

    def __init__(self, full: dict[str, np.ndarray], rows: np.ndarray):
        super().__init__((k, v) for k, v in full.items() if not v.ndim)
        self._full, self._rows = full, rows

    def __missing__(self, key):
        # mode="clip": no bounds check (the rows are valid indices), 25 % faster than the default
        value = self[key] = self._full[key].take(self._rows, mode="clip")
        return value

    def __contains__(self, key) -> bool:
        return key in self._full

    def __len__(self) -> int:
        return len(self._full)

    def __iter__(self):
        return iter(self._full)

    def keys(self):
        return self._full.keys()

    def values(self):
        return [self[k] for k in self._full]

    def items(self):
        return [(k, self[k]) for k in self._full]

    def get(self, key, default=None):
        return self[key] if key in self._full else default


class _Deferred(dict):
    """Every key None: the outputs a block leaves to be computed after the merge."""

    def __missing__(self, key):
        return None


#: Stands for outputs a block does not compute (their values None); ``finish`` fills them.
DEFERRED = _Deferred()


def rows_of(c: dict[str, np.ndarray], rows: slice) -> dict[str, np.ndarray]:
    """The columns of ``c`` on a slice of rows (views; 0-d columns as they are)."""
    return {k: v[rows] if v.ndim else v for k, v in c.items()}


def evaluate_blocks(c: dict[str, np.ndarray], n: int, chunk_rows: int, split, evaluate_block: Callable[[dict], dict],
                    lazy: bool = True, finish: Callable[[dict], None] | None = None) -> dict[str, np.ndarray]:
    """``evaluate_block`` over blocks of at most ``chunk_rows`` of the ``n`` rows of ``c`` (slices, or with
    ``split`` row indices of one kind), its outputs written into whole-length arrays. ``lazy``: gather a
    split block's columns on first use (:class:`BlockColumns`), else all at once. Outputs a block gives
    as None stay None until ``finish(outputs)`` fills them in place (after every block, keys in order)."""
    keep_heap()  # chunk-sized temporaries: see cosearch/_malloc.py
    out: dict[str, np.ndarray] = {}
    if split is None:
        blocks = [slice(start, min(start + chunk_rows, n)) for start in range(0, n, chunk_rows)]
    else:
        blocks = [idx[start:start + chunk_rows] for idx in split for start in range(0, idx.size, chunk_rows)]
    for rows in blocks:
        if split is None:
            part = evaluate_block(rows_of(c, rows))
        elif lazy:
            part = evaluate_block(BlockColumns(c, rows))
        else:
            part = evaluate_block(dict(BlockColumns(c, rows).items()))
        if not out:
            out = {k: None if v is None else np.empty(n, dtype=np.asarray(v).dtype) for k, v in part.items()}
        for k, v in part.items():
            if v is None:
                continue
            arr = out[k]
            if type(v) is np.ndarray and v.dtype != arr.dtype and np.result_type(arr, v) != arr.dtype:
                arr = out[k] = arr.astype(np.result_type(arr, v))  # a block of a wider dtype
            arr[rows] = v
    if finish is not None:
        finish(out)
    return out
