"""Search spaces: a scenario in which any value may be a list of choices or a range.

A space file is a scenario (``model``, ``training``, ``cluster``, ``plan``) plus ``objectives`` and
``constraints``. Any leaf may be ``[a, b, c]`` (choices) or ``{min, max, step?, log?}`` (a range).
``model`` and ``cluster.gpu`` may be lists of preset / catalog ids. Derived knobs are part of the
space: ``dp = gpus / (tp*pp*cp)`` unless ``plan.dp`` is given, in which case
``gpus = tp*pp*cp*dp``; ``cluster.nodes`` sets ``gpus = nodes * gpus_per_node``.

:meth:`SearchSpace.evaluate` maps arrays of choices (one array per dimension) to the model's
columns and returns every metric plus ``feasible`` (divisibility rules, memory fit, budget).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from .. import hardware
from ..errors import CosearchError
from ..model import evaluate as model_evaluate
from ..model.columns import CATEGORICAL_CODES, INPUT_COLUMNS
from ..model.profile import DEFAULT_PROFILE, Profile
from ..presets import ARCH_FIELDS, preset, presets
from ..scenario import HARDWARE_OVERRIDES, parse_scenario, read_yaml

#: Metrics a study may optimize, and their direction.
MAXIMIZE = {"mfu", "tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu"}
OBJECTIVE_METRICS = (
    "step_time_s", "time_to_train_days", "cost_to_train_usd", "cost_usd_per_step", "gpus", "energy_to_train_mwh",
    "memory_gib", "mfu", "tokens_per_s", "model_tflops_per_gpu",
)
#: Budget constraints: key -> metric it bounds from above.
CONSTRAINT_METRICS = {
    "max_cost_usd": "cost_to_train_usd", "max_gpus": "gpus", "max_days": "time_to_train_days",
    "max_step_time_s": "step_time_s", "max_energy_mwh": "energy_to_train_mwh", "max_cost_usd_per_step": "cost_usd_per_step",
}
SECTIONS = ("model", "training", "cluster", "plan")
_SIZE_KEYS = ("gpus", "dp")  # derived below from gpus / nodes / dp


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

    def values(self, index: np.ndarray) -> list[Any] | np.ndarray:
        """Choice values at integer indices."""
        return np.asarray(self.choices, dtype=object)[index]


@dataclass
class SearchSpace:
    base: dict[str, Any]
    dims: list[Dimension]
    objectives: list[str]
    constraints: dict[str, float] = field(default_factory=dict)
    source: str = ""

    # ----------------------------------------------------------------------------- structure
    @property
    def size(self) -> float:
        return float(np.prod([d.size for d in self.dims])) if self.dims else 1.0

    @property
    def directions(self) -> list[str]:
        return [direction(m) for m in self.objectives]

    def dim(self, path: str) -> Dimension:
        for d in self.dims:
            if d.path == path:
                return d
        raise KeyError(path)

    def is_finite(self) -> bool:
        return all(d.choices is not None for d in self.dims)

    # ----------------------------------------------------------------------------- evaluation
    def evaluate(self, assign: Mapping[str, Sequence[Any] | np.ndarray], profile: Profile = DEFAULT_PROFILE) -> dict[str, np.ndarray]:
        """Metrics for arrays of values, one array per dimension path (same length)."""
        cols, n = self.columns(assign)
        out = model_evaluate(cols, profile)
        out = {k: np.broadcast_to(v, (n,)) if np.ndim(v) == 0 else v for k, v in out.items()}
        violations = self.violations(out)
        within = np.ones(n, dtype=bool)
        for v in violations.values():
            within &= v <= 0
        out["within_budget"] = within
        out["feasible"] = out["valid"] & out["fits"] & within
        for key, v in violations.items():
            out[f"violation_{key}"] = v
        return out

    def violations(self, metrics: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Budget constraint values (<= 0 satisfied), relative to the bound."""
        res = {}
        for key, bound in self.constraints.items():
            value = np.asarray(metrics[CONSTRAINT_METRICS[key]], dtype=float)
            res[key] = np.where(np.isfinite(value), value / bound - 1.0, np.inf)
        return res

    def columns(self, assign: Mapping[str, Sequence[Any] | np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
        """The model's input columns for the assigned values (fixed values from the base)."""
        n = len(next(iter(assign.values()))) if assign else 1
        get = _Resolver(self.base, assign, n)
        cols: dict[str, Any] = {}
        # model: a preset name (fixed or chosen) or explicit fields
        model = get.raw("model")
        if isinstance(model, np.ndarray) and model.dtype == object:
            names = sorted(set(model.tolist()))
            table = {name: preset(name) for name in names}
            idx = np.searchsorted(np.array(names, dtype=object), model)
            for key in ARCH_FIELDS:
                vals = np.array([float(table[nm].get(key, _arch_default(key, table[nm]))) for nm in names])
                cols[key] = vals[idx]
        else:
            arch = preset(model) if isinstance(model, str) else dict(model)
            for key in ARCH_FIELDS:
                cols[key] = get.number(f"model.{key}", _arch_default(key, arch) if key not in arch else arch[key])
        # training
        cols["global_batch"] = get.number("training.global_batch")
        cols["tokens"] = get.number("training.tokens", np.nan)
        cols["precision"] = get.coded("training.precision", "bf16")
        cols["attention"] = get.coded("training.attention", "flash")
        # cluster: catalog lookups by GPU id, then overrides
        gpu = get.raw("cluster.gpu")
        gpu_names = sorted(set(np.atleast_1d(gpu).tolist()))
        gidx = np.searchsorted(np.array(gpu_names, dtype=object), np.atleast_1d(gpu)) if len(gpu_names) > 1 else 0
        cat = {g: hardware.gpu(g) for g in gpu_names}
        for key in HARDWARE_OVERRIDES + ("matmul_efficiency",):
            table = np.array([float(cat[g][key]) for g in gpu_names])
            cols[key] = table[gidx]
        prec = np.atleast_1d(get.raw("training.precision", "bf16"))
        prec_names = ("bf16", "fp16", "fp8")
        peak_table = np.array([[_peak(cat[g], p) for p in prec_names] for g in gpu_names])
        pidx = np.array([prec_names.index(p) for p in prec]) if prec.size > 1 else prec_names.index(prec[0])
        cols["peak_tflops"] = peak_table[gidx, pidx]
        for key in HARDWARE_OVERRIDES:
            if get.has(f"cluster.{key}"):
                cols[key] = get.number(f"cluster.{key}")
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
        if get.has("cluster.nodes"):
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

    # ----------------------------------------------------------------------------- enumeration
    def index_grid(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Per-dimension choice indices of flat (mixed-radix) positions in the Cartesian product."""
        shape = tuple(int(d.size) for d in self.dims)
        idx = np.unravel_index(flat, shape) if shape else ()
        return {d.path: i for d, i in zip(self.dims, idx)}

    def assign_from_indices(self, indices: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for d in self.dims:
            arr = np.asarray(d.choices, dtype=object)[indices[d.path]]
            out[d.path] = arr if d.kind == "categorical" and not _all_numeric(d.choices) else arr.astype(float)
        return out

    def iter_chunks(self, chunk: int = 262_144) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """Yield (flat positions, assignment) over the whole finite space, ``chunk`` at a time."""
        if not self.is_finite():
            cont = [d.path for d in self.dims if d.choices is None]
            raise CosearchError(cont[0], "exhaustive search needs finite choices: give the range a step")
        total = int(self.size)
        for start in range(0, total, chunk):
            flat = np.arange(start, min(start + chunk, total), dtype=np.int64)
            yield flat, self.assign_from_indices(self.index_grid(flat))

    # ----------------------------------------------------------------------------- scenarios
    def scenario(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The complete scenario dict of one point (values by dimension path)."""
        sc = copy.deepcopy({k: v for k, v in self.base.items() if k in SECTIONS})
        for path, value in values.items():
            _set_path(sc, path, _plain(value))
        return sc


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


def _set_path(d: dict, path: str, value: Any) -> None:
    parts = path.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = value


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
        if path in self.assign:
            return np.asarray(self.assign[path], dtype=object) if not np.issubdtype(np.asarray(self.assign[path]).dtype, np.number) else np.asarray(self.assign[path])
        v = self._base(path)
        return default if v is None else v

    def number(self, path: str, default: Any = None) -> np.ndarray | float:
        v = self.raw(path, default)
        if v is None:
            raise CosearchError(path, "required field is missing")
        arr = np.asarray(v)
        if arr.dtype == object:
            arr = np.array([float(x) for x in arr.tolist()])
        return arr.astype(float)

    def coded(self, path: str, default: str | None) -> np.ndarray | float:
        v = self.raw(path, default)
        codes = CATEGORICAL_CODES[path.rsplit(".", 1)[-1]]
        arr = np.atleast_1d(np.asarray(v, dtype=object))
        out = np.array([float(codes[x]) for x in arr.tolist()])
        return out if np.ndim(v) else out[0]


def _dimension(path: str, spec: Any) -> Dimension:
    if isinstance(spec, list):
        if not spec:
            raise CosearchError(path, "a list of choices must not be empty")
        if _all_numeric(spec) and not isinstance(spec[0], bool):
            kind = "int" if all(float(v).is_integer() for v in spec) else "float"
            return Dimension(path, kind, choices=sorted(set(spec)))
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
    if step is not None and (not isinstance(step, (int, float)) or step <= 0):
        raise CosearchError(path, f"step must be a positive number (got {step!r})")
    if log and (lo <= 0 or step is not None):
        raise CosearchError(path, "a log range needs min > 0 and no step")
    is_int = all(isinstance(x, int) for x in (lo, hi)) and (step is None or isinstance(step, int))
    if is_int:
        st = step or 1
        choices = list(range(int(lo), int(hi) + 1, int(st)))
        return Dimension(path, "int", choices=choices, low=lo, high=hi, step=st, log=log)
    choices = list(np.round(np.arange(lo, hi + step / 2, step), 12)) if step else None
    return Dimension(path, "float", choices=[float(c) for c in choices] if choices else None, low=float(lo), high=float(hi), step=step, log=log)


def _walk(d: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for k, v in d.items():
        path = f"{prefix}.{k}" if prefix else k
        if isinstance(v, Mapping) and not (set(v) and set(v) <= {"min", "max", "step", "log"}):
            yield from _walk(v, path)
        else:
            yield path, v


def parse_space(data: Any, source: str = "") -> SearchSpace:
    """Validate a space dict: every choice must be a value the scenario format accepts."""
    if not isinstance(data, Mapping):
        raise CosearchError("space", "expected a mapping with model, training, cluster, plan, objectives")
    unknown = sorted(set(data) - set(SECTIONS) - {"objectives", "constraints", "name", "description"})
    if unknown:
        raise CosearchError(unknown[0], "unknown key; allowed: model, training, cluster, plan, objectives, constraints, name, description")
    objectives = data.get("objectives") or ["step_time_s"]
    if isinstance(objectives, str):
        objectives = [objectives]
    for m in objectives:
        if m not in OBJECTIVE_METRICS:
            raise CosearchError("objectives", f"unknown metric {m!r}; allowed: {', '.join(OBJECTIVE_METRICS)}")
    constraints = dict(data.get("constraints") or {})
    for k, v in constraints.items():
        if k not in CONSTRAINT_METRICS:
            raise CosearchError(f"constraints.{k}", f"unknown constraint; allowed: {', '.join(CONSTRAINT_METRICS)}")
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
            raise CosearchError(f"constraints.{k}", f"must be a positive number (got {v!r})")
    dims: list[Dimension] = []
    base: dict[str, Any] = {}
    for section in SECTIONS:
        if section not in data:
            if section == "plan":
                continue
            raise CosearchError(section, "required section is missing")
        value = data[section]
        if section == "model" and (isinstance(value, (str, list))):
            if isinstance(value, list):
                dims.append(_dimension("model", value))
            base["model"] = value
            continue
        if not isinstance(value, Mapping):
            raise CosearchError(section, f"expected a mapping (got {type(value).__name__})")
        base[section] = {}
        for path, spec in _walk(value, section):
            if isinstance(spec, list) or (isinstance(spec, Mapping) and set(spec) <= {"min", "max", "step", "log"}):
                dims.append(_dimension(path, spec))
            _set_path(base, path, spec)
    if "tokens" not in (base.get("training") or {}) and any(m in ("time_to_train_days", "cost_to_train_usd", "energy_to_train_mwh") for m in objectives):
        raise CosearchError("training.tokens", "needed by the objectives time_to_train_days / cost_to_train_usd")
    space = SearchSpace(base=base, dims=dims, objectives=list(objectives), constraints=constraints, source=source)
    _check_choices(space)
    return space


def _first_value(d: Dimension) -> Any:
    return d.choices[0] if d.choices is not None else (d.low if d.kind == "float" else int(d.low))


def _check_choices(space: SearchSpace) -> None:
    """Every choice of every dimension must pass the scenario schema (types, names, ranges)."""
    first = {d.path: _first_value(d) for d in space.dims}
    template = space.scenario(first)
    if "cluster" in template and "nodes" in template["cluster"]:
        template["cluster"].pop("nodes")
        template["cluster"]["gpus"] = 1
    template.setdefault("cluster", {}).setdefault("gpus", 1)
    for d in space.dims:
        if d.path == "cluster.nodes":
            continue
        for v in (d.choices if d.choices is not None else [d.low, d.high]):
            trial = copy.deepcopy(template)
            if d.path == "model":
                trial["model"] = v
            else:
                _set_path(trial, d.path, _plain(v))
            try:
                parse_scenario(trial)
            except CosearchError as err:
                raise CosearchError(d.path, f"choice {v!r} is not allowed: {err.message}") from None


def load_space(path: str | Path) -> SearchSpace:
    return parse_space(read_yaml(path), source=str(path))
