"""A torchtitan job TOML (``torchtitan/train.py --job.config_file``).

Follows **torchtitan v0.1.0** ``torchtitan/config/job_config.py``:
``[parallelism]`` ``data_parallel_replicate_degree``, ``data_parallel_shard_degree``,
``fsdp_reshard_after_forward`` (``"default"``/``"never"``), ``tensor_parallel_degree``,
``enable_async_tensor_parallel`` (plan.tp_comm_overlap with tp_overlap_passes forward: async TP hides
the forward's collectives only), ``pipeline_parallel_degree``, ``pipeline_parallel_schedule``
(``1F1B`` / ``Interleaved1F1B`` / ``ZBVZeroBubble`` for plan.schedule zb-v; the names of PyTorch's
``torch.distributed.pipelining.schedules.get_schedule_class``: 1F1B, Interleaved1F1B, GPipe,
LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV), ``pipeline_parallel_layers_per_stage``,
``pipeline_parallel_microbatch_size``, ``context_parallel_degree``; ``[training]``
``local_batch_size``, ``global_batch_size``, ``seq_len``, ``steps``, ``mixed_precision_param``, ``compile``
(training.fusion fused, else eager); ``[activation_checkpoint] mode`` (``none``/``selective``/``full``; plan.recompute op is ``selective`` with
``selective_ac_option = "op"``, per-op SAC, and Megatron's selective is refused; full is
``plan.recompute_early_stop``: PyTorch's non-reentrant checkpoint stops the recompute early);
``[model] converters = ["float8"]`` with ``[float8]`` for fp8 (``enable_fsdp_float8_all_gather``:
``plan.fp8_param_gather``, below). Later trees' ``[compile]`` table (``enable``,
``components`` "model"/"loss", ``backend`` inductor) is read in place of ``[training] compile``.

The export writes either layout (:data:`LAYOUTS`; ``cosearch export --format torchtitan --torchtitan-version 0.1|0.2``).
0.1, the default, is v0.1.0's above, the file this export has always written, which v0.2's config manager refuses
(``[training] compile`` is no v0.2 field). 0.2 is **v0.2.0 to v0.2.2**'s (every key it writes is a field in all three
wheels' dataclasses, below): ``[compile] enable = true`` with ``components`` the parts the plan fuses (``"model"``
for training.fusion, ``"loss"`` for training.cross_entropy; v0.1.0's one switch compiles both, so it refuses the two
apart), else ``enable = false``; fp8 as ``[model] converters = ["quantize.linear.float8"]`` with
``[quantize.linear.float8] enable_fsdp_float8_all_gather`` (``plan.fp8_param_gather``, as v0.1.0's ``[float8]``);
``[training] dtype = "bfloat16"`` for ``training.optimizer_states: bf16`` (v0.1.0 has no pure-bf16 training and
refuses it; bf16_moments and bf16_master neither layout expresses); ``[activation_checkpoint] early_stop`` =
``plan.recompute_early_stop`` under full recompute (v0.2's default is false; v0.1.0 runs PyTorch's early stop and
refuses false), refused false where torch.compile compiles the model (its partitioner recomputes only what the
backward reads, as the import reads it); and v0.2's pipeline split (below). Every exported TOML of either layout reads
back through :func:`parse_toml` to the plan exported.

fp8 weights (``plan.fp8_param_gather``, both ways; :func:`_fp8_all_gather`): under fp8 both layouts write
``enable_fsdp_float8_all_gather`` = the plan's value in the converter's table (``[float8]``, v0.2's
``[quantize.linear.float8]``), and the import reads it from the table of the converter the TOML names. torchtitan
v0.1.0 to v0.2.2 (torchtitan/components/quantization/float8.py of the three wheels) turns torchao's float8 FSDP
all-gather on only for tensorwise scaling without ``recipe_name`` and only where ``data_parallel_shard_degree`` > 1
(``parallel_dims.dp_shard_enabled and enable_fsdp_float8_all_gather``; FSDP2 over the context-parallel ranks alone
does not count), and asserts against it with a ``recipe_name``. The import mirrors that: true where the float8
converter is on and the shard degree > 1; a true key without an fp8 converter (its table is not read) or with shard
degree 1 (logged) is ignored, as torchtitan ignores it, and reads as false; with ``recipe_name`` it is refused, as
torchtitan refuses it, and so it is for a sharded mixture of experts (torchao gathers the experts' grouped-GEMM
weights in bf16, Float8Linear's only in fp8; cosearch holds every weight in one precision). The export refuses
``fp8_param_gather`` where the shard degree it writes is 1 (FSDP2 over cp only): torchtitan would gather 16-bit
weights.

The import reads v0.1.0 and **torchtitan v0.2.0 to v0.2.2**, the last releases that take
a job TOML (v0.3.0 configures jobs with Python config registries, ``--module``/``--config``). Their additions to the
tables read: fp8 is ``converters = ["quantize.linear.float8"]`` (``[quantize.linear.float8]`` replaced ``[float8]``;
``quantize.grouped_mm.float8`` the experts' grouped GEMMs); ``[training] dtype = "bfloat16"`` (weights, gradients
and Adam's states in bf16, no fp32 master) is ``training.optimizer_states: bf16``; ``[activation_checkpoint]
early_stop`` (v0.2 passes it to the checkpoint wrapper, default false, where v0.1.0 ran PyTorch's default, early
stop) decides ``plan.recompute_early_stop`` for full recompute, unless torch.compile compiles the model (its
partitioner recomputes only what the backward reads); absent, a TOML naming anything v0.1.0 lacks gets v0.2's
default. Refused, as the model cannot express them: ``mode = "memory_budget"`` (the compiler's activation budget),
under pipelining an explicit split (``module_fqns_per_model_part``, and v0.1.0's ``pipeline_parallel_split_points``)
or a ``pipeline_parallel_first/last_stage_less_layers`` weight above 1 (more than one layer off an end stage; 0 and 1
count in the split, below), MX
converters (``quantize.*.mx``) and, for a mixture of experts, fp8 on the dense layers or on the experts only. The
other new keys leave the estimate as it is and are accepted (``_KEYS_LATER`` says why); the new tables
``[quantize]`` and ``[debug]``, like ``[float8]``, are not read beyond the float8 converter's
``enable_fsdp_float8_all_gather`` and ``recipe_name`` (above) and v0.1.0-era ``moe_fqns_prototype``.

Names are checked as torchtitan checks them (its config manager refuses a field its dataclasses lack): in the
tables read (``_KEYS``: those above and the keys of them that leave the estimate as it is, of v0.1.0 and v0.2), an
unknown key is a one-line error naming it and the closest known key; a table that is a near miss of a torchtitan one
(``[paralelism]``, ``[quantise]``) is refused too. Other tables (a ``custom_args_module``'s) are not read. Refused as
well, where skipping them would misestimate: a pipelined ``pipeline_parallel_schedule`` other than the three mapped
ones (matched without case, as PyTorch does), converters other than float8 (mx), ``enable_cpu_offload = true``
and, for a mixture-of-experts model, ``expert_parallel_degree`` > 1.

Names checked (issue 15) against pytorch/torchtitan torchtitan/config/job_config.py
@000204a4a8bf3d0f31adc44fc29855fbb6ea13d8 (the version the code search stores): ``Parallelism``
has every ``[parallelism]`` name above, ``fsdp_reshard_after_forward`` being
``Literal["default", "always", "never"]`` (``"always"`` reads back as zero 3); ``Training`` has
``local_batch_size``, ``global_batch_size``, ``seq_len``, ``steps``, ``mixed_precision_param``
(``"bfloat16"``/``"float32"``); ``ActivationCheckpoint.mode`` is ``Literal["selective", "full",
"none"]`` with ``selective_ac_option`` (``'int'`` or ``'op'``); ``Model.converters`` is a list and
``JobConfig.float8`` a ``Float8`` section with ``enable_fsdp_float8_all_gather`` and ``recipe_name``. That version
has no ``[quantize]`` section (fp8 is ``[float8]``, MX is ``[mx]``). The v0.2 names were checked against
torchtitan/config/job_config.py of the torchtitan 0.2.2 wheel on PyPI (torchtitan-0.2.2-py3-none-any.whl, sha256
c95ccaaa89238085ed7d3d4befb20a298cc3fcc666b9573a1f5ba92ec8c3ca60; the 0.2.0 and 0.2.1 wheels' tables read hold a
subset of those keys, plus v0.1.0's ``seed``, ``deterministic`` and ``enable_compiled_autograd`` and 0.2.0's
``debug_moe_force_load_balance``, which 0.2.1 moved to ``[debug]``), whose config manager (``_dict_to_dataclass``)
refuses unknown fields, its converter registry (``quantize.linear.float8``, ``quantize.grouped_mm.float8``,
``quantize.linear.mx``, ``quantize.grouped_mm.mx``), distributed/activation_checkpoint.py (``early_stop``) and
distributed/pipeline_parallel.py (the stage weights), and against a real v0.2 TOML, pytorch/torchtitan
torchtitan/models/llama3/train_configs/llama3_8b_varlen.toml @7201df9ff3611dd7238d06758b975f643f5ef305
(tests/test_torchtitan_v02.py). torchtitan 0.3.0's torchtitan/config/manager.py takes ``--module``/``--config``
only, so the trees after v0.2.2 (torchtitan/config/configs.py, config/transform/quantization.py) have no job TOML
to read.

Pipeline split (both ways; :func:`split_layers`, :func:`_misfit`): torchtitan counts the embedding and the output
as a layer each, so ``pipeline_parallel_layers_per_stage`` = n makes (layers + 2) / n stages, not layers / n.
torchtitan 0.1.0 (wheel torchtitan-0.1.0-py3-none-any.whl, sha256
570d7f28652c779a13e7e6e420fc284b73f03fd007cefdc7cce87045e1125ac7), torchtitan/distributed/pipeline.py
``generate_split_points`` (called by torchtitan/models/llama3/infra/pipeline.py with input_weight = output_weight =
1): with n it asserts (layers + 2) % pp == 0 and ((layers + 2) / pp) % n == 0, stages per rank = (layers + 2) /
(pp x n), 1 for a single-stage schedule (1F1B), >= 2 for a multi-stage one; without n, 1 or 2 stages per rank and
(layers + 2) // stages effective layers a stage, the remainder one each to the first stages; the first stage's
transformer layers are its effective count less 1 (the embedding), the last's less 1 (the output);
``stage_ids_this_rank`` puts stage s on rank s mod pp (looped), or under ZBVZeroBubble stages r and 2pp-1-r on rank
r, asserting exactly 2 per rank. torchtitan 0.2.0 to 0.2.2 (the three wheels' split code is the same; 0.2.2 sha256
below), torchtitan/distributed/pipeline_parallel.py ``pipeline_llm``: stages = ceil((layers + first + last) / n)
(``first``/``last``: ``pipeline_parallel_first/last_stage_less_layers``, default 1), a ValueError unless a multiple
of pp, and the same per-rank rules and default; ``generate_llm_fqn_per_model_part`` splits as v0.1.0 does,
``pipeline_module_split`` places as ``stage_ids_this_rank``. v0.2's values are a superset of v0.1.0's (an exact
fit gives the same stages and split), so the import takes v0.2's rule. The export writes n = (layers + 2) / (pp x
interleave) where that is whole (both versions), leaves n out where torchtitan's default stages per rank are the
plan's interleave, and refuses the rest (plan.interleave, or plan.pp with a value that exports); the v0.2 layout writes
v0.2's values too (:func:`_split_keys`): else the least n with ceil((layers + 2) / n) = pp x interleave, and where the
default weights fit no n, ``pipeline_parallel_first/last_stage_less_layers`` 0 (32 layers on pp 4, 1F1B: v0.1.0's 8,
9, 8, 7 is refused, v0.2 writes both weights 0 and n = 8, 8 layers a rank; 30 layers on pp 2 x interleave 3: 32 on 6
stages is no whole n, v0.2 writes n = 6, ceil(32 / 6) = 6 stages of 5, 6, 5, 5, 5, 4 layers, 15 a rank); both directions
refuse a split that puts more layers on a rank than the model evaluates there
(:func:`cosearch.model.memory.stage_layers`) or none at its fullest count (Megatron's rule), with a one-line error
naming the values that fit. 80 layers on pp 4 x interleave 5 are 82 effective, not a multiple of 20: refused
(v0.1.0 asserts, v0.2 makes 21 stages for 4 ranks); 30 layers on pp 4 export n = 8 (7, 8, 8, 7 layers).

Mapping of the data-parallel sharding: zero 0 -> DDP (replicate = dp); zero 2 -> FSDP2 with
``fsdp_reshard_after_forward = "never"`` (parameters stay gathered between forward and backward);
zero 3 -> FSDP2 (reshard after forward; ``plan.fsdp_overlap`` 1, as FSDP2 prefetches, both ways);
``zero_group`` -> HSDP (shard = zero_group, replicate = dp / zero_group). Under pipeline parallelism
FSDP2 is zero 1 both ways: PyTorch's pipelining keeps a stage's parameters and gradients whole until
its last micro-batch (:func:`cosearch._cells.pipelined_zero`), so zero 1 exports as FSDP2 and zero 2
or 3 is refused. torchtitan folds cp into the FSDP2 mesh (``dp_shard_cp``, FSDP on whenever
``data_parallel_shard_degree`` x ``context_parallel_degree`` > 1), as the model's default sharding group
dp x cp: a TOML reads back as sharded when shard x cp > 1, zero 0 with cp > 1 is refused, and so is
``zero_group`` with cp > 1 (an HSDP group would hold cp ranks; the model's holds data-parallel ranks).
Batches: without pipeline parallelism ``local_batch_size`` is the micro-batch and torchtitan
accumulates ``global / (local x dp)`` steps; with it ``local_batch_size`` is the per-replica batch
and ``pipeline_parallel_microbatch_size`` the micro-batch.

Refused: zero 1 without pipelining (torchtitan has no optimizer-only sharding), zero 2 or 3 with
it, fp16 (torchtitan trains in bf16 or fp32), tensor parallelism without sequence parallelism
(torchtitan's TP always shards norms over the sequence), attention other than flash or flash2 (torchtitan runs
PyTorch SDPA: cuDNN's fused kernel from PyTorch 2.11 on Hopper/Blackwell, FlashAttention-2 before;
:func:`cosearch._cells.sdpa_attention`; the export's header names the PyTorch its estimate assumes, and the
import takes ``torch_version``), ``plan.overlap_grad_reduce: false`` (FSDP2 and DDP always overlap), dropout,
offload, schedule zb-h1 (PyTorch's zero-bubble schedules are multi-stage: InterleavedZeroBubble,
ZBVZeroBubble) and dualpipe (PyTorch has DualPipeV, the V-shaped
variant with one parameter copy, not DualPipe's two). The model architecture is torchtitan's
``[model] name/flavor``, not a TOML shape: the export states the shape in a comment.
"""
from __future__ import annotations

