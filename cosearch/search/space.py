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
"""
from __future__ import annotations

import copy
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import hardware
from ..errors import CosearchError
from ..model import evaluate as model_evaluate
from ..model.columns import CATEGORICAL_CODES, INPUT_COLUMNS, broadcast_columns
from ..model.feasibility import RULES, valid_mask
from ..model.profile import DEFAULT_PROFILE, Profile
from ..cloud import CloudSpec, apply_cloud, instance_columns, load_catalog
from ..cloud.provision import derived_cluster, instance_of
from .. import hf
from ..presets import ARCH_FIELDS, preset
from ..scenario import HARDWARE_OVERRIDES, parse_scenario, read_yaml

logger = logging.getLogger(__name__)

#: Metrics a study may optimize, and their direction.
MAXIMIZE = {"mfu", "tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu"}
OBJECTIVE_METRICS = (
    "step_time_s", "time_to_train_days", "cost_to_train_usd", "cost_usd_per_step", "gpus", "energy_to_train_mwh",
    "memory_gib", "mfu", "tokens_per_s", "model_tflops_per_gpu", "time_to_accuracy_days", "cost_to_accuracy_usd",
    "p90_time_to_train_days", "p90_cost_to_train_usd",
    "step_time_high_s", "time_to_train_high_days", "cost_to_train_high_usd",
)
#: Budget constraints: key -> metric it bounds from above.
CONSTRAINT_METRICS = {
    "max_cost_usd": "cost_to_train_usd", "max_gpus": "gpus", "max_days": "time_to_train_days",
    "max_step_time_s": "step_time_s", "max_energy_mwh": "energy_to_train_mwh", "max_cost_usd_per_step": "cost_usd_per_step",
    "max_p90_days": "p90_time_to_train_days", "max_p90_cost_usd": "p90_cost_to_train_usd",
    "max_days_to_accuracy": "time_to_accuracy_days", "max_cost_usd_to_accuracy": "cost_to_accuracy_usd",
    "max_days_high": "time_to_train_high_days", "max_cost_usd_high": "cost_to_train_high_usd",
}
#: Metrics that need an input the space must fix: metric -> (field, why).
_NEEDS = {
    **{m: ("training.tokens", "time_to_train_days / cost_to_train_usd / energy objectives and budgets")
       for m in ("time_to_train_days", "cost_to_train_usd", "energy_to_train_mwh", "p90_time_to_train_days",
                 "p90_cost_to_train_usd", "time_to_train_high_days", "cost_to_train_high_usd")},
    **{m: ("training.target_tokens", "time_to_accuracy_days / cost_to_accuracy_usd (docs/codesign.md)")
       for m in ("time_to_accuracy_days", "cost_to_accuracy_usd")},
}
#: Metrics that exist only for rented clusters (a ``cloud`` section).
_CLOUD_ONLY = ("p90_time_to_train_days", "p90_cost_to_train_usd")
#: Pessimistic metrics: the upper end of the 80 % prediction interval (cosearch.model.interval).
_BAND = ("step_time_high_s", "time_to_train_high_days", "cost_to_train_high_usd")
SECTIONS = ("model", "training", "cluster", "plan", "cloud")
#: Cluster fields an instance type decides; a space with a ``cloud`` section may not set them.
_CLOUD_DECIDES = ("gpu", "gpus", "nodes", "gpus_per_node", "nvlink_domain", "network_gbps", "price_usd_per_gpu_hour")
_SIZE_KEYS = ("gpus", "dp")  # derived below from gpus / nodes / dp
#: Dimensions that the divisibility rules read (pruning enumerates their sub-product).
STRUCTURAL = {
    "model", "training.global_batch", "training.attention", "training.precision", "cluster.gpu", "cluster.gpus",
    "cluster.nodes", "cluster.gpus_per_node", "plan.tp", "plan.pp", "plan.cp", "plan.dp", "plan.microbatch",
    "plan.interleave", "plan.zero_group", "cloud.instance", "cloud.instances",
} | {f"model.{k}" for k in ARCH_FIELDS}
#: Largest structural sub-product enumerated for pruning.
PRUNE_LIMIT = 1 << 21


def direction(metric: str) -> str:
    return "maximize" if metric in MAXIMIZE else "minimize"


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

    def _cloud_columns(self, get: "_Resolver") -> dict[str, Any]:
        """:data:`cosearch.cloud.CLOUD_COLUMNS` of the assigned rows: instance codes, counts, spot flags."""
        cat = self.catalog
        codes = cat.codes()
        provider = self.base["cloud"].get("provider")
        key = lambda name: float(codes[cat.get(name, provider).key])  # noqa: E731
        inst = get.raw("cloud.instance")
        cl: dict[str, Any] = {"instance": inst.lookup(key) if isinstance(inst, _Cat) else key(inst),
                              "instances": get.number("cloud.instances")}
        pricing = get.raw("cloud.pricing", "on_demand")
        spot = lambda p: float(p == "spot")  # noqa: E731
        cl["spot"] = pricing.lookup(spot) if isinstance(pricing, _Cat) else spot(pricing)
        for k in ("checkpoint_interval_h", "revocation_per_hour", "failure_per_hour", "restart_s", "storage_gbps"):
            cl[k] = get.number(f"cloud.{k}", np.nan)
        return cl

    def columns(self, assign: Mapping[str, Sequence[Any] | np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
        """The model's input columns for the assigned values (fixed values from the base)."""
        n = len(next(iter(assign.values()))) if assign else 1
        get = _Resolver(self.base, assign, n)
        cols: dict[str, Any] = {}
        # model: a preset name (fixed or chosen) or explicit fields
        model = get.raw("model")
        if isinstance(model, _Cat):
            table = {name: preset(name) for name in model.names}
            for key in ARCH_FIELDS:
                cols[key] = model.lookup(lambda nm, key=key: float(_arch_default(key, table[nm])))
        else:
            arch = preset(model) if isinstance(model, str) else dict(model)
            for key in ARCH_FIELDS:
                cols[key] = get.number(f"model.{key}", _arch_default(key, arch) if key not in arch else arch[key])
        # training
        cols["global_batch"] = get.number("training.global_batch")
        cols["tokens"] = get.number("training.tokens", np.nan)
        cols["precision"] = get.coded("training.precision", "bf16")
        cols["attention"] = get.coded("training.attention", "flash")
        if self.is_cloud:
            # rented cluster: the instance type decides GPU, count, node, network and price
            cl = self._cloud_columns(get)
            cols.update(instance_columns(cl["instance"], cl["instances"], cl["spot"], cols["precision"], self.catalog))
        else:
            # cluster: catalog lookups by GPU id, then overrides
            gpu = get.raw("cluster.gpu")
            if isinstance(gpu, _Cat):
                gpu_names, gidx = gpu.names, gpu.codes
            else:
                gpu_names, gidx = [gpu], 0
            cat = {g: hardware.gpu(g) for g in gpu_names}
            for key in HARDWARE_OVERRIDES + ("matmul_efficiency", "matmul_efficiency_fp8"):
                table = np.array([float(cat[g][key]) for g in gpu_names])
                cols[key] = table[gidx]
            prec = get.raw("training.precision", "bf16")
            prec_names = ("bf16", "fp16", "fp8")
            peak_table = np.array([[_peak(cat[g], p) for p in prec_names] for g in gpu_names])
            pidx = prec.lookup(prec_names.index).astype(np.intp) if isinstance(prec, _Cat) else prec_names.index(prec)
            cols["peak_tflops"] = peak_table[gidx, pidx]
        for key in HARDWARE_OVERRIDES:
            if get.has(f"cluster.{key}"):
                v = get.number(f"cluster.{key}")
                cols[key] = np.where(np.isnan(v), cols[key], v)  # null choice: catalog value
        if get.has("cluster.gpus_per_node") and not get.has("cluster.nvlink_domain"):
            node_scoped = np.array([cat[g]["nvlink_domain"] <= cat[g]["gpus_per_node"] for g in gpu_names])[gidx]
            cols["nvlink_domain"] = np.where(node_scoped, cols["gpus_per_node"], cols["nvlink_domain"])
        # plan knobs and any other scenario field that names a model column (generic, so a new
        # knob added to the scenario and INPUT_COLUMNS is searchable without touching this file)
        for section in ("training", "plan", "cluster"):
            for key in INPUT_COLUMNS:
                path = f"{section}.{key}"
                if key in cols and key not in ("tp", "pp", "cp", "microbatch", "interleave") or key in _SIZE_KEYS:
                    continue
                if get.has(path):
                    cols[key] = get.coded(path, None) if key in CATEGORICAL_CODES else get.number(path)
        for key in ("tp", "pp", "cp", "microbatch", "interleave"):
            cols[key] = get.number(f"plan.{key}", 1.0)
        mp = cols["tp"] * cols["pp"] * cols["cp"]
        if self.is_cloud:
            pass  # gpus = instances x GPUs per instance, set above
        elif get.has("cluster.nodes"):
            cols["gpus"] = get.number("cluster.nodes") * cols["gpus_per_node"]
        elif get.has("cluster.gpus"):
            cols["gpus"] = get.number("cluster.gpus")
        if get.has("plan.dp"):
            cols["dp"] = get.number("plan.dp")
            if "gpus" not in cols:
                cols["gpus"] = mp * cols["dp"]
        else:
            if "gpus" not in cols:
                raise CosearchError("cluster.gpus", "the space must set cluster.gpus, cluster.nodes or plan.dp")
            cols["dp"] = cols["gpus"] / mp
        return {k: np.broadcast_to(np.asarray(v, dtype=float), (n,)) for k, v in cols.items()}, n

    # ----------------------------------------------------------------------------- rows
    def assign_from_rows(self, rows: np.ndarray) -> dict[str, Any]:
        """Per-dimension value arrays (words as codes) of an ``(n, d)`` array of rows."""
        rows = np.asarray(rows, dtype=float).reshape(-1, len(self.dims))
        out: dict[str, Any] = {}
        for j, d in enumerate(self.dims):
            col = rows[:, j]
            if d.choices is None:
                out[d.path] = np.round(col) if d.kind == "int" else col
                continue
            idx = col.astype(np.intp)
            out[d.path] = _Cat(idx, d.choices) if d.is_words else d.table()[idx]
        return out

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
        shape = tuple(int(d.size) for d in self.dims)
        if not shape:
            return np.zeros((len(flat), 0))
        idx = np.unravel_index(np.asarray(flat, dtype=np.int64), shape)
        return np.stack(idx, axis=1).astype(float)

    # ----------------------------------------------------------------------------- enumeration
    def index_grid(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Per-dimension choice indices of flat (mixed-radix) positions in the Cartesian product."""
        shape = tuple(int(d.size) for d in self.dims)
        idx = np.unravel_index(flat, shape) if shape else ()
        return {d.path: i for d, i in zip(self.dims, idx)}

    def assign_from_indices(self, indices: Mapping[str, np.ndarray]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for d in self.dims:
            idx = np.asarray(indices[d.path], dtype=np.intp)
            out[d.path] = _Cat(idx, d.choices) if d.is_words else d.table()[idx]
        return out

    def iter_chunks(self, chunk: int = 262_144) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """Yield (flat positions, assignment) over the whole finite space, ``chunk`` at a time."""
        self._require_finite("exhaustive search")
        total = int(self.size)
        for start in range(0, total, chunk):
            flat = np.arange(start, min(start + chunk, total), dtype=np.int64)
            yield flat, self.assign_from_indices(self.index_grid(flat))

    def _require_finite(self, what: str) -> None:
        if not self.is_finite():
            cont = [d.path for d in self.dims if d.choices is None]
            raise CosearchError(cont[0], f"{what} needs finite choices: give the range a step")

    # ----------------------------------------------------------------------------- scenarios
    def scenario(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The complete scenario dict of one point (values by dimension path).

        ``None`` (catalog value) drops the override; ``cluster.nodes`` becomes ``cluster.gpus``
        (nodes x gpus per node); with ``plan.dp`` and no GPU count, ``cluster.gpus`` is derived.
        The result passes :func:`cosearch.scenario.parse_scenario` for every valid point.
        """
        sc = _copy_tree({k: v for k, v in self.base.items() if k in SECTIONS})
        for path, value in values.items():
            if value is None:
                _del_path(sc, path)
            else:
                _set_path(sc, path, _plain(value))
        cluster = sc.setdefault("cluster", {})
        plan = sc.get("plan") or {}
        if self.is_cloud:
            # the stored scenario repeats what the instance type decides (GPU, count, price), so
            # tables and `cosearch estimate` read it like any other scenario
            spec = CloudSpec.model_validate(sc["cloud"])
            try:
                sc["cluster"] = derived_cluster(spec, cluster)
            except CosearchError:  # spot asked where there is no spot market: an infeasible point, no price
                sc["cluster"] = derived_cluster(spec.model_copy(update={"pricing": "on_demand"}), cluster)
                sc["cluster"].pop("price_usd_per_gpu_hour")
        elif "nodes" in cluster:
            nodes = cluster.pop("nodes")
            per_node = cluster.get("gpus_per_node") or hardware.gpu(cluster["gpu"])["gpus_per_node"]
            cluster["gpus"] = _plain(nodes * per_node)
        elif "gpus" not in cluster and plan.get("dp") is not None:
            cluster["gpus"] = _plain(plan.get("tp", 1) * plan.get("pp", 1) * plan.get("cp", 1) * plan["dp"])
        return sc

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
        struct = [d for d in self.dims if d.path in STRUCTURAL and d.finite]
        if not struct or any(d.path in STRUCTURAL and not d.finite for d in self.dims):
            return
        sub = int(np.prod([d.size for d in struct]))
        if sub > PRUNE_LIMIT:
            logger.info("space: %d structural combinations, too many to prune", sub)
            return
        shape = tuple(int(d.size) for d in struct)
        idx = np.unravel_index(np.arange(sub, dtype=np.int64), shape)
        assign: dict[str, Any] = {}
        pos = {d.path: i for i, d in enumerate(struct)}
        for d in self.dims:
            ix = idx[pos[d.path]] if d.path in pos else np.zeros(sub, dtype=np.intp)
            if d.choices is None:
                assign[d.path] = np.full(sub, d.low if d.kind == "float" else round(d.low), dtype=float)
            else:
                assign[d.path] = _Cat(ix, d.choices) if d.is_words else d.table()[ix]
        cols, _ = self.columns(assign)
        with np.errstate(divide="ignore", invalid="ignore"):
            full = broadcast_columns(cols)
            ok = valid_mask(full)
        self.valid_fraction = float(ok.mean())
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
            self.pruned[d.path] = dropped
            logger.info("space: dropped %s choices %s (never valid)", d.path, dropped)


# --------------------------------------------------------------------------------- parsing
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


def _arch_default(key: str, arch: Mapping[str, Any]) -> Any:
    if key in arch:
        return arch[key]
    return {"kv_heads": arch.get("heads"), "ffn_hidden": 4 * arch.get("hidden", 0), "gated_mlp": False,
            "tied_embeddings": True}.get(key)


def _peak(entry: Mapping[str, Any], precision: str) -> float:
    v = entry["peak_tflops"].get(precision)
    return float(v) if v else np.nan


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
        if isinstance(v, _Cat):
            return v.lookup(lambda x: np.nan if x is None else float(x))
        return np.asarray(v, dtype=float)

    def coded(self, path: str, default: str | None) -> np.ndarray | float:
        v = self.raw(path, default)
        codes = CATEGORICAL_CODES[path.rsplit(".", 1)[-1]]
        if isinstance(v, _Cat):
            return v.lookup(lambda x: float(codes[x]))
        return float(codes[v])


def _dimension(path: str, spec: Any) -> Dimension:
    if isinstance(spec, list):
        if not spec:
            raise CosearchError(path, "a list of choices must not be empty")
        if any(v is None for v in spec):
            if not (path.startswith("cluster.") and path.split(".", 1)[1] in HARDWARE_OVERRIDES):
                raise CosearchError(path, "null (catalog value) is allowed only in cluster hardware overrides")
            rest = [v for v in spec if v is not None]
            if not rest or not _all_numeric(rest) or isinstance(rest[0], bool):
                raise CosearchError(path, "null may only stand beside numbers")
            kind = "int" if all(float(v).is_integer() for v in rest) else "float"
            return Dimension(path, kind, choices=[None] + sorted(set(rest)))
        if _all_numeric(spec) and not isinstance(spec[0], bool):
            kind = "int" if all(float(v).is_integer() for v in spec) else "float"
            return Dimension(path, kind, choices=sorted(set(spec)))
        if not all(isinstance(v, (str, bool)) for v in spec):
            raise CosearchError(path, f"choices must be all numbers, all words or all booleans (got {spec!r})")
        return Dimension(path, "categorical", choices=list(dict.fromkeys(spec)))
    allowed = {"min", "max", "step", "log"}
    extra = set(spec) - allowed
    if extra:
        raise CosearchError(path, f"unknown range key {sorted(extra)[0]!r}; allowed: min, max, step, log")
    if "min" not in spec or "max" not in spec:
        raise CosearchError(path, "a range needs min and max")
    lo, hi, step, log = spec["min"], spec["max"], spec.get("step"), bool(spec.get("log", False))
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (lo, hi)) or lo > hi:
        raise CosearchError(path, f"range needs numbers with min <= max (got min={lo!r}, max={hi!r})")
    if step is not None and (not isinstance(step, (int, float)) or isinstance(step, bool) or step <= 0):
        raise CosearchError(path, f"step must be a positive number (got {step!r})")
    if log and (lo <= 0 or step is not None):
        raise CosearchError(path, "a log range needs min > 0 and no step")
    is_int = all(isinstance(x, int) for x in (lo, hi)) and (step is None or isinstance(step, int))
    if is_int:
        st = step or 1
        if (hi - lo) // st + 1 > 10_000_000:
            raise CosearchError(path, f"range has {(hi - lo) // st + 1} values; give a larger step")
        choices = list(range(int(lo), int(hi) + 1, int(st)))
        return Dimension(path, "int", choices=choices, low=lo, high=hi, step=st, log=log)
    choices = list(np.round(np.arange(lo, hi + step / 2, step), 12)) if step else None
    return Dimension(path, "float", choices=[float(c) for c in choices] if choices else None, low=float(lo), high=float(hi), step=step, log=log)


