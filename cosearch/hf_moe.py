"""Mixture-of-experts and MLA fields from a Hugging Face ``config.json`` (issue 15; used by :mod:`cosearch.hf`).

Key names and layer rules as in transformers 4.55 (``configuration_*.py`` / ``modeling_*.py``):

* ``mixtral``: ``num_local_experts``, ``num_experts_per_tok``, ``intermediate_size`` (one expert's width);
  every layer MoE.
* ``qwen2_moe`` / ``qwen3_moe``: ``num_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``
  (expert width), ``shared_expert_intermediate_size`` (Qwen2-MoE's one shared expert; its scalar gate,
  ``hidden`` weights a layer, is not counted), ``intermediate_size`` (the dense MLP of non-sparse
  layers); layer i is sparse iff i is not in ``mlp_only_layers`` and (i + 1) % ``decoder_sparse_step``
  == 0 (``Qwen2MoeDecoderLayer``); ``head_dim`` (Qwen3).
* ``deepseek`` / ``deepseek_v2`` / ``deepseek_v3``: ``n_routed_experts``, ``num_experts_per_tok``,
  ``moe_intermediate_size``, ``n_shared_experts`` (of the expert width), ``intermediate_size`` (dense
  layers); layer i is MoE iff i >= ``first_k_dense_replace`` and i % ``moe_layer_freq`` == 0
  (DeepSeek's own ``modeling_deepseek.py``, named by the config's ``auto_map``); MLA (V2/V3): ``q_lora_rank`` (null: a full query projection),
  ``kv_lora_rank``, ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``. Group-limited routing
  (``n_group`` > 1, ``topk_group`` < ``n_group``; DeepSeek-V3: 8 groups, 4 per token, one group per
  node in DeepSeek's deployment, arXiv 2412.19437 sec. 2.1.2) maps to ``routed_nodes_limit`` =
  ``topk_group``. ``num_nextn_predict_layers`` (DeepSeek-V3: 1) maps to ``mtp_layers``, the
  multi-token-prediction modules DeepSeek-V3 trained with (as the deepseek-v3 preset; its 671B
  parameters leave them out, as the paper's count does).
* ``gpt_oss``: ``num_local_experts``, ``num_experts_per_tok``, ``intermediate_size``, ``head_dim``;
  its sliding-window layers are read by :func:`cosearch.hf.window_fields`; attention sinks are not modelled.
* ``llama4`` (its ``text_config``) / ``llama4_text``: ``num_local_experts``, ``num_experts_per_tok``,
  ``intermediate_size`` (expert and the one shared expert), ``intermediate_size_mlp`` (dense layers),
  ``moe_layers`` (default every ``interleave_moe_layer_step``-th layer, ``Llama4TextConfig``);
  chunked attention (``attention_chunk_size``) is not modelled.

Approximation shared with the presets (``cosearch/data/models.yaml``, llama4-maverick): dense layers
between MoE layers are modelled as leading ones (``dense_layers``): the same parameters and FLOPs,
a different pipeline-stage balance. Field conventions follow the presets, so a config and its preset
give the same fields apart from ``seq_len``: ``ffn_hidden`` is the routed expert's width and
``dense_ffn_hidden`` the dense layers' (DeepSeek: ``ffn_hidden`` and ``dense_ffn_hidden`` the dense
width, ``expert_ffn_hidden`` the expert's); ``head_dim`` only where heads x head_dim != hidden.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from .errors import CosearchError

FIELD = "model.hf_config"
QWEN_MOE = ("qwen2_moe", "qwen3_moe")
DEEPSEEK = ("deepseek", "deepseek_v2", "deepseek_v3")
MAPPED = ("mixtral",) + QWEN_MOE + DEEPSEEK + ("gpt_oss", "llama4", "llama4_text")

Count = Callable[..., int]


def max_layers() -> int:
    """The largest ``model.layers`` a scenario takes (the bound of :class:`cosearch.scenario.ModelSpec`;
    imported late because cosearch.scenario imports this module through :mod:`cosearch.hf`)."""
    from annotated_types import Le

    from .scenario import ModelSpec

    return next(m.le for m in ModelSpec.model_fields["layers"].metadata if isinstance(m, Le))


def check_layers(layers: int, field: str, what: str = "") -> int:
    """``layers`` if within :func:`max_layers`, else a one-line error naming ``field`` (``what``: the
    key it came from). Readers call it before any per-layer loop or list, so that a claim of 10**13
    layers is refused at once."""
    limit = max_layers()
    if layers > limit:
        raise CosearchError(field, f"{what}{layers:_} layers; a model has at most {limit:_} (model.layers)")
    return layers


def _layer_list(cfg: Mapping[str, Any], key: str, layers: int) -> list[int] | None:
    v = cfg.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in v):
        raise CosearchError(FIELD, f"config.json key {key!r} must be a list of layer indices in 0..{layers - 1} (got {v!r})")
    return v


def _moe_layers(cfg: Mapping[str, Any], mtype: str, layers: int, count: Count) -> int:
    """Number of layers whose MLP is a mixture of experts, by the family's rule (module docstring)."""
    if mtype in QWEN_MOE:
        step = count(cfg, "decoder_sparse_step", 1)
        dense = set(_layer_list(cfg, "mlp_only_layers", layers) or [])
        return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
    if mtype in DEEPSEEK:
        first = cfg.get("first_k_dense_replace", 0)
        if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first <= layers:
            raise CosearchError(FIELD, f"config.json key 'first_k_dense_replace' must be an integer in 0..{layers} (got {first!r})")
        freq = count(cfg, "moe_layer_freq", 1)
        return sum(1 for i in range(first, layers) if i % freq == 0)
    if mtype in ("llama4", "llama4_text"):
        listed = _layer_list(cfg, "moe_layers", layers)
        if listed is not None:
            return len(set(listed))
        step = count(cfg, "interleave_moe_layer_step", 1)
        return len(range(step - 1, layers, step))
    return layers  # mixtral, gpt_oss: every layer