import logging
from difflib import get_close_matches
from typing import Any, Mapping

from .. import hf
from .._cells import SDPA_CUDNN_FROM, pipelined_zero, sdpa_attention, tp_overlap_passes
from ..errors import CosearchError
from ..presets import preset
from ..scenario import MAX_COUNT, MAX_LAYERS, Scenario, parse_scenario
from ..model.schedules import schedule_name
from ._common import fsdp_overlap, layout, model_stages, refuse, shard_group, train_steps, zero3_overlap
from .planin import cluster_gpus, whole

#: ``cosearch export --torchtitan-version`` value -> the releases whose job TOML layout the export writes.
LAYOUTS = {"0.1": "torchtitan v0.1.0", "0.2": "torchtitan v0.2.0 to v0.2.2"}
VERSION = LAYOUTS["0.1"]  # the export's default layout ([training] compile, [float8])
#: The releases whose job TOML the import reads (v0.3.0 replaced the TOML with Python config registries).
READS = "torchtitan v0.1.0 to v0.2.2"
#: cosearch schedule -> torchtitan ``pipeline_parallel_schedule``
_SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "zb-v": "ZBVZeroBubble"}
_log = logging.getLogger(__name__)


def layout_version(version: str) -> str:
    """``version`` when it names a layout the export writes (:data:`LAYOUTS`), else a one-line error naming
    ``--torchtitan-version`` and the allowed values."""
    if version not in LAYOUTS:
        raise CosearchError("--torchtitan-version", f"unknown torchtitan layout {version!r}; allowed: "
                            + ", ".join(f"{v} ({name})" for v, name in LAYOUTS.items()))
    return version