def _walk(d: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for k, v in d.items():
        path = f"{prefix}.{k}" if prefix else k
        if isinstance(v, Mapping) and not (set(v) & {"min", "max"}):
            yield from _walk(v, path)
        else:
            yield path, v


_FLOAT_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


def _numbers(x: Any) -> Any:
    """YAML 1.1 reads ``3.0e11`` (no exponent sign) as a string: make such strings floats."""
    if isinstance(x, Mapping):
        return {k: _numbers(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_numbers(v) for v in x]
    if isinstance(x, str) and _FLOAT_RE.match(x.strip()):
        return float(x)
    return x


def parse_space(data: Any, source: str = "", *, prune: bool = True) -> SearchSpace:
    """Validate a space dict: every choice must be a value the scenario format accepts."""
    if not isinstance(data, Mapping):
        raise CosearchError("space", "expected a mapping with model, training, cluster, plan, objectives")
    data = _numbers(hf.expand(data))  # model: {hf_config: ...} -> model fields (cosearch.hf)
    unknown = sorted(set(data) - set(SECTIONS) - {"objectives", "constraints", "name", "description"})
    if unknown:
        raise CosearchError(unknown[0], "unknown key; allowed: model, training, cluster, plan, cloud, objectives, constraints, name, description")
    objectives = data.get("objectives") or ["step_time_s"]
    if isinstance(objectives, str):
        objectives = [objectives]
    if not isinstance(objectives, list):
        raise CosearchError("objectives", f"expected a list of metric names (got {objectives!r})")
    for m in objectives:
        if m not in OBJECTIVE_METRICS:
            raise CosearchError("objectives", f"unknown metric {m!r}; allowed: {', '.join(OBJECTIVE_METRICS)}")
    if len(set(objectives)) != len(objectives):
        raise CosearchError("objectives", "each metric may appear only once")
    constraints = data.get("constraints") or {}
    if not isinstance(constraints, Mapping):
        raise CosearchError("constraints", f"expected a mapping like {{max_cost_usd: 2.0e6}} (got {constraints!r})")
    constraints = dict(constraints)
    for k, v in constraints.items():
        if k not in CONSTRAINT_METRICS:
            raise CosearchError(f"constraints.{k}", f"unknown constraint; allowed: {', '.join(CONSTRAINT_METRICS)}")
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
            raise CosearchError(f"constraints.{k}", f"must be a positive number (got {v!r})")
    raw = {k: copy.deepcopy(v) for k, v in data.items()}
    if isinstance(data.get("cloud"), Mapping):
        data = {**data, "cloud": _expand_cloud(data["cloud"])}
    dims: list[Dimension] = []
    base: dict[str, Any] = {}
    for section in SECTIONS:
        if section not in data:
            if section in ("plan", "cloud") or (section == "cluster" and "cloud" in data):
                continue
            raise CosearchError(section, "required section is missing")
        value = data[section]
        if section == "model" and (isinstance(value, (str, list))):
            if isinstance(value, list):
                d = _dimension("model", value)
                if d.kind != "categorical" or not all(isinstance(v, str) for v in d.choices):
                    raise CosearchError("model", "a list of models must name presets")
                for name in d.choices:
                    preset(name)
                dims.append(d)
            else:
                preset(value)
            base["model"] = value
            continue
        if not isinstance(value, Mapping):
            raise CosearchError(section, f"expected a mapping (got {type(value).__name__})")
        base[section] = {}
        for path, spec in _walk(value, section):
            if isinstance(spec, (list, Mapping)):
                dims.append(_dimension(path, spec))
            _set_path(base, path, spec)
    used = list(objectives) + [CONSTRAINT_METRICS[k] for k in constraints]
    for m in used:
        need, why = _NEEDS.get(m, (None, ""))
        if need and need.split(".", 1)[1] not in (base.get("training") or {}):
            raise CosearchError(need, f"needed by {why}")
    if any(m in _BAND for m in used):
        from ..model.interval import INTERVAL_FILE, interval_factors

        if not math.isfinite(interval_factors()[1]):
            raise CosearchError(next(m for m in used if m in _BAND),
                                f"needs the prediction interval ({INTERVAL_FILE}, made by experiments/prediction_interval.py), "
                                "which is missing or unreadable")
    if "cloud" in base:
        _check_cloud_space(base, dims)
    elif any(m in _CLOUD_ONLY for m in used):
        raise CosearchError("cloud", "p90 objectives and budgets need a cloud section (rented instances, docs/cloud.md)")
    raw["objectives"] = list(objectives)
    raw["constraints"] = dict(constraints)
    space = SearchSpace(base=base, dims=dims, objectives=list(objectives), constraints=constraints, source=source,
                        raw=_jsonable(raw))
    _check_choices(space)
    if prune:
        space.prune()
    return space


def _expand_cloud(cloud: Mapping[str, Any]) -> dict[str, Any]:
    """Resolve the instance choices of a cloud space: ``instance: any`` (or no instance) means every
    catalog instance type of the listed ``provider`` (one or a list) offered in ``region``, and the
    ``gpu`` filter (one id or a list); explicit instances are checked against the region. Prices are
    the same in every listed region of an instance type (data/instances.yaml), so the region is a
    filter, not a knob."""
    c = dict(cloud)
    cat = load_catalog(c["catalog"]) if c.get("catalog") else load_catalog()
    prov = c.get("provider")
    provs = prov if isinstance(prov, list) else [prov] if prov is not None else None
    for p in provs or []:
        if p not in cat.providers:
            raise CosearchError("cloud.provider", f"unknown provider {p!r}; allowed: {', '.join(cat.providers)}")
    region = c.get("region")
    if region is not None and not isinstance(region, str):
        raise CosearchError("cloud.region", "must be a single region (prices do not differ between an instance's regions)")
    gpus = c.pop("gpu", None)
    gpus = gpus if isinstance(gpus, list) or gpus is None else [gpus]
    inst = c.get("instance", "any")
    if inst == "any":
        keys = [it.key for it in cat.instances.values() if (provs is None or it.provider in provs)
                and (region is None or region in it.regions) and (gpus is None or it.gpu in gpus)]
        if not keys:
            raise CosearchError("cloud.instance", "no catalog instance type matches cloud.provider/region/gpu "
                                "(see `cosearch catalog`)")
        c["instance"] = keys
        c.pop("provider", None)
    else:
        if gpus is not None:
            raise CosearchError("cloud.gpu", "a GPU filter goes with instance: any")
        names = inst if isinstance(inst, list) else [inst]
        if isinstance(prov, list):
            if any("/" not in str(n) for n in names):
                raise CosearchError("cloud.provider", "with a list of providers write instances as provider/instance")
            c.pop("provider")
        for n in names:  # the scenario's own check: instance known, offered in the region
            instance_of(CloudSpec(instance=str(n), provider=prov if isinstance(prov, str) else None, region=region,
                                  instances=1, catalog=c.get("catalog")))
    return c


def _check_cloud_space(base: Mapping[str, Any], dims: Sequence[Dimension]) -> None:
    """A cloud space rents instances: the instance type decides the cluster, and only the
    instance, count, pricing and transient knobs may vary (one-line errors otherwise)."""
    cloud, cluster = base["cloud"], base.get("cluster") or {}
    for key in _CLOUD_DECIDES:
        if key in cluster:
            raise CosearchError(f"cluster.{key}", "decided by cloud.instance in a cloud space; vary cloud.instance/"
                                "instances/pricing instead")
    if "dp" in (base.get("plan") or {}):
        raise CosearchError("plan.dp", "in a cloud space dp is derived from cloud.instances; drop plan.dp")
    if "instances" not in cloud:
        raise CosearchError("cloud.instances", "required in a cloud space")
    fixed_only = {"provider", "region", "catalog"}
    for d in dims:
        if d.path.startswith("cloud.") and d.path.split(".", 1)[1] in fixed_only:
            raise CosearchError(d.path, "must be a single value; list provider/instance keys in cloud.instance instead")


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


def _check_choices(space: SearchSpace) -> None:
    """Every choice of every dimension must pass the scenario schema (types, names, ranges)."""
    template = copy.deepcopy({k: v for k, v in space.base.items() if k in SECTIONS})
    for d in space.dims:
        v = _first_value(d)
        if v is None:
            _del_path(template, d.path)
        else:
            _set_path(template, d.path, _plain(v))
    cluster = template.setdefault("cluster", {})
    if not isinstance(cluster, dict):
        raise CosearchError("cluster", f"expected a mapping (got {type(cluster).__name__})")
    cluster.pop("nodes", None)
    if "cloud" not in template and (not isinstance(cluster.get("gpus"), int) or isinstance(cluster.get("gpus"), bool)):
        cluster["gpus"] = 1
    try:
        parse_scenario(template)
    except CosearchError as err:
        raise CosearchError(err.field, err.message) from None
    for d in space.dims:
        if d.path == "cluster.nodes":
            for v in d.choices if d.choices is not None else [d.low, d.high]:
                if not isinstance(v, int) or v <= 0:
                    raise CosearchError(d.path, f"choice {v!r} is not allowed: must be a positive integer")
            continue
        for v in (d.choices if d.choices is not None else [d.low, d.high]):
            trial = copy.deepcopy(template)
            if d.path == "model":
                trial["model"] = v
            elif v is None:
                _del_path(trial, d.path)
            else:
                _set_path(trial, d.path, _plain(v))
            try:
                parse_scenario(trial)
            except CosearchError as err:
                raise CosearchError(d.path, f"choice {v!r} is not allowed: {err.message}") from None


def load_space(path: str | Path) -> SearchSpace:
    """Read and validate a space YAML file (one-line :class:`CosearchError` when malformed)."""
    return parse_space(read_yaml(path), source=str(path))