def _attention(cfg: Mapping[str, Any], mtype: str, hidden: int, heads: int, kv: int, count: Count) -> dict[str, Any]:
    """Attention fields: MLA ranks and head dims (DeepSeek-V2/V3), else gqa/mha with ``head_dim``."""
    if mtype in ("deepseek_v2", "deepseek_v3"):
        q_lora = cfg.get("q_lora_rank")
        return {"attention": "mla", "q_lora_rank": 0 if q_lora is None else count(cfg, "q_lora_rank"),
                "kv_lora_rank": count(cfg, "kv_lora_rank"), "qk_rope_head_dim": count(cfg, "qk_rope_head_dim"),
                "qk_nope_head_dim": count(cfg, "qk_nope_head_dim"), "v_head_dim": count(cfg, "v_head_dim")}
    out: dict[str, Any] = {"attention": "gqa" if kv < heads else "mha"}
    if cfg.get("head_dim") is not None and count(cfg, "head_dim") * heads != hidden:
        out["head_dim"] = cfg["head_dim"]
    return out


def text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's keys: Llama 4's ``text_config`` of a multimodal config, else ``cfg``."""
    if cfg.get("model_type") == "llama4":
        sub = cfg.get("text_config")
        if not isinstance(sub, Mapping):
            raise CosearchError(FIELD, "config.json key 'text_config' must be an object for model_type 'llama4'")
        return sub
    return cfg


def moe_fields(cfg: Mapping[str, Any], mtype: str, count: Count, flag: Callable[..., bool]) -> dict[str, Any]:
    """Model fields of a mixture-of-experts config of family ``mtype`` (one of :data:`MAPPED`)."""
    cfg = text_config(cfg)
    hidden, heads = count(cfg, "hidden_size"), count(cfg, "num_attention_heads")
    kv = count(cfg, "num_key_value_heads", heads)
    if heads % kv:
        raise CosearchError(FIELD, f"config.json key 'num_key_value_heads': {kv} does not divide "
                            f"num_attention_heads {heads}")
    layers = check_layers(count(cfg, "num_hidden_layers"), FIELD, "config.json key 'num_hidden_layers': ")
    experts_key = {"qwen2_moe": "num_experts", "qwen3_moe": "num_experts"}.get(
        mtype, "n_routed_experts" if mtype in DEEPSEEK else "num_local_experts")
    experts, top_k = count(cfg, experts_key), count(cfg, "num_experts_per_tok")
    if top_k > experts:
        raise CosearchError(FIELD, f"config.json key 'num_experts_per_tok': {top_k} exceeds {experts_key} {experts}")
    n_moe = _moe_layers(cfg, mtype, layers, count)
    if n_moe == 0:
        raise CosearchError(FIELD, f"config.json: no layer has experts ({experts_key} {experts}); "
                            "give a dense config or the model fields")
    out: dict[str, Any] = {"layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv}
    dense = layers - n_moe
    if mtype in DEEPSEEK:
        f_dense = count(cfg, "intermediate_size")
        out.update(ffn_hidden=f_dense, expert_ffn_hidden=count(cfg, "moe_intermediate_size"))
    elif mtype in QWEN_MOE:
        out["ffn_hidden"] = count(cfg, "moe_intermediate_size")
        f_dense = count(cfg, "intermediate_size") if dense else 0
    elif mtype == "gpt_oss" or mtype == "mixtral":
        out["ffn_hidden"], f_dense = count(cfg, "intermediate_size"), 0
    else:  # llama4
        out["ffn_hidden"] = count(cfg, "intermediate_size")
        f_dense = count(cfg, "intermediate_size_mlp") if dense else 0
    out.update(gated_mlp=True, vocab=count(cfg, "vocab_size"), seq_len=count(cfg, "max_position_embeddings"),
               tied_embeddings=flag(cfg, "tie_word_embeddings", False), experts=experts, top_k=top_k)
    if mtype in DEEPSEEK:
        shared = cfg.get("n_shared_experts")
        if shared:
            out["shared_experts"] = count(cfg, "n_shared_experts")
    elif mtype == "qwen2_moe" and cfg.get("shared_expert_intermediate_size"):
        out.update(shared_experts=1, shared_ffn_hidden=count(cfg, "shared_expert_intermediate_size"))
    elif mtype in ("llama4", "llama4_text"):
        out["shared_experts"] = 1  # Llama4TextMoe: one shared expert of intermediate_size
    if dense:
        out.update(dense_layers=dense, dense_ffn_hidden=f_dense)
    out.update(_attention(cfg, mtype, hidden, heads, kv, count))
    if mtype in DEEPSEEK:
        groups, per_token = cfg.get("n_group"), cfg.get("topk_group")
        if isinstance(groups, int) and groups > 1 and isinstance(per_token, int) and 0 < per_token < groups:
            out["routed_nodes_limit"] = per_token
        mtp = cfg.get("num_nextn_predict_layers")
        if mtp:
            out["mtp_layers"] = count(cfg, "num_nextn_predict_layers")
    return out
