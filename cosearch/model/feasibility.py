"""Divisibility and consistency rules of a parallel plan, evaluated on whole arrays of configurations.

The vectorized path flags a violating row (``valid`` is False); the scalar path (``estimate``)
raises the first violated rule as a one-line error naming the field. One list serves both.
"""
from __future__ import annotations

from typing import Callable, Mapping, NamedTuple

import numpy as np

from ..errors import CosearchError
from . import _ops as ops
from .collectives import COLLECTIVE_CODES
from .expansion import OFFLOAD_CODES
from .memory import OP_SAC
from .moe import expert_tp, extended_rows
from .power import STATIC_POWER_SHARE
from .schedules import DUALPIPE, INTERLEAVED, ONE_F_ONE_B, SCHEDULE_CODES, ZB_H1, ZB_V, ZB_V_CHUNKS

_OFFLOAD_SETS = tuple(float(v) for v in sorted(set(OFFLOAD_CODES.values())))
_COLLECTIVES = tuple(float(v) for v in sorted(set(COLLECTIVE_CODES.values())))
_SCHEDULES = tuple(float(v) for v in sorted(set(SCHEDULE_CODES.values())))
#: Rules of this field are skipped on arrays whose schedule column is all NaN (no schedule given).
_SCHEDULE_FIELD = "plan.schedule"


def _divides(a, b, *, type=type, _F=float):
    """True where integer ``a`` divides integer ``b`` (both > 0). For integer-valued floats below
    2**53 the quotient is exact when ``a`` divides ``b``, so floor(q) == q tests it (faster than fmod;
    a plain float asks ``is_integer``, the same test without the dispatch; inf counts as whole, as floor(inf) == inf)."""
    q = b / a
    if type(q) is _F:
        return a > 0 and (q.is_integer() or q in _INFS)
    return (a > 0) & (q == ops.floor(q))


def _is_int(x, *, type=type, _F=float):
    if type(x) is _F:
        return x.is_integer() or x in _INFS
    return x == ops.floor(x)


_INFS = (float("inf"), float("-inf"))


class Rule(NamedTuple):
    field: str
    ok: Callable[[Mapping[str, np.ndarray]], np.ndarray]
    message: str  # formatted with the scalar columns


