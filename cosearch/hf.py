"""Model fields from a Hugging Face ``config.json`` (offline: a local file, never a download).

A scenario or space may say ``model: {hf_config: path/to/config.json, seq_len: 8192}`` (or name
the directory holding ``config.json``); every model field given beside ``hf_config`` overrides
the one read from the file. :func:`expand` does the substitution for
:func:`cosearch.scenario.parse_scenario` and :func:`cosearch.search.space.parse_space`.

Mapped architectures (``model_type``; key names as in transformers 4.4x-4.55 ``configuration_*.py``):

* Llama family (``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``gemma``, ``gemma2``, ``phi3``):
  ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``
  (default: heads), ``intermediate_size``, ``vocab_size``, ``max_position_embeddings``,
  ``tie_word_embeddings`` (default false; true for Gemma); a gated MLP (SwiGLU / GeGLU).
* GPT-NeoX / Pythia (``gpt_neox``): the same key names, a plain GELU MLP, untied by default.
* GPT-2 (``gpt2``): ``n_layer``, ``n_embd``, ``n_head``, ``n_inner`` (null: 4 x n_embd),
  ``vocab_size``, ``n_positions``; tied embeddings.

* Mixture of experts (``mixtral``, ``qwen2_moe``, ``qwen3_moe``, ``deepseek``, ``deepseek_v2``,
  ``deepseek_v3``, ``gpt_oss``, ``llama4`` / ``llama4_text``): experts, top-k, expert / shared / dense
  widths, dense layers, MLA ranks and ``head_dim`` (issue 15; keys, layer rules and the stated
  approximations in :mod:`cosearch.hf_moe`).
* ``head_dim`` (any family): mapped where heads x head_dim differs from ``hidden_size`` (Gemma-7B,
  Qwen3-MoE, gpt-oss); the model carries an attention width of its own since issue 13.
* Sliding windows (:func:`window_fields`): ``sliding_window`` with ``layer_types`` (gpt-oss, newer
  configs: one of ``sliding_attention`` / ``full_attention`` per layer), Gemma 2's alternating layers,
  Mistral's window on every layer (null: none). Qwen2/Qwen3's ``use_sliding_window`` (false in their
  released configs) is not mapped.

Refused with a one-line :class:`~cosearch.errors.CosearchError` naming the key: other
mixture-of-experts families (DBRX, Jamba, OLMoE, Phi-MoE, Granite-MoE: experts under other keys or
layers the model lacks), an unknown ``model_type``, a missing or non-positive-integer key. Biases,
norms and learned position embeddings are not model fields (they are < 1 % of the weights of these
models).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from ._files import read_text
from .errors import CosearchError
from .hf_moe import MAPPED as MOE_MAPPED, moe_fields, text_config
from .model.window import global_every

FIELD = "model.hf_config"
#: Largest config.json read (real ones are a few KiB).
MAX_BYTES = 1 << 20

LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3")
#: Mixture-of-experts families not mapped (their experts sit under other keys or in layers the model lacks).
MOE_UNMAPPED = ("dbrx", "jamba", "olmoe", "phimoe", "granitemoe", "granitemoehybrid")
#: Keys whose presence (with a positive count) marks a mixture-of-experts config.
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
SUPPORTED = LLAMA_LIKE + ("gpt_neox", "gpt2") + MOE_MAPPED
MOE_REASON = "this mixture-of-experts family is not mapped (mapped: " + ", ".join(MOE_MAPPED) + ")"


def read_config(path: str | Path) -> dict[str, Any]:
    """The JSON object of a local ``config.json`` (or of ``<dir>/config.json``); one-line errors.

    Read through :func:`cosearch._files.read_text`: a FIFO, device, binary or oversized file is
    refused before or while reading (never a hang), and nesting too deep for the JSON decoder is an
    error, not a RecursionError."""
    p = Path(path).expanduser()
    try:
        if p.is_dir():
            p = p / "config.json"
        text = read_text(p, MAX_BYTES)
    except (CosearchError, OSError, ValueError) as err:  # OSError/ValueError: a name too long or with a NUL
        why = err.message if isinstance(err, CosearchError) else \
            f"cannot read file ({getattr(err, 'strerror', None) or err})"
        raise CosearchError(FIELD, f"{str(p)!r}: {why}; give a local config.json (no larger than "
                            f"{MAX_BYTES >> 10} KiB) or its directory (nothing is downloaded)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise CosearchError(FIELD, f"{str(p)!r} is not valid JSON (line {err.lineno}: {err.msg})") from None
    except RecursionError:
        raise CosearchError(FIELD, f"{str(p)!r} is not a model config.json (JSON nested too deeply)") from None
    except ValueError:  # an integer of thousands of digits (Python's int-from-text limit)
        raise CosearchError(FIELD, f"{str(p)!r} is not a model config.json (a number too long to read)") from None
    if not isinstance(data, dict):
        raise CosearchError(FIELD, f"{str(p)!r} holds a JSON {type(data).__name__}, expected an object")
    return data


def _count(cfg: Mapping[str, Any], key: str, default: Any = None) -> int:
    v = cfg.get(key, default)
    if v is None:
        raise CosearchError(FIELD, f"config.json has no {key!r}, which the model needs")
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise CosearchError(FIELD, f"config.json key {key!r} must be a positive integer (got {v!r})")
    return v


def boolean(value: Any, field: str, what: str = "") -> bool:
    """``value`` if it is true or false, else a one-line error naming ``field`` (``what``: the key it came
    from): text such as "false" or a 0/1 is refused, not read as a truth value. Shared by the config readers
    (config.json here, the torchtitan TOML in :mod:`cosearch.frameworks.torchtitan`)."""
    if not isinstance(value, bool):
        raise CosearchError(field, f"{what}expects true or false (got {value!r})")
    return value


def _flag(cfg: Mapping[str, Any], key: str, default: bool) -> bool:
    """A true/false key of a config.json (``default`` when absent)."""
    return boolean(cfg.get(key, default), FIELD, f"config.json key {key!r} ")


def window_fields(cfg: Mapping[str, Any], mtype: str, layers: int) -> dict[str, Any]:
    """``sliding_window`` and ``global_attention_every`` of a config (empty without windows). A
    ``layer_types`` list with full-attention layers at other positions than every N-th is read as
    every round(L / full layers)-th: the same share of windowed layers (the model keeps no per-layer list)."""
    window = cfg.get("sliding_window")
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        if not all(t in ("sliding_attention", "full_attention") for t in types):
            return {}  # other layer kinds (linear attention, chunked): not a windowed model the model knows
        sliding = sum(t == "sliding_attention" for t in types)
        if sliding == 0 or window is None:
            return {}
        out = {"sliding_window": _count(cfg, "sliding_window")}
        every = global_every(layers, len(types) - sliding)
        return out if every is None else {**out, "global_attention_every": every}
    if window is None:
        return {}
    if mtype == "gemma2":  # Gemma2DecoderLayer: layer i is sliding iff i is even, so every 2nd (1-based) is global
        return {"sliding_window": _count(cfg, "sliding_window"), "global_attention_every": 2}
    if mtype == "mistral":
        return {"sliding_window": _count(cfg, "sliding_window")}
    return {}


def model_fields(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The scenario's model fields (layers, hidden, heads, ...) of a parsed ``config.json``."""
    mtype = cfg.get("model_type")
    if not isinstance(mtype, str) or not mtype:
        raise CosearchError(FIELD, "config.json has no 'model_type'; cannot tell the architecture")
    out = _architecture_fields(cfg, mtype)
    return {**out, **window_fields(text_config(cfg), mtype, out["layers"])}


