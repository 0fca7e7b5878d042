"""Search spaces: a scenario in which any value may be a list of choices or a range.

A space file is a scenario (``model``, ``training``, ``cluster``, ``plan``) plus ``objectives`` and
``constraints``. Any leaf may be ``[a, b, c]`` (choices) or ``{min, max, step?, log?}`` (a range).
``model`` and ``cluster.gpu`` may be lists of preset / catalog ids. A hardware override list may
hold ``null`` meaning "the catalog value of the chosen GPU" (``nvlink_gbps: [null, 1800]``).
Derived knobs are part of the space: ``dp = gpus / (tp*pp*cp)`` unless ``plan.dp`` is given, in
which case ``gpus = tp*pp*cp*dp``; ``cluster.nodes`` sets ``gpus = nodes * gpus_per_node``.
Choices that break a divisibility rule whatever the other knobs are (``tp`` not dividing the heads,
``pp`` not dividing the layers, ...) are pruned when the space is parsed (:attr:`SearchSpace.pruned`),
so samplers do not spend trials on them; combinations that break a rule remain and are reported
infeasible (``valid`` False).

A point is a row of floats, one per dimension: the choice *index* for a finite dimension, the value
for a continuous range. :meth:`SearchSpace.evaluate_rows` maps an ``(n, d)`` array of rows to
every metric of the model plus ``feasible`` (divisibility rules, memory fit, budget),
``within_budget`` and ``violation_<key>`` -- with no Python loop per row.

Layout: this module holds :class:`SearchSpace` and re-exports every name; the work is done in
``_names`` (metrics, constraints, sections), ``_values`` (dimensions, word codes, path helpers),
``_limits`` (caps on hostile input), ``_parse`` (choices, ranges, sections), ``_choices`` (schema
checks per dimension), ``_cloud`` (instance expansion and columns), ``_build`` (model columns and
scenario dicts) and ``_enumerate`` (rows, enumeration, pruning).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..cloud import apply_cloud, load_catalog
from ..errors import CosearchError
from ..model import evaluate as model_evaluate
from ..model.profile import DEFAULT_PROFILE, Profile
from .._numbers import kind_of
from ..scenario import HARDWARE_OVERRIDES, PATH_TYPES, parse_scenario, read_yaml  # noqa: F401 - re-exported
from . import _build, _enumerate
from ._choices import _check_choices
from ._parse import _FLOAT_RE, _dimension, _numbers, _walk, space_fields  # noqa: F401 - re-exported
from ._cloud import _check_cloud_space, _expand_cloud, cloud_columns  # noqa: F401 - re-exported
from ._names import (  # noqa: F401 - re-exported
    _BAND, _CLOUD_DECIDES, _CLOUD_ONLY, _SIZE_KEYS, CONSTRAINT_METRICS, MAXIMIZE, METRIC_NEEDS, OBJECTIVE_METRICS, PRUNE_LIMIT,
    SECTIONS, STRUCTURAL, direction,
)
from ._values import (  # noqa: F401 - re-exported
    Dimension, _all_numeric, _Cat, _copy_tree, _del_path, _first_value, _jsonable, _plain, _Resolver, _set_path,
)


@dataclass
class SearchSpace:
    base: dict[str, Any]
    dims: list[Dimension]
    objectives: list[str]
    constraints: dict[str, float] = field(default_factory=dict)
    source: str = ""
    raw: dict[str, Any] = field(default_factory=dict)
    pruned: dict[str, list[Any]] = field(default_factory=dict)
    valid_fraction: float | None = None  # of the structural sub-product, when it was enumerated

    # ----------------------------------------------------------------------------- structure
    @property
    def size(self) -> float:
        return float(np.prod([d.size for d in self.dims])) if self.dims else 1.0

    @property
    def directions(self) -> list[str]:
        return [direction(m) for m in self.objectives]

    @property
    def budget_metrics(self) -> list[str]:
        """Metrics bounded by the space's constraints, in constraint order."""
        return [CONSTRAINT_METRICS[k] for k in self.constraints]

    def dim(self, path: str) -> Dimension:
        for d in self.dims:
            if d.path == path:
                return d
        raise KeyError(path)

    def is_finite(self) -> bool:
        return all(d.choices is not None for d in self.dims)

    def to_dict(self) -> dict[str, Any]:
        """The space as given (JSON-able), for storing with a study."""
        return copy.deepcopy(self.raw)

    # ----------------------------------------------------------------------------- evaluation
    def evaluate(self, assign: Mapping[str, Sequence[Any] | np.ndarray], profile: Profile = DEFAULT_PROFILE) -> dict[str, np.ndarray]:
        """Metrics for arrays of values, one array per dimension path (same length)."""
        if self.is_inventory:  # hook: several GPU types (cosearch.search._inventory, cosearch.model.hetero)
            from ..model.hetero import evaluate_hetero
            from ._inventory import inventory_args

            args, n = inventory_args(self, assign)
            out = evaluate_hetero(profile=profile, **args)
        else:
            cols, n = self.columns(assign)
            out = model_evaluate(cols, profile)
        out = {k: np.broadcast_to(v, (n,)) if np.ndim(v) == 0 else v for k, v in out.items()}
        rentable = np.ones(n, dtype=bool)
        if self.is_cloud:
            out["feasible"] = rentable
            out = apply_cloud(out, self._cloud_columns(_Resolver(self.base, assign, n)), self.catalog)
            rentable = out["spot_available"]
        violations = self.violations(out)
        within = np.ones(n, dtype=bool)
        for v in violations.values():
            within &= v <= 0
        out["within_budget"] = within
        out["feasible"] = out["valid"] & out["fits"] & within & rentable
        for key, v in violations.items():
            out[f"violation_{key}"] = v
        return out

    def evaluate_rows(self, rows: np.ndarray, profile: Profile = DEFAULT_PROFILE) -> dict[str, np.ndarray]:
        """Metrics for an ``(n, d)`` array of rows (choice indices / range values)."""
        return self.evaluate(self.assign_from_rows(rows), profile)

    def violations(self, metrics: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Budget constraint values (<= 0 satisfied), relative to the bound."""
        res = {}
        for key, bound in self.constraints.items():
            value = np.asarray(metrics[CONSTRAINT_METRICS[key]], dtype=float)
            res[key] = np.where(np.isfinite(value), value / bound - 1.0, np.inf)
        return res

    @property
    def is_inventory(self) -> bool:
        """Whether the cluster is an inventory of several GPU types (``cluster.inventory``)."""
        from ._inventory import is_inventory

        return is_inventory(self.base)

    # ----------------------------------------------------------------------------- cloud
    @property
    def is_cloud(self) -> bool:
        """Whether the space rents instances (a ``cloud`` section, docs/cloud.md)."""
        return isinstance(self.base.get("cloud"), Mapping)

    @property
    def catalog(self):
        """The instance catalog of a cloud space (shipped catalog plus ``cloud.catalog``), else None."""
        if not self.is_cloud:
            return None
        extra = self.base["cloud"].get("catalog")
        return load_catalog(extra) if extra else load_catalog()

    def _cloud_columns(self, get: _Resolver) -> dict[str, Any]:
        """:data:`cosearch.cloud.CLOUD_COLUMNS` of the assigned rows: instance codes, counts, spot flags."""
        return cloud_columns(self, get)

    def columns(self, assign: Mapping[str, Sequence[Any] | np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
        """The model's input columns for the assigned values (fixed values from the base)."""
        return _build.columns(self, assign)

    # ----------------------------------------------------------------------------- rows
    def assign_from_rows(self, rows: np.ndarray) -> dict[str, Any]:
        """Per-dimension value arrays (words as codes) of an ``(n, d)`` array of rows."""
        return _enumerate.assign_from_rows(self, rows)

    def values_of_row(self, row: Sequence[float]) -> dict[str, Any]:
        """Scenario values by dimension path of one row."""
        return {d.path: d.value(x) for d, x in zip(self.dims, row)}

    def row_of_values(self, values: Mapping[str, Any]) -> np.ndarray:
        """Inverse of :meth:`values_of_row` (raises CosearchError for a value not in the space)."""
        row = np.empty(len(self.dims))
        for j, d in enumerate(self.dims):
            v = values[d.path]
            if d.choices is None:
                row[j] = float(v)
                continue
            for i, c in enumerate(d.choices):
                if c == v and type(c) is not bool or c is v:
                    row[j] = i
                    break
            else:
                raise CosearchError(d.path, f"value {v!r} is not one of the choices {d.choices}")
        return row

    def rows_of_flat(self, flat: np.ndarray) -> np.ndarray:
        """Rows of flat (mixed-radix) positions in the Cartesian product of a finite space."""
        return _enumerate.rows_of_flat(self, flat)

    # ----------------------------------------------------------------------------- enumeration
    def index_grid(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Per-dimension choice indices of flat (mixed-radix) positions in the Cartesian product."""
        return _enumerate.index_grid(self, flat)

    def assign_from_indices(self, indices: Mapping[str, np.ndarray]) -> dict[str, Any]:
        return _enumerate.assign_from_indices(self, indices)

    def iter_chunks(self, chunk: int = 262_144) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """Yield (flat positions, assignment) over the whole finite space, ``chunk`` at a time."""
        return _enumerate.iter_chunks(self, chunk)

    def _require_finite(self, what: str) -> None:
        _enumerate._require_finite(self, what)

    def require_knobs(self, what: str) -> None:
        """One-line refusal of a space with nothing to search (its studies and sweeps index rows by knob)."""
        if not self.dims:
            raise CosearchError("space", f"has a single configuration (no field lists two or more values that can "
                                f"run), nothing to {what}; estimate it with `cosearch estimate`, or give a list "
                                "of values for a knob")

    # ----------------------------------------------------------------------------- scenarios
    def scenario(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The complete scenario dict of one point (values by dimension path).

        ``None`` (catalog value) drops the override; ``cluster.nodes`` becomes ``cluster.gpus``
        (nodes x gpus per node); with ``plan.dp`` and no GPU count, ``cluster.gpus`` is derived.
        The result passes :func:`cosearch.scenario.parse_scenario` for every valid point.
        """
        return _build.scenario(self, values)

    def scenarios(self, rows: np.ndarray) -> list[dict[str, Any]]:
        """Scenario dicts of many rows (one dict per row: inherent to the per-trial record)."""
        return [self.scenario(self.values_of_row(r)) for r in np.asarray(rows).reshape(-1, len(self.dims))]

    # ----------------------------------------------------------------------------- pruning
    def prune(self) -> None:
        """Drop choices that break a divisibility rule for every value of the other knobs.

        Enumerates the sub-product of the dimensions the rules read (when it has at most
        :data:`PRUNE_LIMIT` points), other dimensions held at their first choice. Raises a
        one-line error when no combination is valid at all.
        """
        _enumerate.prune(self)


def parse_space(data: Any, source: str = "", *, prune: bool = True) -> SearchSpace:
    """Validate a space dict (:func:`._parse.space_fields`); every choice must be a value the scenario
    format accepts (:func:`._choices._check_choices`); finite spaces are pruned (:meth:`SearchSpace.prune`)."""
    space = SearchSpace(**space_fields(data, source))
    _check_choices(space)
    if prune:
        space.prune()
    return space


def load_space(path: str | Path) -> SearchSpace:
    """Read and validate a space YAML file (one-line :class:`CosearchError` when malformed, or when
    ``path`` is not a str or os.PathLike: ``os.stat`` would read an int as a file descriptor, 0 being
    stdin). A space dict is :func:`parse_space`'s; :func:`as_space` takes either."""
    if not isinstance(path, PATH_TYPES):
        raise CosearchError("path", f"expected a space YAML file path, str or os.PathLike (got {kind_of(path)}); "
                            "a space dict: cosearch.search.space.parse_space")
    return parse_space(read_yaml(path), source=str(path))


def as_space(space: Any) -> SearchSpace:
    """The SearchSpace of what the public functions take as ``space`` (:func:`cosearch.run_study`,
    :func:`cosearch.sweep`): a SearchSpace, a space dict or a YAML file path; else a one-line error."""
    if isinstance(space, SearchSpace):
        return space
    if isinstance(space, Mapping):
        return parse_space(space)
    if isinstance(space, PATH_TYPES):
        return load_space(space)
    raise CosearchError("space", f"expected a SearchSpace, a space dict or a YAML file path (got {kind_of(space)})")