#: In order: the first violated rule is the one reported, so a rule naming a root cause (tp must
#: divide the heads) comes before one that merely follows from it (gpus = tp*pp*dp*cp, when dp is
#: derived from the GPU count and fails to be an integer because tp is 7).
RULES: tuple[Rule, ...] = (
    Rule("model", lambda c: (c["layers"] >= 1) & (c["hidden"] >= 1) & (c["heads"] >= 1) & (c["kv_heads"] >= 1)
         & (c["ffn_hidden"] >= 1) & (c["vocab"] >= 1) & (c["seq_len"] >= 1),
         "layers, hidden, heads, kv_heads, ffn_hidden, vocab and seq_len must be positive integers"),
    Rule("model.heads", lambda c: _divides(c["heads"], c["hidden"]),
         "heads ({heads:.0f}) must divide hidden ({hidden:.0f})"),
    Rule("model.kv_heads", lambda c: _divides(c["kv_heads"], c["heads"]),
         "kv_heads ({kv_heads:.0f}) must divide heads ({heads:.0f})"),
    Rule("training.global_batch", lambda c: (c["global_batch"] >= 1) & _is_int(c["global_batch"]),
         "global_batch must be a positive integer"),
    Rule("cluster.gpus", lambda c: (c["gpus"] >= 1) & _is_int(c["gpus"]), "gpus must be a positive integer"),
    Rule("plan", lambda c: (c["tp"] >= 1) & (c["pp"] >= 1) & (c["cp"] >= 1) & (c["microbatch"] >= 1)
         & (c["interleave"] >= 1) & _is_int(c["tp"]) & _is_int(c["pp"]) & _is_int(c["cp"])
         & _is_int(c["microbatch"]) & _is_int(c["interleave"]),
         "tp, pp, cp, microbatch and interleave must be positive integers"),
    Rule("plan.tp", lambda c: _divides(c["tp"], c["heads"]), "tp ({tp:.0f}) must divide model.heads ({heads:.0f})"),
    Rule("plan.tp", lambda c: _divides(c["tp"], c["kv_heads"]) | _divides(c["kv_heads"], c["tp"]),
         "tp ({tp:.0f}) must divide model.kv_heads ({kv_heads:.0f}) or be a multiple of it"),
    Rule("plan.tp", lambda c: _divides(c["tp"], c["ffn_hidden"]), "tp ({tp:.0f}) must divide model.ffn_hidden ({ffn_hidden:.0f})"),
    # the extended layer (model.moe: experts, MLA or an explicit head_dim) prices fused attention only (a dense rule:
    # MLA and head_dim models without experts take that layer too, and MOE_RULES skip them)
    Rule("training.attention", lambda c: (c["attention"] != 1.0) | ops.logical_not(extended_rows(c)),
         "standard (unfused) attention is not modelled for models with experts, MLA or head_dim "
         "(allowed there: flash, triton, flash2)"),
    Rule("plan.recompute", lambda c: (c["recompute"] != OP_SAC) | ops.logical_not(extended_rows(c)),
         "recompute op (torchtitan's per-op SAC) is modelled for dense layers only, not for models with experts, "
         "MLA or head_dim (allowed there: none, selective, full)"),
    # the embedding and the loss may each take a (virtual) stage of their own: Megatron-LM's
    # account_for_embedding/loss_in_pipeline_split (Megatron-Bridge's Llama 3.1 405B recipe: 126 layers on
    # PP 16 x VP 8 = 128 stages; Qwen3-235B-A22B: 94 layers on PP 32 x VP 3); memory.stage_layers splits so
    Rule("plan.pp", lambda c: c["pp"] * c["interleave"] <= c["layers"] + ops.where(c["pp"] > 1, 2.0, 0.0),
         "pp*interleave ({pp:.0f}*{interleave:.0f}) must not exceed model.layers ({layers:.0f}) + 2 "
         "(the embedding's and the loss's stages)"),
    Rule("plan.cp", lambda c: _divides(c["cp"], c["seq_len"]), "cp ({cp:.0f}) must divide model.seq_len ({seq_len:.0f})"),
    Rule("plan.dp", lambda c: (c["dp"] >= 1) & _is_int(c["dp"]) & (c["dp"] * c["tp"] * c["pp"] * c["cp"] == c["gpus"]),
         "gpus ({gpus:.0f}) must equal tp*pp*dp*cp ({tp:.0f}*{pp:.0f}*{dp:g}*{cp:.0f})"),
    Rule("plan.cp", lambda c: (c["cp"] == 1) | (c["attention"] == 0) | (c["attention"] == 3),
         "context parallelism (cp > 1) needs training.attention: flash or flash2"),
    Rule("plan.microbatch", lambda c: _divides(c["dp"] * c["microbatch"], c["global_batch"]),
         "training.global_batch ({global_batch:.0f}) must be divisible by dp*microbatch ({dp:g}*{microbatch:.0f})"),
    Rule("plan.interleave", lambda c: (c["interleave"] == 1) | ((c["pp"] > 1) & _divides(
        c["pp"], c["global_batch"] / ops.maximum(c["dp"] * c["microbatch"], 1.0))),
         "interleave > 1 needs pp > 1 and a micro-batch count divisible by pp"),
    Rule("plan.zero", lambda c: ops.isin(c["zero"], (0.0, 1.0, 2.0, 3.0)), "zero must be 0, 1, 2 or 3"),
    Rule("plan.zero_group", lambda c: ops.isnan(c["zero_group"]) | _divides(c["zero_group"], c["dp"]),
         "zero_group ({zero_group:g}) must divide dp ({dp:g})"),
    Rule("training.precision", lambda c: ops.isfinite(c["peak_tflops"]) & (c["peak_tflops"] > 0),
         "the GPU has no peak rate for this precision"),
    Rule("plan.offload", lambda c: ops.isin(c["offload"], _OFFLOAD_SETS), "offload must be one of " + ", ".join(OFFLOAD_CODES)),
    Rule("cluster.expansion_gbps", lambda c: (c["offload"] == 0) | (c["expansion_gbps"] > 0),
         "plan.offload needs a memory expansion tier: set cluster.expansion_gbps > 0 (and expansion_gib)"),
    Rule("plan.tp_collective", lambda c: ops.isin(c["tp_collective"], _COLLECTIVES), "unknown collective algorithm code"),
    Rule("plan.dp_collective", lambda c: ops.isin(c["dp_collective"], _COLLECTIVES), "unknown collective algorithm code"),
    Rule("plan.burst", lambda c: (c["burst"] != 1.0) | (c["pp"] == 1),
         "burst parallelism varies the data-parallel width per block and needs pp = 1 (got pp {pp:.0f})"),
    Rule("cluster.power_limit_w", lambda c: ops.isnan(c["power_limit_w"]) | (
        c["power_limit_w"] > STATIC_POWER_SHARE * c["power_w"]),
         f"power_limit_w ({{power_limit_w:g}} W) must exceed {STATIC_POWER_SHARE:.3f} x power_w ({{power_w:g}} W), "
         "what the GPU draws before its clock (cosearch.model.power)"),
    Rule("cluster.oversubscription", lambda c: c["oversubscription"] >= 1.0,
         "oversubscription must be >= 1 (1 = full bisection), got {oversubscription:g}"),
    # pipeline schedules (cosearch.model.schedules); NaN = 1F1B, interleaved when interleave > 1
    Rule(_SCHEDULE_FIELD, lambda c: ops.isnan(c["schedule"]) | ops.isin(c["schedule"], _SCHEDULES),
         "schedule must be one of " + ", ".join(SCHEDULE_CODES)),
    Rule(_SCHEDULE_FIELD, lambda c: (c["schedule"] != ONE_F_ONE_B) | (c["interleave"] == 1),
         "1f1b runs one model chunk per rank; interleave {interleave:.0f} needs schedule interleaved"),
    Rule(_SCHEDULE_FIELD, lambda c: (c["schedule"] != INTERLEAVED) | (c["interleave"] > 1),
         "interleaved needs interleave > 1 (virtual pipeline stages per rank)"),
    Rule(_SCHEDULE_FIELD, lambda c: (c["schedule"] != ZB_H1) | (c["interleave"] == 1),
         "zb-h1 runs one model chunk per rank (set interleave 1; zb-v is the two-chunk zero-bubble schedule)"),
    Rule(_SCHEDULE_FIELD, lambda c: (c["schedule"] != ZB_V) | (c["interleave"] == ZB_V_CHUNKS),
         "zb-v runs exactly 2 model chunks per rank (Qi et al. 2024, sec. 6): set interleave 2"),
    Rule(_SCHEDULE_FIELD, lambda c: (c["schedule"] != DUALPIPE) | _dualpipe_ok(c),
         "dualpipe needs interleave 1, an even pp and an even micro-batch count global_batch/(dp*microbatch) "
         ">= 2*pp (deepseek-ai/DualPipe step()); got pp {pp:.0f}, interleave {interleave:.0f}, "
         "{global_batch:.0f}/({dp:g}*{microbatch:.0f})"),
)


