"""NeMo 2 recipe overrides (NeMo-Run CLI ``key=value`` arguments of ``nemo llm pretrain``).

Follows **NeMo 2 (NeMo Framework 25.04)** recipe attributes: ``trainer`` (a ``nl.Trainer``) with
``trainer.strategy`` a ``nl.MegatronStrategy`` (``tensor_model_parallel_size``,
``pipeline_model_parallel_size``, ``virtual_pipeline_model_parallel_size``,
``context_parallel_size``, ``sequence_parallel``) and ``trainer.strategy.ddp`` a Megatron-Core
``DistributedDataParallelConfig`` (``overlap_grad_reduce``); ``trainer.plugins`` a precision
factory of ``nemo.collections.llm.recipes.precision.mixed_precision`` (``bf16_mixed``,
``fp16_mixed``, ``bf16_with_fp8_mixed``); ``data`` (``micro_batch_size``, ``global_batch_size``,
``seq_length``); ``model.config`` a Megatron-Core ``TransformerConfig``/``GPTConfig``
(``num_layers``, ``hidden_size``, ``num_attention_heads``, ``num_query_groups``,
``ffn_hidden_size``, ``gated_linear_unit``, ``share_embeddings_and_output_weights``,
``vocab_size``, ``seq_length``, ``attention_dropout``, ``hidden_dropout``,
``recompute_granularity``, ``recompute_method``, ``recompute_num_layers``, ``tp_comm_overlap``);
``optim.config.use_distributed_optimizer`` (ZeRO-1); for fp8, ``trainer.plugins.fp8_param_gather`` =
``plan.fp8_param_gather`` (weights held and gathered in fp8 by the distributed optimizer).

Names checked (issue 15) against NVIDIA/NeMo: nemo/collections/llm/recipes/llama3_70b.py
(@0189a3b38dcfc89e916ca4396459433c8ba326d2) builds ``trainer`` as ``run.Config(nl.Trainer, ...,
num_nodes=, devices=, max_steps=, plugins=bf16_mixed(), strategy=strategy)`` with ``strategy`` a
``nl.MegatronStrategy`` of ``tensor_model_parallel_size``, ``pipeline_model_parallel_size``,
``virtual_pipeline_model_parallel_size``, ``context_parallel_size``, ``sequence_parallel`` and
``ddp=run.Config(DistributedDataParallelConfig, ..., overlap_grad_reduce=True, ...)``; ``data`` as
``MockDataModule(seq_length=, global_batch_size=, micro_batch_size=)``; ``model`` as
``run.Config(LlamaModel, config=run.Config(Llama3Config70B))``.
nemo/collections/llm/recipes/precision/mixed_precision.py (@0a07447c2962ee5b55dea5af0d3fc981a2873ca4)
defines ``bf16_mixed``, ``fp16_mixed`` and ``bf16_with_fp8_mixed``, which sets ``cfg.fp8_param_gather = True``
(a ``MegatronMixedPrecision`` argument; its MXFP8 factories set False, current scaling True), so the export states
the plan's value after the factory: without it an fp8 plan with ``fp8_param_gather: false`` (16-bit weights plus an
fp8 copy) would launch with fp8 weights;
nemo/collections/llm/recipes/optim/adam.py (@06cca550af612dce62bdc21e5db16e2ac6fbf5e3) sets
``OptimizerConfig(use_distributed_optimizer=True)`` as ``optim.config``.
``model.config`` names: NVIDIA/NeMo nemo/collections/llm/gpt/model/base.py (@0175f4c6c8005588f42b6077a4e00ca31b4d479c)
declares ``GPTConfig(TransformerConfig)`` with ``share_embeddings_and_output_weights`` and ``seq_length``
and takes ``vocab_size`` when set (``hasattr(self, 'vocab_size')``); NVIDIA/Megatron-LM
megatron/core/transformer/transformer_config.py (@002526d81b81f6ab534e93844f9a228709887494) declares
``num_layers``, ``hidden_size``, ``num_attention_heads``, ``num_query_groups``, ``ffn_hidden_size``,
``hidden_dropout``, ``attention_dropout``, ``gated_linear_unit``; megatron/core/model_parallel_config.py
(@02aa3ee454b5ff16b1bf356ec36fa0cc1c26858f) holds ``tp_comm_overlap`` (inherited by TransformerConfig).
``recompute_granularity``/``recompute_method``/``recompute_num_layers`` were matched by their
TransformerConfig docstrings in the code search, not read in a named file.
NeMo's own recipes switch TP overlap on with
``MegatronCommOverlapCallback(tp_comm_overlap=True)`` (llama3_70b.py ``pretrain_recipe_performance``)
rather than ``model.config.tp_comm_overlap``.

Refused: zero 2/3 and hybrid sharding (this export maps only NeMo's distributed optimizer; under
context parallelism a ``zero_group`` equal to dp is hybrid too, as NeMo shards over dp x cp),
offload, attention other than flash (the export sets no attention backend: Transformer Engine's fused
kernel runs), eager fusion or loss (Megatron-Core's kernels are fused, its loss is the vocab-parallel
cross-entropy on 16-bit logits). Pick the recipe (``--factory``) whose architecture family
matches (normalization, positional embedding are not cosearch fields).
"""
from __future__ import annotations