def _architecture_fields(cfg: Mapping[str, Any], mtype: str) -> dict[str, Any]:
    if mtype in MOE_MAPPED:  # issue 15: mixture of experts / MLA (cosearch.hf_moe)
        return moe_fields(cfg, mtype, _count, _flag)
    for key in MOE_KEYS:
        if isinstance(cfg.get(key), int) and not isinstance(cfg.get(key), bool) and cfg[key] > 0:
            raise CosearchError(FIELD, f"config.json key {key!r}: {MOE_REASON}")
    if mtype in MOE_UNMAPPED or "moe" in mtype:
        raise CosearchError(FIELD, f"config.json model_type {mtype!r}: {MOE_REASON}")
    if mtype not in SUPPORTED:
        raise CosearchError(FIELD, f"config.json model_type {mtype!r} is not mapped; supported: {', '.join(SUPPORTED)} "
                            "(or give the model fields instead of hf_config)")
    if mtype == "gpt2":
        hidden = _count(cfg, "n_embd")
        out = {"layers": _count(cfg, "n_layer"), "hidden": hidden, "heads": _count(cfg, "n_head"),
               "ffn_hidden": _count(cfg, "n_inner", 4 * hidden), "gated_mlp": False,
               "vocab": _count(cfg, "vocab_size"), "seq_len": _count(cfg, "n_positions"),
               "tied_embeddings": _flag(cfg, "tie_word_embeddings", True)}
        out["kv_heads"] = out["heads"]
        return out
    hidden, heads = _count(cfg, "hidden_size"), _count(cfg, "num_attention_heads")
    kv = _count(cfg, "num_key_value_heads", heads) if mtype != "gpt_neox" else heads
    head_dim = cfg.get("head_dim")
    extra = {"head_dim": head_dim} if head_dim is not None and _count(cfg, "head_dim") * heads != hidden else {}
    if heads % kv:
        raise CosearchError(FIELD, f"config.json key 'num_key_value_heads': {kv} does not divide "
                            f"num_attention_heads {heads}")
    return {"layers": _count(cfg, "num_hidden_layers"), "hidden": hidden, "heads": heads, "kv_heads": kv,
            "ffn_hidden": _count(cfg, "intermediate_size"), "gated_mlp": mtype != "gpt_neox",
            "vocab": _count(cfg, "vocab_size"), "seq_len": _count(cfg, "max_position_embeddings"),
            "tied_embeddings": _flag(cfg, "tie_word_embeddings", mtype in ("gemma", "gemma2")), **extra}


def load_model(path: str | Path) -> dict[str, Any]:
    """Model fields of a local ``config.json`` file or directory."""
    return model_fields(read_config(path))


def resolve_section(model: Mapping[str, Any]) -> dict[str, Any]:
    """A ``model`` section with ``hf_config`` replaced by the config's fields (given fields win)."""
    path = model["hf_config"]
    if not isinstance(path, (str, Path)) or not str(path):
        raise CosearchError(FIELD, f"expected the path of a local config.json or its directory (got {path!r})")
    overrides = {k: v for k, v in model.items() if k != "hf_config"}
    return {**load_model(path), **overrides}


def expand(data: Any) -> Any:
    """``data`` (a scenario or space mapping) with a ``model.hf_config`` resolved; else unchanged."""
    if isinstance(data, Mapping) and isinstance(data.get("model"), Mapping) and "hf_config" in data["model"]:
        return {**data, "model": resolve_section(data["model"])}
    return data
