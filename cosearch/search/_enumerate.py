"""Rows, flat positions and enumeration of a finite space; pruning of never-valid choices."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import numpy as np

from ..errors import CosearchError
from ..model.columns import broadcast_columns
from ..model.feasibility import RULES, valid_mask
from ._build import columns
from ._limits import ENUMERATE_LIMIT
from ._names import PRUNE_LIMIT, STRUCTURAL
from ._values import _Cat

if TYPE_CHECKING:
    from .space import SearchSpace

logger = logging.getLogger("cosearch.search.space")


def assign_from_rows(space, rows: np.ndarray) -> dict[str, Any]:
    """Per-dimension value arrays (words as codes) of an ``(n, d)`` array of rows."""
    rows = np.asarray(rows, dtype=float).reshape(-1, len(space.dims))
    out: dict[str, Any] = {}
    for j, d in enumerate(space.dims):
        col = rows[:, j]
        if d.choices is None:
            out[d.path] = np.round(col) if d.kind == "int" else col
            continue
        idx = col.astype(np.intp)
        out[d.path] = _Cat(idx, d.choices) if d.is_words else d.table()[idx]
    return out


def rows_of_flat(space, flat: np.ndarray) -> np.ndarray:
    """Rows of flat (mixed-radix) positions in the Cartesian product of a finite space."""
    shape = tuple(int(d.size) for d in space.dims)
    if not shape:
        return np.zeros((len(flat), 0))
    idx = np.unravel_index(np.asarray(flat, dtype=np.int64), shape)
    return np.stack(idx, axis=1).astype(float)


def index_grid(space, flat: np.ndarray) -> dict[str, np.ndarray]:
    """Per-dimension choice indices of flat (mixed-radix) positions in the Cartesian product."""
    shape = tuple(int(d.size) for d in space.dims)
    idx = np.unravel_index(flat, shape) if shape else ()
    return {d.path: i for d, i in zip(space.dims, idx)}


def assign_from_indices(space, indices: Mapping[str, np.ndarray]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for d in space.dims:
        idx = np.asarray(indices[d.path], dtype=np.intp)
        out[d.path] = _Cat(idx, d.choices) if d.is_words else d.table()[idx]
    return out


def iter_chunks(space, chunk: int = 262_144) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Yield (flat positions, assignment) over the whole finite space, ``chunk`` at a time."""
    space._require_finite("exhaustive search")
    total = int(space.size)
    for start in range(0, total, chunk):
        flat = np.arange(start, min(start + chunk, total), dtype=np.int64)
        yield flat, space.assign_from_indices(space.index_grid(flat))


def _require_finite(space: "SearchSpace", what: str) -> None:
    """A one-line error unless ``space`` can be enumerated: finite, at most :data:`ENUMERATE_LIMIT` points."""
    if not space.is_finite():
        cont = [d.path for d in space.dims if d.choices is None]
        raise CosearchError(cont[0], f"{what} needs finite choices: give the range a step")
    if not space.size <= ENUMERATE_LIMIT:
        raise CosearchError("space", f"{what} over {space.size:.3g} points is refused (limit {ENUMERATE_LIMIT:.0e}, "
                            "about 3 hours on one core): use a sampler (--sampler tpe, nsga2, ...) or fewer choices")


def prune(space) -> None:
    """Drop choices that break a divisibility rule for every value of the other knobs.

    Enumerates the sub-product of the dimensions the rules read (when it has at most
    :data:`PRUNE_LIMIT` points), other dimensions held at their first choice. Raises a
    one-line error when no combination is valid at all.
    """
    struct = [d for d in space.dims if d.path in STRUCTURAL and d.finite]
    if space.is_inventory:  # the divisibility rules of several GPU types are checked per row (cosearch.model.hetero)
        return
    if not struct or any(d.path in STRUCTURAL and not d.finite for d in space.dims):
        return
    sub = int(np.prod([d.size for d in struct]))
    if sub > PRUNE_LIMIT:
        logger.info("space: %d structural combinations, too many to prune", sub)
        return
    shape = tuple(int(d.size) for d in struct)
    idx = np.unravel_index(np.arange(sub, dtype=np.int64), shape)
    assign: dict[str, Any] = {}
    pos = {d.path: i for i, d in enumerate(struct)}
    for d in space.dims:
        ix = idx[pos[d.path]] if d.path in pos else np.zeros(sub, dtype=np.intp)
        if d.choices is None:
            assign[d.path] = np.full(sub, d.low if d.kind == "float" else round(d.low), dtype=float)
        else:
            assign[d.path] = _Cat(ix, d.choices) if d.is_words else d.table()[ix]
    cols, _ = columns(space, assign)
    with np.errstate(divide="ignore", invalid="ignore"):
        full = broadcast_columns(cols)
        ok = valid_mask(full)
    space.valid_fraction = float(ok.mean())
    if not ok.any():
        with np.errstate(divide="ignore", invalid="ignore"):
            counts = [(int(np.count_nonzero(~r.ok(full))), r) for r in RULES]
        _, worst = max(counts, key=lambda t: t[0])
        raise CosearchError(worst.field, f"no valid combination in the space: every point breaks a rule "
                            f"(most often: {worst.message.split('(')[0].strip()})")
    for d in struct:
        used = np.zeros(int(d.size), dtype=bool)
        used[np.unique(idx[pos[d.path]][ok])] = True
        if used.all():
            continue
        dropped = [c for c, u in zip(d.choices, used) if not u]
        d.choices = [c for c, u in zip(d.choices, used) if u]
        space.pruned[d.path] = dropped
        logger.info("space: dropped %s choices %s (never valid)", d.path, dropped)