def _etp(c):
    return expert_tp(c["etp"], c["tp"])


#: Mixture-of-experts rules (issue 13, cosearch.model.moe), checked only when some row has experts,
#: ep > 1, an explicit etp or a capacity factor. Megatron-Core (core_r0.14 arguments.py and
#: parallel_state.initialize_model_parallel): num_experts % ep == 0; etp * ep * pp divides the world,
#: i.e. etp * ep divides tp * cp * dp (with etp = tp: ep divides dp * cp); sequence parallelism is
#: required when ep > 1 and tp > 1.
MOE_RULES: tuple[Rule, ...] = (
    Rule("model.experts", lambda c: (c["experts"] >= 0) & _is_int(c["experts"]) & ((c["experts"] == 0) | (
        (c["top_k"] >= 1) & (c["top_k"] <= c["experts"]) & _is_int(c["top_k"]))),
         "experts must be a non-negative integer and 1 <= top_k <= experts (got {experts:g}, {top_k:g})"),
    Rule("plan.ep", lambda c: (c["ep"] >= 1) & _is_int(c["ep"]) & ((c["ep"] == 1) | (c["experts"] > 0)),
         "ep ({ep:g}) must be a positive integer, and ep > 1 needs model.experts"),
    Rule("plan.ep", lambda c: (c["experts"] == 0) | _divides(c["ep"], c["experts"]),
         "ep ({ep:g}) must divide model.experts ({experts:g})"),
    Rule("plan.etp", lambda c: ops.isnan(c["etp"]) | ((c["etp"] >= 1) & _is_int(c["etp"])),
         "etp must be a positive integer (got {etp:g})"),
    Rule("plan.etp", lambda c: (c["experts"] == 0) | _divides(_etp(c), ops.where(
        ops.isnan(c["expert_ffn_hidden"]), c["ffn_hidden"], c["expert_ffn_hidden"])),
         "etp must divide model.expert_ffn_hidden"),
    Rule("plan.ep", lambda c: _divides(c["ep"] * _etp(c), c["tp"] * c["cp"] * c["dp"]),
         "ep*etp ({ep:g}*{etp_used:g}) must divide tp*cp*dp ({tp:.0f}*{cp:.0f}*{dp:g}) (Megatron-Core: with etp = tp, ep divides dp*cp)"),
    Rule("plan.sequence_parallel", lambda c: (c["ep"] == 1) | (c["tp"] == 1) | (c["sequence_parallel"] > 0),
         "ep > 1 with tp > 1 needs sequence_parallel: true (Megatron-Core)"),
    Rule("plan.capacity_factor", lambda c: ops.isnan(c["capacity_factor"]) | (c["capacity_factor"] > 0),
         "capacity_factor must be > 0 (or none: dropless)"),
    Rule("plan.burst", lambda c: (c["experts"] == 0) | (c["burst"] != 1.0),
         "DeepPool burst parallelism with experts is not modelled (allowed: false)"),
)
DENSE_RULES = RULES
RULES = DENSE_RULES + MOE_RULES