# ----------------------------------------------------------------------------------- the pipeline split
#: Field of the stage split in the job TOML.
_LPS = "parallelism.pipeline_parallel_layers_per_stage"
#: Stages per rank searched for a split that fits (far beyond any interleave a plan runs).
_MOST_PER_RANK = 128


def _default_per_rank(schedule: str) -> int:
    """torchtitan's stages per pipeline rank without ``pipeline_parallel_layers_per_stage``: 1 for a single-stage
    schedule (1F1B), 2 for a multi-stage one (Interleaved1F1B, ZBVZeroBubble)."""
    return 1 if schedule == "1f1b" else 2


def split_layers(layers: int, stages: int, first: int = 1, last: int = 1) -> list[int]:
    """Transformer layers on each of ``stages`` (>= 2, at most layers + first + last) pipeline stages as torchtitan
    splits them: the embedding counts as ``first`` layers and the output as ``last`` (v0.1.0: 1 each; v0.2:
    ``pipeline_parallel_first/last_stage_less_layers``, default 1); the layers + first + last effective layers are
    shared evenly, the remainder one more each on the first stages (v0.1.0 ``generate_split_points``, v0.2
    ``generate_llm_fqn_per_model_part``). 30 layers on 4 stages: 7, 8, 8, 7."""
    per, extra = divmod(layers + first + last, stages)
    counts = [per + (i < extra) for i in range(stages)]
    counts[0] -= first
    counts[-1] -= last
    return counts


def _rank_layers(counts: list[int], pp: int, zbv: bool) -> list[int]:
    """Transformer layers per pipeline rank: a looped schedule puts stage s on rank s mod pp, ZBVZeroBubble's V
    stages r and 2pp-1-r on rank r (v0.1.0 ``stage_ids_this_rank``, v0.2 ``pipeline_module_split``)."""
    if zbv:
        return [counts[r] + counts[-1 - r] for r in range(pp)]
    return [sum(counts[r::pp]) for r in range(pp)]


def _misfit(layers: int, pp: int, per_rank: int, zbv: bool, counts: list[int]) -> str | None:
    """Why torchtitan's split ``counts`` is not the one cosearch evaluates, or None. The model evaluates the fullest
    rank at ceil(layers / (pp x v)) x v layers and the first and the last a layer fewer where the split is uneven
    (:func:`cosearch.model.memory.stage_layers`; under ZB-V rank 0 holds both ends,
    :func:`cosearch.model.schedules.paced_stage_s`). Refused, as Megatron's split is (:func:`.megatron.stage_split`):
    a rank holding more layers than the model evaluates there (its memory and time would be under-estimated), and
    a split where no rank holds the fullest count (the model would pace the pipeline with a rank that does not
    exist)."""
    full, first, last = model_stages(layers, pp, per_rank, 0)
    want = [first + last - full] + [full] * (pp - 1) if zbv else [first] + [full] * (pp - 2) + [last]
    got = _rank_layers(counts, pp, zbv)
    for rank, (n, most) in enumerate(zip(got, want)):
        if n > most:
            return f"puts {n} layers on pipeline rank {rank}, which cosearch evaluates at {most}"
    if max(got) < full:
        return f"puts at most {max(got)} layers on a pipeline rank, and cosearch paces the pipeline with {full}"
    return None