from ..scenario import Scenario
from ._common import hybrid, layout, megatron_core_schedule, refuse, train_steps

VERSION = "NeMo 2 (NeMo Framework 25.04)"


def overrides(sc: Scenario) -> list[str]:
    lay = layout(sc, "NeMo")
    m, t, pl = sc.model, sc.training, sc.plan
    megatron_core_schedule(sc, "NeMo (Megatron-Core)")
    if pl.zero >= 2:
        raise refuse("plan.zero", f"zero {pl.zero}: this NeMo export maps only the distributed optimizer (zero 1)")
    if hybrid(sc, lay["dp"]) is not None:
        raise refuse("plan.zero_group", f"{pl.zero_group}: hybrid sharding (distributed-optimizer instances) is not "
                     f"mapped for NeMo, which shards over all dp x cp = {lay['dp'] * pl.cp} ranks; leave it unset")
    if pl.offload != "none":
        raise refuse("plan.offload", f"{pl.offload!r}: no NeMo offload setting is mapped; use 'none'")
    vp = "null" if pl.interleave == 1 else str(pl.interleave)
    plugin = {"bf16": "bf16_mixed", "fp16": "fp16_mixed", "fp8": "bf16_with_fp8_mixed"}[t.precision]
    drop = "0.1" if t.dropout else "0.0"
    b = lambda x: "true" if x else "false"  # noqa: E731
    out = [
        f"trainer.num_nodes={lay['nodes']}", f"trainer.devices={lay['gpus_per_node']}",
        f"trainer.strategy.tensor_model_parallel_size={pl.tp}",
        f"trainer.strategy.pipeline_model_parallel_size={pl.pp}",
        f"trainer.strategy.virtual_pipeline_model_parallel_size={vp}",
        f"trainer.strategy.context_parallel_size={pl.cp}",
        f"trainer.strategy.sequence_parallel={b(pl.sequence_parallel)}",
        f"trainer.strategy.ddp.overlap_grad_reduce={b(pl.overlap_grad_reduce)}",
        f"trainer.plugins={plugin}",
        *([f"trainer.plugins.fp8_param_gather={b(pl.fp8_param_gather)}"] if t.precision == "fp8" else []),
        f"optim.config.use_distributed_optimizer={b(pl.zero == 1)}",
        f"data.micro_batch_size={pl.microbatch}", f"data.global_batch_size={t.global_batch}",
        f"data.seq_length={m.seq_len}",
        f"model.config.num_layers={m.layers}", f"model.config.hidden_size={m.hidden}",
        f"model.config.num_attention_heads={m.heads}", f"model.config.num_query_groups={m.kv_heads}",
        f"model.config.ffn_hidden_size={m.ffn_hidden}", f"model.config.gated_linear_unit={b(m.gated_mlp)}",
        f"model.config.share_embeddings_and_output_weights={b(m.tied_embeddings)}",
        f"model.config.vocab_size={m.vocab}", f"model.config.seq_length={m.seq_len}",
        f"model.config.attention_dropout={drop}", f"model.config.hidden_dropout={drop}",
        f"model.config.tp_comm_overlap={b(pl.tp_comm_overlap)}",
    ]
    if pl.recompute == "selective":
        out.append("model.config.recompute_granularity=selective")
    elif pl.recompute == "full":
        out += ["model.config.recompute_granularity=full", "model.config.recompute_method=uniform",
                "model.config.recompute_num_layers=1"]
    steps = train_steps(sc)
    if steps is not None:
        out.append(f"trainer.max_steps={steps}")
    return out


def export(sc: Scenario) -> str:
    ov = overrides(sc)
    head = (f"# {VERSION}: cosearch export of {sc.cluster.gpus} x {sc.cluster.gpu}; choose the recipe factory of "
            "your model family\nnemo llm pretrain --factory RECIPE")
    return " \\\n    ".join([head] + [f"{o}" for o in ov]) + "\n"