def _moe_rules_apply(cols) -> bool:
    return (ops.any(cols["experts"] != 0) or ops.any(cols["ep"] != 1) or not ops.all(ops.isnan(cols["etp"]))
            or not ops.all(ops.isnan(cols["capacity_factor"])))


def _rules(cols) -> tuple[Rule, ...]:
    return RULES if _moe_rules_apply(cols) else DENSE_RULES


def _dualpipe_ok(c):
    """DualPipe.step() asserts num_ranks % 2 == 0, num_chunks % 2 == 0 and num_chunks >= 2*num_ranks
    (deepseek-ai/DualPipe dualpipe/dualpipe.py); each rank holds one chunk per direction (interleave 1)."""
    m = c["global_batch"] / ops.maximum(c["dp"] * c["microbatch"], 1.0)
    return (c["interleave"] == 1) & _divides(2.0, c["pp"]) & _divides(2.0, m) & (m >= 2.0 * c["pp"])


#: Columns that must be positive and finite: no GPU computes, holds or moves data at a rate or size of 0 or less.
_POSITIVE = ("peak_tflops", "matmul_efficiency", "hbm_gib", "hbm_tbps", "nvlink_gbps", "gpus", "global_batch")
#: Columns that may be 0 (no network, a free cluster) but never negative or infinite; NaN = not given.
_NON_NEGATIVE = ("network_gbps", "price_usd_per_gpu_hour", "tokens")


def _column_ok(x: np.ndarray, positive: bool) -> np.ndarray | bool:
    """True, or the rows where column ``x`` is in range; two reductions decide the common all-good case."""
    if positive:
        if x.min() > 0 and x.max() < np.inf:  # NaN fails the first test: the per-row test below
            return True
        return (x > 0) & (x < np.inf)
    if not np.fmin.reduce(x, axis=None) < 0 and np.fmax.reduce(x, axis=None) != np.inf:  # NaN ignored
        return True
    return ~(x < 0) & (x != np.inf)


def physical_mask(cols: Mapping[str, np.ndarray]) -> np.ndarray | bool:
    """True where a row's hardware and job columns are physical (finite, positive rates, capacity, GPU count and
    batch; no negative price or token budget). A Scenario is range-checked before it becomes columns; raw columns
    given to :func:`cosearch.model.evaluate` are not, and a negative bandwidth would otherwise give a faster step,
    a negative price a negative cost (a non-positive or infinite step is refused by the caller)."""
    ok = True
    with np.errstate(invalid="ignore"):
        for keys, positive in ((_POSITIVE, True), (_NON_NEGATIVE, False)):
            for k in keys:
                ok = ok & _column_ok(np.asarray(cols[k]), positive)
    return ok


def valid_mask(cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """True where a configuration satisfies every rule (a plain bool for plain-float columns)."""
    if ops.is_scalar(cols["gpus"]):
        try:
            for rule in _rules(cols):
                if not rule.ok(cols):
                    return False
            return True
        except (ArithmeticError, ValueError):  # Python floats divided by zero: decide on 0-d arrays
            return bool(valid_mask({k: np.asarray(v, dtype=float) for k, v in cols.items()}))
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = np.ones(np.shape(cols["gpus"]), dtype=bool)
        no_schedule = bool(np.isnan(cols["schedule"]).all())
        for rule in _rules(cols):
            if no_schedule and rule.field == _SCHEDULE_FIELD:
                continue
            ok &= rule.ok(cols)
    return ok


def _message_values(values: dict[str, float]) -> dict[str, float]:
    """A failed row's columns for its rule's message, with the values the rules derive (the expert TP in use)."""
    if "etp" in values and "tp" in values:
        values["etp_used"] = float(expert_tp(values["etp"], values["tp"]))
    return values


def check_scalar(cols: Mapping[str, np.ndarray]) -> None:
    """Raise :class:`CosearchError` for the first rule a single configuration violates.

    ``cols``: plain floats (:func:`cosearch.model.columns.scalar_columns`) or arrays of one element."""
    if ops.is_scalar(cols["gpus"]):
        try:
            failed = next((rule for rule in _rules(cols) if not rule.ok(cols)), None)
        except (ArithmeticError, ValueError):  # Python floats divided by zero: decide on 0-d arrays
            return check_scalar({k: np.asarray(v, dtype=float) for k, v in cols.items()})
        if failed is not None:
            raise CosearchError(failed.field, failed.message.format(**_message_values({k: float(v) for k, v in cols.items()})))
        return
    with np.errstate(invalid="ignore", divide="ignore"):
        for rule in _rules(cols):
            if not bool(ops.all(rule.ok(cols))):
                values = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in cols.items()}
                raise CosearchError(rule.field, rule.message.format(**_message_values(values)))