def _refusal(layers: int, pp: int, schedule: str, lps: int, first: int = 1, last: int = 1) -> str | None:
    """Why torchtitan refuses ``pipeline_parallel_layers_per_stage = lps``, or None. v0.2 (``pipeline_llm``) makes
    ceil((layers + first + last) / lps) stages, a multiple of pp, 1 per rank under a single-stage schedule (1F1B),
    at least 2 under a multi-stage one, and ZBVZeroBubble's V exactly 2 (``pipeline_module_split``). v0.1.0
    (``generate_split_points``) asserts the same with exact division, a subset of v0.2's values split the same way."""
    eff = layers + first + last
    stages = -(-eff // lps)
    got = f"ceil(({layers} layers + {first + last}) / {lps}) = {stages} stages"
    if stages % pp:
        return f"torchtitan makes {got}, not a multiple of pipeline_parallel_degree {pp}"
    per_rank = stages // pp
    if schedule == "1f1b" and per_rank != 1:
        return f"torchtitan makes {got}, {per_rank} per rank; 1F1B (a single-stage schedule) runs 1"
    if schedule != "1f1b" and per_rank < 2:
        return f"torchtitan makes {got}, 1 per rank; {_SCHEDULES[schedule]} (multi-stage) needs at least 2"
    if schedule == "zb-v" and per_rank != 2:
        return f"torchtitan makes {got}, {per_rank} per rank; ZBVZeroBubble's V places exactly 2"
    return None


def _fitting(layers: int, pp: int, schedule: str, first: int = 1, last: int = 1) -> list[tuple[int, int, int]]:
    """(stages per rank, least, most layers_per_stage) of every split torchtitan derives at this pp and schedule
    that the model evaluates (:func:`_misfit`): v0.2 splits the same for every layers_per_stage giving the same
    stage count (:func:`split_layers` depends on the count only)."""
    eff = layers + first + last
    ranks = {"1f1b": (1,), "zb-v": (2,)}.get(schedule, range(2, min(eff // pp, _MOST_PER_RANK) + 1))
    out = []
    for k in ranks:
        stages = pp * k
        if stages > eff or _misfit(layers, pp, k, schedule == "zb-v", split_layers(layers, stages, first, last)):
            continue
        least, most = -(-eff // stages), (-(-eff // (stages - 1)) - 1)
        if least <= most:
            out.append((k, least, most))
    return out


def _split_to_write(layers: int, pp: int, v: int, schedule: str, first: int = 1, last: int = 1,
                    ceil: bool = False) -> tuple[int | None, str]:
    """(``pipeline_parallel_layers_per_stage`` to write, 0 to leave it out: torchtitan's default split; None where
    no split torchtitan derives is the model's, with the reason). The written value is (layers + 2) / (pp x v),
    which v0.1.0 and v0.2 split alike (each stage that many effective layers: the first and the last a transformer
    layer fewer). With ``ceil`` (the v0.2 layout: its rule, :func:`_refusal`, and its end weights ``first`` and
    ``last``), where that is not whole and torchtitan's default stages per rank are not v, it is the least n with
    ceil((layers + first + last) / n) = pp x v."""
    eff, stages = layers + first + last, pp * v
    n, default = -(-eff // stages), v == _default_per_rank(schedule) and stages <= eff
    whole = eff % stages == 0 or (ceil and not default and -(-eff // n) == stages)
    undivided = (f"no layers_per_stage makes ceil({eff} / layers_per_stage) = {stages} stages" if ceil else
                 f"{stages} stages do not divide them (no whole pipeline_parallel_layers_per_stage)")
    if not whole and not default:
        return None, undivided
    why = _misfit(layers, pp, v, schedule == "zb-v", split_layers(layers, stages, first, last))
    if why is None:
        return (n if whole else 0), ""
    return None, f"its split {why}" if whole else f"{undivided}, and its default split {why}"


#: The weights of the embedding and the output (``pipeline_parallel_first/last_stage_less_layers``) the v0.2 layout
#: tries, torchtitan's default first (v0.1.0 has no others); the import reads 0 and 1 (:func:`_split`).
_ENDS_V02 = ((1, 1), (0, 0), (1, 0), (0, 1))


def _split_keys(layers: int, pp: int, v: int, schedule: str, v02: bool = False) -> tuple[dict[str, int] | None, str]:
    """The split keys a layout writes for pp x v stages ({}: torchtitan's default split; None where no split
    torchtitan derives is the model's, with the reason at torchtitan's default end weights): v0.1.0's
    :func:`_split_to_write`, v0.2's with its ceil rule and, where the default weights do not fit, the first of
    :data:`_ENDS_V02` that does (written where not 1)."""
    reasons = []
    for first, last in _ENDS_V02 if v02 else _ENDS_V02[:1]:
        lps, why = _split_to_write(layers, pp, v, schedule, first, last, ceil=v02)
        if lps is not None:
            split = {"pipeline_parallel_layers_per_stage": lps} if lps else {}
            for key, weight in (("pipeline_parallel_first_stage_less_layers", first),
                                ("pipeline_parallel_last_stage_less_layers", last)):
                if weight != 1:
                    split[key] = weight
            return split, ""
        reasons.append(why)
    return None, reasons[0] + ("; nor with pipeline_parallel_first/last_stage_less_layers 0 (torchtitan v0.2)"
                               if v02 else "")


def _export_split(sc: Scenario, version: str = "0.1") -> dict[str, int]:
    """The split keys of a pipelined plan in the layout of ``version`` ({}: torchtitan's default split is the
    model's; :func:`_split_keys`), else a one-line refusal naming plan.interleave (an interleave
    that exports at this pp, under Interleaved1F1B) or plan.pp (a pp that tiles the cluster and the batch and
    exports, with this interleave, else with another or with 1F1B)."""
    m, pl, v02 = sc.model, sc.plan, version == "0.2"
    schedule = schedule_name(pl.schedule, pl.interleave)
    split, why = _split_keys(m.layers, pl.pp, pl.interleave, schedule, v02)
    if split is not None:
        return split
    head = (f"torchtitan counts the embedding and the output as a layer each, so {m.layers} layers are "
            f"{m.layers + 2} on pp x interleave = {pl.pp} x {pl.interleave}: {why}")
    interleaves = range(2, _MOST_PER_RANK + 1) if schedule == "interleaved" else ()
    ws = [w for w in interleaves if _split_keys(m.layers, pl.pp, w, schedule, v02)[0] is not None]
    if ws:
        w = min(ws, key=lambda w: (abs(w - pl.interleave), w))
        raise refuse("plan.interleave", f"interleave = {pl.interleave}: {head}; use interleave = {w}")
    pps = _export_pps(sc, pl.interleave, schedule, v02)
    if pps:
        use = f"use pp = {pps[0]}"
    else:
        other = next(((p, w) for w in interleaves for p in _export_pps(sc, w, schedule, v02)[:1]), None)
        one = _export_pps(sc, 1, "1f1b", v02)
        use = (f"use pp = {other[0]} with interleave = {other[1]}" if other else
               f"no pp fits {_SCHEDULES[schedule]} on {sc.cluster.gpus} GPUs with this batch; "
               + (f"1F1B (interleave 1) fits at pp = {one[0]}" if one else "use pp = 1"))
    raise refuse("plan.pp", f"pp = {pl.pp}: {head}; {use}")


def _export_pps(sc: Scenario, v: int, schedule: str, v02: bool) -> list[int]:
    """The pp values (> 1, nearest the plan's first) that tile the cluster (tp x pp x cp divides the GPUs) and the
    batch (micro-batch x dp divides it) and whose split with ``v`` stages per rank exports in the layout
    (:func:`_split_keys`)."""
    pl, gpus, width = sc.plan, sc.cluster.gpus, sc.plan.tp * sc.plan.cp
    pps = [p for p in range(2, min(gpus // width, sc.model.layers + 2) + 1)
           if gpus % (width * p) == 0 and sc.training.global_batch % (pl.microbatch * (gpus // (width * p))) == 0
           and _split_keys(sc.model.layers, p, v, schedule, v02)[0] is not None]
    return sorted(pps, key=lambda p: (abs(p - pl.pp), p))


def _per_rank(par: dict[str, Any], layers: int, pp: int, schedule: str, first: int, last: int) -> int:
    """Stages per pipeline rank (the plan's interleave) of a pipelined TOML, derived as torchtitan derives them:
    from ``pipeline_parallel_layers_per_stage`` (:func:`_refusal`, refused where torchtitan refuses it), else
    torchtitan's default (:func:`_default_per_rank`). Refused too where torchtitan's split (:func:`split_layers`)
    is not the one the model evaluates (:func:`_misfit`); each error is one line naming the key and the values
    that fit."""
    eff = layers + first + last
    if "pipeline_parallel_layers_per_stage" in par:
        lps = _number(par, "parallelism", "pipeline_parallel_layers_per_stage", 1)
        why = _refusal(layers, pp, schedule, lps, first, last)
        per_rank = -(-eff // lps) // pp
        given = f"{lps}"
    else:
        per_rank, why = _default_per_rank(schedule), None
        if pp * per_rank > eff:
            raise CosearchError("parallelism.pipeline_parallel_degree", f"{pp}: torchtitan's default {per_rank} "
                                f"stage(s) per rank make {pp * per_rank} stages, more than the {eff} effective layers "
                                f"({layers} + {first + last}); use at most {eff // per_rank}")
        given = f"absent (torchtitan's default: {per_rank} stage{'s' if per_rank > 1 else ''} per rank)"
    if why is None:
        misfit = _misfit(layers, pp, per_rank, schedule == "zb-v", split_layers(layers, pp * per_rank, first, last))
        if misfit is None:
            return per_rank
        why = f"torchtitan's split {misfit}"
    raise CosearchError(_LPS, f"{given}: {why}; {_fits_text(layers, pp, schedule, first, last)}")


def _fits_text(layers: int, pp: int, schedule: str, first: int, last: int) -> str:
    """The ``pipeline_parallel_layers_per_stage`` values that fit at this pp and schedule, for a refusal: v0.2's
    ranges, v0.1.0's exact values (v0.1.0 counts the embedding and the output as 1 each, no other weights), whether
    leaving it out fits, and else the v0.2 weights of the ends that make one fit."""
    eff, fits = layers + first + last, _fitting(layers, pp, schedule, first, last)
    if fits:
        text = "fits at this pp: " + ", ".join(f"{lo}" if lo == hi else f"{lo}..{hi}" for _, lo, hi in fits)
        if (first, last) == (1, 1):
            exact = [str(eff // (pp * k)) for k, _, _ in fits if eff % (pp * k) == 0]
            text += (f" (v0.1.0 takes {', '.join(exact)})" if exact else
                     " (torchtitan v0.2; v0.1.0 takes none of them: it needs (layers + 2) / layers_per_stage to be a "
                     "multiple of pp)")
        return text + (", or leave it out" if any(k == _default_per_rank(schedule) for k, _, _ in fits) else "")
    text = (f"no layers_per_stage fits at pipeline_parallel_degree {pp} with {_SCHEDULES[schedule]}, nor does "
            "leaving it out")
    for f, l in ((0, 0), (1, 0), (0, 1), (1, 1)):
        other = _fitting(layers, pp, schedule, f, l) if (f, l) != (first, last) else None
        if other:
            k, lo, hi = other[0]
            return (f"{text}; torchtitan v0.2 with pipeline_parallel_first_stage_less_layers = {f} and "
                    f"pipeline_parallel_last_stage_less_layers = {l} fits (layers_per_stage "
                    f"{lo if lo == hi else f'{lo}..{hi}'}{' or left out' if k == _default_per_rank(schedule) else ''})")
    return f"{text}; change the degree"


def sections(sc: Scenario, version: str = "0.1") -> dict[str, dict[str, Any]]:
    """The job TOML's tables in the layout of ``version`` (:data:`LAYOUTS`), or a one-line refusal naming the field
    that layout cannot express. v0.2 writes what v0.1.0 refuses: bf16 optimizer states, full recompute without
    early stop (eager), a loss compiled apart from the model, ends weighted 0 in the pipeline split."""
    v02 = layout_version(version) == "0.2"
    lay = layout(sc, "torchtitan", states=("fp32", "bf16") if v02 else None, early_stop_key=v02)
    m, t, pl = sc.model, sc.training, sc.plan
    dp = lay["dp"]
    if pl.zero == 1 and pl.pp == 1:
        raise refuse("plan.zero", "zero 1: without pipelining torchtitan has no optimizer-only sharding; use 0 (DDP), "
                     "2 or 3 (FSDP2)")
    if pl.zero >= 2 and pl.pp > 1:  # the plan would be estimated with a sharding torchtitan does not keep
        raise refuse("plan.zero", f"zero {pl.zero}: under pipelining torchtitan's FSDP2 keeps a stage's parameters and "
                     "gradients whole from its first micro-batch to its last (zero 1's memory); use 1 (FSDP2) or 0")
    if pl.zero == 0 and pl.cp > 1:  # fsdp_enabled = dp_shard > 1 or cp > 1 (ParallelDims)
        raise refuse("plan.zero", f"zero 0 with cp = {pl.cp}: torchtitan shards with FSDP2 over the data- and "
                     f"context-parallel ranks (dp_shard_cp) whenever cp > 1; use {1 if pl.pp > 1 else '2 or 3'}")
    if not pl.overlap_grad_reduce:
        raise refuse("plan.overlap_grad_reduce", "false: torchtitan's FSDP2 and DDP reduce gradients during the "
                     "backward (no setting turns it off); set true")
    if t.precision == "fp16":
        raise refuse("training.precision", "fp16: torchtitan's mixed_precision_param is bfloat16 or float32")
    if pl.tp > 1 and not pl.sequence_parallel:
        raise refuse("plan.sequence_parallel", "torchtitan's tensor parallelism always runs sequence parallel; set "
                     "sequence_parallel: true")
    if t.dropout:
        raise refuse("training.dropout", "torchtitan's models train without dropout")
    if pl.offload != "none":
        raise refuse("plan.offload", f"{pl.offload!r}: no torchtitan offload setting is mapped; use 'none'")
    if pl.tp_comm_overlap and pl.tp > 1 and t.fusion == "eager":  # the plan would be estimated with an overlap it never gets
        raise refuse("plan.tp_comm_overlap", "torchtitan's async TP (enable_async_tensor_parallel) runs only under "
                     "torch.compile; with training.fusion: eager use false, or set fusion: fused")
    # v0.1.0's compile = true compiles the loss with the model: the loss runs as the fusion does (fused | eager both
    # ways); v0.2's [compile] components name them apart
    if t.cross_entropy != t.fusion and not v02:  # the plan's memory would count a loss torchtitan does not run
        raise refuse("training.cross_entropy", f"{t.cross_entropy}: torchtitan's loss runs {t.fusion} with "
                     f"training.fusion: {t.fusion} (torch.compile compiles the loss with the model); set {t.fusion}")
    schedule = _SCHEDULES.get(schedule_name(pl.schedule, pl.interleave)) if pl.pp > 1 else None
    if pl.pp > 1 and schedule is None:
        raise refuse("plan.schedule", {
            "zb-h1": "zb-h1: PyTorch's zero-bubble schedules are multi-stage (InterleavedZeroBubble, ZBVZeroBubble); "
                     "use zb-v with interleave 2",
            "dualpipe": "dualpipe: torchtitan/PyTorch run DualPipeV (one parameter copy, V-shaped), not DualPipe's "
                        "two parameter copies"}[pl.schedule])
    if pl.recompute == "selective":
        raise refuse("plan.recompute", "torchtitan has no Megatron-style selective recompute (attention core only); "
                     "use op (its per-op SAC), none or full")
    if v02 and pl.recompute == "full" and not pl.recompute_early_stop and t.fusion == "fused":
        raise refuse("plan.recompute_early_stop", "false with training.fusion: fused: under torch.compile the "
                     "partitioner recomputes only what the backward reads, whatever early_stop says; set it true, or "
                     "set fusion: eager")
    zero3_overlap(sc, "torchtitan")
    group = shard_group(sc, dp, "torchtitan")
    par: dict[str, Any] = {}
    if pl.zero == 0:
        par.update(data_parallel_replicate_degree=dp, data_parallel_shard_degree=1)
    else:
        shard = group or dp
        par.update(data_parallel_replicate_degree=dp // shard, data_parallel_shard_degree=shard,
                   fsdp_reshard_after_forward="never" if pl.zero == 2 else "default")
    par.update(tensor_parallel_degree=pl.tp, enable_async_tensor_parallel=bool(pl.tp_comm_overlap and pl.tp > 1),
               pipeline_parallel_degree=pl.pp, context_parallel_degree=pl.cp)
    # training.fusion: torch.compile fuses the memory-bound ops (torchtitan's default is eager)
    training: dict[str, Any] = {"global_batch_size": t.global_batch, "seq_len": m.seq_len,
                                "mixed_precision_param": "bfloat16"}
    if not v02:  # v0.2 writes [compile]
        training["compile"] = t.fusion == "fused"
    elif t.optimizer_states == "bf16":  # v0.2's pure bf16: weights, gradients and Adam's states, no fp32 master
        training["dtype"] = "bfloat16"
    if pl.pp > 1:
        par["pipeline_parallel_schedule"] = schedule
        par.update(_export_split(sc, version))  # {}: torchtitan's default split is the one the model evaluates
        par["pipeline_parallel_microbatch_size"] = pl.microbatch
        training["local_batch_size"] = t.global_batch // dp
    else:
        training["local_batch_size"] = pl.microbatch
    steps = train_steps(sc)
    if steps is not None:
        training["steps"] = steps
    ac: dict[str, Any] = {"mode": "selective" if pl.recompute == "op" else pl.recompute}
    if pl.recompute == "op":
        ac["selective_ac_option"] = "op"
    if v02 and pl.recompute == "full":  # v0.2's default is false, v0.1.0 ran PyTorch's (early stop)
        ac["early_stop"] = pl.recompute_early_stop
    out = {"parallelism": par, "training": training, "activation_checkpoint": ac}
    if v02:
        parts = [part for part, on in (("model", t.fusion), ("loss", t.cross_entropy)) if on == "fused"]
        out["compile"] = {"enable": True, "components": parts} if parts else {"enable": False}
    if pl.fp8_param_gather and par["data_parallel_shard_degree"] == 1:  # fp8 with zero >= 1 (parse_scenario)
        raise refuse("plan.fp8_param_gather", f"true with a data_parallel_shard_degree of 1 (FSDP2 over the cp = "
                     f"{pl.cp} ranks only): torchtitan turns the float8 FSDP all-gather on only where the shard "
                     "degree is > 1 (parallel_dims.dp_shard_enabled) and would gather 16-bit weights; set false")
    if t.precision == "fp8":  # the plan's fp8 weights: FSDP2 gathers them in fp8 (torchao's float8 all-gather)
        fp8 = "quantize.linear.float8" if v02 else "float8"
        out["model"] = {"converters": [fp8]}
        out[fp8] = {"enable_fsdp_float8_all_gather": pl.fp8_param_gather}
    return out


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def export(sc: Scenario, version: str = "0.1") -> str:
    """The job TOML of ``sc`` in the layout of torchtitan ``version`` (:data:`LAYOUTS`; "0.1" by default, the layout
    this export has always written), its header naming the layout."""
    m = sc.model
    cudnn_from = ".".join(map(str, SDPA_CUDNN_FROM))
    sdpa = f">= {cudnn_from} runs it (cuDNN on Hopper/Blackwell)" if sc.training.attention == "flash" else \
        f"< {cudnn_from} runs it (FlashAttention-2)"
    body = sections(sc, version)
    lines = [f"# {LAYOUTS[version]} job config: cosearch export of {sc.cluster.gpus} x {sc.cluster.gpu}",
             f"# model shape (set [model] name/flavor to match): layers={m.layers} hidden={m.hidden} heads={m.heads} "
             f"kv_heads={m.kv_heads} ffn_hidden={m.ffn_hidden} gated_mlp={m.gated_mlp} vocab={m.vocab} "
             f"tied_embeddings={m.tied_embeddings}",
             f"# attention: PyTorch SDPA as PyTorch {sdpa}"]
    for name, table in body.items():
        lines += ["", f"[{name}]"] + [f"{k} = {_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- plan in
#: fsdp_reshard_after_forward values of torchtitan (``Literal["default", "always", "never"]``).
_RESHARD = ("default", "always", "never")
#: pipeline_parallel_schedule (PyTorch's get_schedule_class ignores case) -> cosearch schedule
_SCHEDULES_IN = {v.lower(): k for k, v in _SCHEDULES.items()}
#: Every key of the tables read, as torchtitan v0.1.0's dataclasses name them (git tree 000204a4): those read below,
#: then those that leave the estimate as it is. Any other key there is refused (:func:`_check_names`): skipped, a
#: misspelt key would be estimated at its default.
_KEYS_V010 = {
    "parallelism": ("data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "enable_async_tensor_parallel", "disable_loss_parallel",
                    "pipeline_parallel_degree", "pipeline_parallel_schedule", "pipeline_parallel_layers_per_stage",
                    "pipeline_parallel_microbatch_size", "context_parallel_degree", "expert_parallel_degree",
                    "enable_compiled_autograd", "pipeline_parallel_split_points", "pipeline_parallel_schedule_csv",
                    "context_parallel_rotate_method"),
    "training": ("local_batch_size", "global_batch_size", "seq_len", "steps", "mixed_precision_param", "compile",
                 "enable_cpu_offload", "dataset", "dataset_path", "max_norm", "mixed_precision_reduce", "gc_freq",
                 "gc_debug", "seed", "deterministic"),
    "activation_checkpoint": ("mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns"),
    "model": ("converters", "name", "flavor", "tokenizer_path", "print_after_conversion"),
}
#: The keys torchtitan v0.2.0 to v0.2.2 added to those tables (their torchtitan/config/job_config.py; the module
#: docstring says which are read). Read first: ``module_fqns_per_model_part`` and the two
#: ``*_stage_less_layers`` (the pipeline split), ``dtype`` (pure-bf16 training), ``early_stop``; the rest leave the
#: estimate as it is: ``pipeline_parallel_expert_parallel_overlap`` (DualPipeV with ep > 1 only, both refused),
#: ``context_parallel_load_balancer`` (both balancers balance the causal work), the expert keys and v0.2.0's
#: ``debug_moe_force_load_balance`` (ep > 1 is refused; with one expert-parallel rank the routing's balance does not
#: change the step), ``dataloader`` (host-side loading), the memory-budget keys (that mode is refused) and the
#: checkpoint's RNG and debug switches.
_KEYS_LATER = {
    "parallelism": ("module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
                    "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_expert_parallel_overlap",
                    "context_parallel_load_balancer", "expert_tensor_parallel_degree", "expert_parallel_comm_backend"),
    "training": ("dtype", "dataloader", "debug_moe_force_load_balance"),
    "activation_checkpoint": ("early_stop", "memory_budget", "visualize_memory_budget_pareto", "preserve_rng_state",
                              "determinism_check", "debug"),
    "model": ("hf_assets_path",),
    "compile": ("enable", "components", "backend"),
}
_KEYS = {t: _KEYS_V010.get(t, ()) + _KEYS_LATER.get(t, ()) for t in (*_KEYS_V010, "compile")}
#: torchtitan's other tables, v0.1.0's and v0.2's (``[quantize]`` replaced ``[float8]`` and ``[mx]``; the converters
#: in ``[model]`` switch them on): not read, so their keys are not checked.
_OTHER_TABLES = ("job", "profiling", "metrics", "optimizer", "lr_scheduler", "checkpoint", "float8", "mx", "comm",
                 "memory_estimation", "fault_tolerance", "experimental", "validation", "quantize", "debug")
#: ``[model] converters`` of fp8 GEMMs: v0.1.0's ``float8`` (nn.Linear), v0.2's ``quantize.linear.float8`` and
#: ``quantize.grouped_mm.float8`` (a mixture of experts' grouped GEMMs). MX (MXFP8) converters are not modelled.
_FP8_LINEAR = ("float8", "quantize.linear.float8")
_FP8_GROUPED = "quantize.grouped_mm.float8"


def _table(doc: dict[str, Any], key: str) -> dict[str, Any]:
    """The ``[key]`` table of the TOML, a dotted key naming a nested one (``quantize.linear.float8``); empty when
    absent. ``parallelism = 5`` (or ``quantize.linear = 1``) is a one-line error naming the non-table."""
    v: Any = doc
    parts = key.split(".")
    for depth, part in enumerate(parts):
        v = v.get(part, {})
        if not isinstance(v, dict):
            name = ".".join(parts[:depth + 1])
            raise CosearchError(name, f"expects a TOML table [{name}] (got {type(v).__name__} {v!r})")
    return v


def _number(table: dict[str, Any], section: str, key: str, default: int, also: tuple[int, ...] = ()) -> int:
    """An integer key of ``[section]``: >= 1 (or one of ``also``: torchtitan's -1 where it means "the
    rest" or "derived"), within the scenario's counts (:data:`cosearch.scenario.MAX_COUNT`); a 0,
    1.5, "x" or inf is a one-line error naming ``section.key``."""
    return whole(table.get(key, default), f"{section}.{key}", most=MAX_COUNT, also=also)


def _switch(table: dict[str, Any], section: str, key: str) -> bool:
    """A true/false key of ``[section]``, false when absent (torchtitan's default for every switch read)."""
    return hf.boolean(table.get(key, False), f"{section}.{key}")


def _check_names(doc: dict[str, Any]) -> None:
    """Refuses a key of a table read that torchtitan does not define (``tensor_paralel_degree``) and a table
    that is a near miss of a torchtitan one (``[paralelism]``): skipped, either would leave the estimate at the
    default, where torchtitan itself refuses the name. Tables further from every torchtitan name (a
    custom_args_module's, a later release's) are left alone."""
    tables = (*_KEYS, *_OTHER_TABLES)
    for name in doc:
        if name in _KEYS:
            for key in _table(doc, name):
                if key not in _KEYS[name]:
                    raise CosearchError(f"{name}.{key}", f"not a key of [{name}] in {READS}; "
                                        + _hint(key, _KEYS[name]))
        elif name not in _OTHER_TABLES and (close := get_close_matches(name, tables, n=1, cutoff=0.8)):
            raise CosearchError(name, f"not a table of {READS}; did you mean [{close[0]}]?")


def _hint(key: str, known: tuple[str, ...]) -> str:
    """The table of the read ones that defines ``key``, else the closest known key, else the known keys."""
    home = [t for t, keys in _KEYS.items() if key in keys]
    close = get_close_matches(key, known, n=1)
    return (f"it belongs in [{home[0]}]" if home else f"did you mean {close[0]}?" if close
            else "known: " + ", ".join(known))


def _compiled(doc: dict[str, Any], training: dict[str, Any]) -> tuple[bool, bool]:
    """Whether torch.compile (inductor) compiles the model and the loss: v0.1.0's ``[training] compile`` (both),
    or later trees' ``[compile]`` (``enable``; ``components``, default both; ``backend``, default inductor)."""
    if "compile" not in doc:
        on = _switch(training, "training", "compile")
        return on, on
    if "compile" in training:
        raise CosearchError("training.compile", "given with a [compile] table (torchtitan's later layout): give one")
    table = _table(doc, "compile")
    parts = table.get("components", ["model", "loss"])
    if not isinstance(parts, list) or not all(p in ("model", "loss") for p in parts):
        raise CosearchError("compile.components", f"expects a list of \"model\" and \"loss\" (got {parts!r})")
    if table.get("backend", "inductor") != "inductor":
        raise CosearchError("compile.backend", f"expects inductor, the backend that fuses kernels "
                            f"(got {table['backend']!r})")
    on = _switch(table, "compile", "enable")
    return on and "model" in parts, on and "loss" in parts


def _schedule(par: dict[str, Any]) -> str:
    """The cosearch schedule of ``pipeline_parallel_schedule`` (1F1B when absent); PyTorch's other schedules
    (GPipe, LoopedBFS, InterleavedZeroBubble, DualPipeV) and unknown names are refused, not estimated as 1F1B."""
    name = par.get("pipeline_parallel_schedule", "1F1B")
    if not isinstance(name, str) or name.lower() not in _SCHEDULES_IN:
        raise CosearchError("parallelism.pipeline_parallel_schedule", f"expects {', '.join(_SCHEDULES.values())} "
                            f"(got {name!r}); PyTorch's other schedules are not modelled")
    return _SCHEDULES_IN[name.lower()]


def _later(doc: dict[str, Any]) -> bool:
    """Whether the TOML names anything torchtitan v0.1.0 lacks (a v0.2 table, key or converter): then v0.2's
    defaults apply where the two differ (``early_stop``)."""
    if any(t in doc for t in ("compile", "quantize", "debug")):
        return True
    if any(key not in keys for t, keys in _KEYS_V010.items() if isinstance(doc.get(t), dict) for key in doc[t]):
        return True
    converters = _table(doc, "model").get("converters", [])
    return isinstance(converters, list) and any(isinstance(c, str) and c.startswith("quantize.") for c in converters)


def _precision(doc: dict[str, Any], moe: bool) -> str:
    """fp8 where the converters put the model's GEMMs in float8 (torchao), else bf16. A mixture of experts runs its
    experts in grouped GEMMs, which ``float8`` / ``quantize.linear.float8`` leave in bf16 (and
    ``quantize.grouped_mm.float8`` alone the rest; between v0.1.0 and v0.2 the ``float8`` converter took them with
    ``[float8] moe_fqns_prototype``, torchtitan/config/job_config.py @6404b932421f5ce382e7dac5ad381b2c17b1373c):
    cosearch runs every GEMM in one precision, so a split is refused, not estimated."""
    converters = _table(doc, "model").get("converters", [])
    known = (*_FP8_LINEAR, _FP8_GROUPED)
    if not isinstance(converters, list) or not all(c in known for c in converters):
        raise CosearchError("model.converters", f"expects a list of {', '.join(known)} (got {converters!r}); MX "
                            "(MXFP8) converters are not modelled")
    linear, grouped = any(c in _FP8_LINEAR for c in converters), _FP8_GROUPED in converters
    float8 = _table(doc, "float8")
    if "float8" in converters and (float8.get("moe_fqns_prototype") or float8.get("moe_fqns")):
        grouped = True
    if moe and linear != grouped:
        raise CosearchError("model.converters", f"fp8 on the {'dense layers' if linear else 'experts'} only: cosearch "
                            f"runs every GEMM in one precision; give both quantize.linear.float8 and {_FP8_GROUPED}, "
                            "or neither")
    return "fp8" if linear else "bf16"


def _fp8_all_gather(doc: dict[str, Any], shard: int, moe: bool) -> bool:
    """``plan.fp8_param_gather``: ``enable_fsdp_float8_all_gather`` of the float8 converter's table, as torchtitan
    v0.1.0 to v0.2.2 apply it (torchtitan/components/quantization/float8.py: ``parallel_dims.dp_shard_enabled and
    enable_fsdp_float8_all_gather``, tensorwise scaling without ``recipe_name`` only). True where an fp8 converter is
    on and ``data_parallel_shard_degree`` (``shard``) > 1. As in torchtitan, a true key has no effect where no fp8
    converter is named (its table is not read) or where shard is 1 (read as false, logged). Refused, one line naming
    the key: true with ``recipe_name`` (torchtitan asserts), true for a sharded mixture of experts (torchao gathers
    the grouped-GEMM expert weights in bf16, only Float8Linear's in fp8; cosearch holds every weight in one
    precision)."""
    converters = _table(doc, "model").get("converters", [])  # checked by _precision
    on = [c for c in _FP8_LINEAR if c in converters]
    for converter in on:
        table = _table(doc, converter)  # [float8], v0.2's [quantize.linear.float8]
        key = f"{converter}.enable_fsdp_float8_all_gather"
        if not hf.boolean(table.get("enable_fsdp_float8_all_gather", False), key):
            continue
        if "recipe_name" in table:
            raise CosearchError(key, f"true with recipe_name {table['recipe_name']!r}: torchtitan asserts that the "
                                "float8 FSDP all-gather is not supported with a recipe (it runs tensorwise scaling "
                                "without recipe_name); set false or drop recipe_name")
        if shard == 1:
            _log.warning("%s = true has no effect: torchtitan gathers fp8 weights only where "
                         "data_parallel_shard_degree > 1 (read as plan.fp8_param_gather: false)", key)
            return False
        if moe:
            raise CosearchError(key, "true for a mixture of experts: torchao gathers the experts' grouped-GEMM "
                                "weights in bf16 and only the other linear layers' in fp8, while cosearch holds every "
                                "weight in one precision; set false")
        return True
    return False


def _split(par: dict[str, Any], pp: int) -> tuple[int, int]:
    """The layers the embedding and the output count as in torchtitan's split (v0.2's
    ``pipeline_parallel_first/last_stage_less_layers``, 0 or 1; 1 each in v0.1.0 and by default). Refuses, under
    pipelining, a stage split the model would not evaluate: explicit module lists (v0.1.0's
    ``pipeline_parallel_split_points``, v0.2's ``module_fqns_per_model_part``; cosearch evaluates its own split,
    :func:`cosearch.model.memory.stage_layers`) and weights above 1 (torchtitan then moves more than one layer off an
    end stage; the model at most one). Without pipelining they do nothing."""
    if pp == 1:
        return 1, 1
    for key in ("pipeline_parallel_split_points", "module_fqns_per_model_part"):
        if par.get(key):
            raise CosearchError(f"parallelism.{key}", "an explicit stage split is not read (cosearch evaluates its own "
                                "split of the layers over pp x interleave stages); remove it and give "
                                "pipeline_parallel_layers_per_stage")
    weights = []
    for key, end in (("pipeline_parallel_first_stage_less_layers", "first"),
                     ("pipeline_parallel_last_stage_less_layers", "last")):
        weight = whole(par.get(key, 1), f"parallelism.{key}", least=0, most=MAX_COUNT)
        if weight > 1:
            raise CosearchError(f"parallelism.{key}", f"{weight}: torchtitan would move {weight} layers' worth off the "
                                f"{end} stage; cosearch's split keeps at most one layer off an end stage; use 0 or 1 "
                                "(torchtitan's default)")
        weights.append(weight)
    return weights[0], weights[1]


def _model(model: Any) -> dict[str, Any]:
    """Model fields of ``--model``: a preset name, or a mapping of fields (``hf_config`` resolved)."""
    if isinstance(model, str):
        return preset(model)
    if not isinstance(model, Mapping):
        raise CosearchError("--model", f"expects a preset name or a mapping of model fields (got a {type(model).__name__})")
    return hf.resolve_section(model) if "hf_config" in model else dict(model)


def _parse(text: str) -> dict[str, Any]:
    """The TOML document; malformed, too deeply nested or absurd-number text is a one-line error."""
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise CosearchError("--torchtitan-toml", f"malformed TOML: {err}") from None
    except RecursionError:
        raise CosearchError("--torchtitan-toml", "malformed TOML: nested too deeply") from None
    except ValueError:  # an integer of thousands of digits (Python's int-from-text limit)
        raise CosearchError("--torchtitan-toml", "malformed TOML: a number too long to read") from None


def _sharding(shard: int, rep: int, cp: int, pp: int, reshard: str) -> tuple[int, int | None]:
    """``plan.zero`` and ``plan.zero_group`` of torchtitan's data-parallel degrees. FSDP2 is on whenever
    shard x cp > 1 (torchtitan shards over its dp_shard_cp mesh, cp folded in: the model's default group dp x cp);
    under pipelining it keeps parameters and gradients whole through the step (:func:`cosearch._cells.pipelined_zero`).
    HSDP (replicate > 1) with cp > 1 shards over groups holding context-parallel ranks, which the model's
    zero_group (data-parallel ranks) cannot: refused."""
    if shard * cp == 1:
        return 0, None
    if rep > 1 and cp > 1:
        raise CosearchError("parallelism.data_parallel_replicate_degree", f"{rep} with context_parallel_degree {cp}: "
                            "HSDP shards over data- and context-parallel ranks together; cosearch models hybrid "
                            "sharding over data-parallel ranks only (use replicate 1, or cp 1)")
    zero = pipelined_zero(2 if reshard == "never" else 3, pp, "torchtitan")
    return zero, shard if rep > 1 else None


def parse_toml(text: str, model: Any, cluster: dict[str, Any], torch_version: str | None = None) -> Scenario:
    """A :class:`Scenario` from a torchtitan job TOML (the inverse of :func:`export`).

    torchtitan names its architecture (``[model] name/flavor``) instead of writing the shape,
    so ``model`` (a cosearch preset name or a model mapping) is required, as is the cluster
    (``gpu`` and ``gpus``). torchtitan defaults apply to absent keys (degrees 1, shard degree -1 =
    the remaining GPUs, global batch -1 = local batch x dp, activation checkpointing selective).
    Every key read is checked (tables are tables, degrees and sizes integers >= 1): a bad value is a
    one-line error naming ``section.key``. ``torch_version`` (None: a current release) sets the attention
    kernel SDPA picks (:func:`cosearch._cells.sdpa_attention`).
    """
    doc = _parse(text)
    _check_names(doc)
    m = _model(model)
    if "gpu" not in cluster or "gpus" not in cluster:
        raise CosearchError("--gpus" if "gpu" in cluster else "--gpu", "required with --torchtitan-toml (the TOML "
                            "does not name the GPU model or the world size)")
    par, tr = _table(doc, "parallelism"), _table(doc, "training")
    ac = _table(doc, "activation_checkpoint")
    gpus = cluster_gpus(cluster)
    tp, pp, cp = (_number(par, "parallelism", k, 1) for k in ("tensor_parallel_degree", "pipeline_parallel_degree",
                                                               "context_parallel_degree"))
    rep = _number(par, "parallelism", "data_parallel_replicate_degree", 1)
    shard = _number(par, "parallelism", "data_parallel_shard_degree", -1, also=(-1,))  # -1: the remaining GPUs
    if shard == -1:
        shard = gpus // (rep * tp * pp * cp)
    dp = rep * shard
    if dp * tp * pp * cp != gpus:
        raise CosearchError("[parallelism]", f"degrees multiply to {dp * tp * pp * cp}, cluster has {gpus} GPUs")
    reshard = par.get("fsdp_reshard_after_forward", "default")
    if reshard not in _RESHARD:
        raise CosearchError("parallelism.fsdp_reshard_after_forward", f"expects one of {', '.join(_RESHARD)} "
                            f"(got {reshard!r})")
    zero, group = _sharding(shard, rep, cp, pp, reshard)
    local = _number(tr, "training", "local_batch_size", 8)
    gb = _number(tr, "training", "global_batch_size", -1, also=(-1,))  # -1: local batch x dp
    gb = local * dp if gb == -1 else gb
    interleave, schedule = 1, None
    first, last = _split(par, pp)
    if pp > 1:
        schedule = _schedule(par)
        micro = _number(par, "parallelism", "pipeline_parallel_microbatch_size", 1)
        layers = whole(m.get("layers"), "model.layers", most=MAX_LAYERS)  # before the split is worked out
        interleave = _per_rank(par, layers, pp, schedule, first, last)
    else:
        micro = local
    precision = _precision(doc, bool(m.get("experts")))
    fp8_gather = _fp8_all_gather(doc, shard, bool(m.get("experts")))
    param = tr.get("mixed_precision_param", "bfloat16")
    if param != "bfloat16":
        raise CosearchError("training.mixed_precision_param", f"expects bfloat16 (got {param!r}): cosearch models "
                            "bf16 (and fp8) torchtitan training, not fp32")
    if _switch(tr, "training", "enable_cpu_offload"):
        raise CosearchError("training.enable_cpu_offload", "true: FSDP's CPU offload is not mapped; set false")
    if m.get("experts") and _number(par, "parallelism", "expert_parallel_degree", 1) > 1:
        raise CosearchError("parallelism.expert_parallel_degree", "torchtitan's expert parallelism (dp2ep) is not "
                            "mapped; use 1")
    # v0.2's pure-bf16 training: weights, gradients and Adam's states in bf16, no fp32 master copy
    dtype = tr.get("dtype", "float32")
    if dtype not in ("float32", "bfloat16"):
        raise CosearchError("training.dtype", f"expects float32 or bfloat16 (got {dtype!r})")
    mode = str(ac.get("mode", "selective"))
    if mode == "memory_budget":
        raise CosearchError("activation_checkpoint.mode", "memory_budget: the compiler's partitioner picks what to "
                            "recompute within activation_memory_budget, which is not modelled; use none, selective "
                            "(with selective_ac_option = \"op\") or full")
    if mode not in ("none", "selective", "full"):
        raise CosearchError("activation_checkpoint.mode", f"expects none, selective or full (got {mode!r})")
    # v0.1.0 wraps with PyTorch's checkpoint default (early stop); v0.2 passes its early_stop, default false
    early = hf.boolean(ac["early_stop"], "activation_checkpoint.early_stop") if "early_stop" in ac else not _later(doc)
    if mode == "selective":  # torchtitan's default option "2" checkpoints every second layer: not a modelled mode
        option = str(ac.get("selective_ac_option", "2"))
        if option != "op":
            raise CosearchError("activation_checkpoint.selective_ac_option",
                                f"expects op (per-op SAC); every-n-layer checkpointing ({option!r}) is not modelled")
        mode = "op"
    m["seq_len"] = (_number(tr, "training", "seq_len", 1) if "seq_len" in tr
                    else whole(m.get("seq_len", 2048), "model.seq_len"))
    model_compiled, loss_compiled = _compiled(doc, tr)
    # torch.compile fuses the memory-bound ops of the model and of the loss (torchtitan's compiled loss_fn)
    training: dict[str, Any] = {"global_batch": gb, "precision": precision, "attention": sdpa_attention(torch_version),
                                "fusion": "fused" if model_compiled else "eager",
                                "cross_entropy": "fused" if loss_compiled else "eager"}
    if dtype == "bfloat16":
        training["optimizer_states"] = "bf16"
    if "steps" in tr:
        training["tokens"] = float(_number(tr, "training", "steps", 1) * gb * m["seq_len"])
    # async TP is micro-pipelined by the compiler: without compile the flag has no effect
    overlap = _switch(par, "parallelism", "enable_async_tensor_parallel") and training["fusion"] == "fused"
    plan = {"tp": tp, "pp": pp, "cp": cp, "microbatch": micro, "interleave": interleave, "recompute": mode,
            "schedule": "zb-v" if schedule == "zb-v" else None,
            "sequence_parallel": tp > 1, "zero": zero, "zero_group": group,
            "tp_comm_overlap": overlap,
            "tp_overlap_passes": tp_overlap_passes("torchtitan") if overlap else "all",
            # under torch.compile the partitioner recomputes only what the backward reads, early_stop or not
            "recompute_early_stop": mode == "full" and (early or model_compiled),
            "fsdp_overlap": fsdp_overlap("torchtitan") if zero == 3 else None,
            "fp8_param_gather": fp8_gather}
    return parse_scenario({"model": m, "training": training, "cluster": dict(cluster), "plan": plan})
