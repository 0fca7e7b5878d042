"""Mixture-of-experts Hugging Face configs (issue 15): the exact public config.json texts under
tests/data/hf/moe give the total and active parameter counts their model cards state, and the same
model fields as the matching preset in cosearch/data/models.yaml."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import cosearch
from cosearch import hf
from cosearch.errors import CosearchError
from cosearch.presets import presets

HF = Path(__file__).parent / "data" / "hf"
BASE = {"training": {"global_batch": 64}, "cluster": {"gpu": "h100-sxm", "gpus": 8}}
#: config directory -> (preset, stated total, stated active, the active figure's significant digits,
#: the card's convention for "active").
#: Sources: Mixtral: Jiang et al. 2024 (arXiv 2401.04088) "46.7B total, 12.9B active"; gpt-oss: OpenAI
#: gpt-oss model card (2025-08-05) Table 1, 20.91B / 3.61B and 116.83B / 5.13B, active without the
#: input embedding; DeepSeek-V3: arXiv 2412.19437 sec. 4.2 "671B total, 37B activated"; Qwen3-30B-A3B:
#: model card "30.5B in total and 3.3B activated"; Llama 4 Scout: Meta's model card "17B activated,
#: 109B total" (the total includes the vision encoder).
CARDS = {
    "mixtral-8x7b-v0.1": ("mixtral-8x7b", 46.7e9, 12.9e9, 3, "all"),
    "gpt-oss-20b": ("gpt-oss-20b", 20.91e9, 3.61e9, 3, "no input embedding"),
    "gpt-oss-120b": ("gpt-oss-120b", 116.83e9, 5.13e9, 3, "no input embedding"),
    "deepseek-v3": ("deepseek-v3", 671e9, 37e9, 2, "all"),
    "qwen3-30b-a3b": ("qwen3-30b-a3b", 30.5e9, 3.3e9, 2, "all"),
    "llama-4-scout-17b-16e-instruct": ("llama4-scout", 109e9, 17e9, 2, "all"),
}
#: Preset keys that describe the source, not the architecture.
META = {"params_b_reported", "active_params_b_reported", "source", "active_excludes_input_embedding"}


def _counts(path: Path) -> dict:
    return cosearch.estimate({**BASE, "model": {"hf_config": str(path), "seq_len": 4096}})


def _scout_vision_params() -> float:
    """Weights of Llama 4 Scout's vision encoder and projector from its vision_config (biases, norms,
    position embeddings left out): 34 layers x (4 x 1408^2 attention + 2 x 1408 x 5632 GELU MLP)
    = 34 x 23,789,568 = 808,845,312; patch embedding 3 x 14 x 14 x 1408 = 827,904; pixel-shuffle MLP
    (1408 x 4 = 5632 -> 4096 -> 4096) 23,068,672 + 16,777,216; projector 4096 -> 5120 text hidden
    20,971,520. Sum 870,490,624."""
    return 34 * (4 * 1408**2 + 2 * 1408 * 5632) + 3 * 14 * 14 * 1408 + 5632 * 4096 + 4096 * 4096 + 4096 * 5120


@pytest.mark.parametrize("name", sorted(CARDS))
def test_moe_config_matches_its_preset(name):
    """Same model fields as the preset written by hand from the same public config (the preset's
    seq_len is the training length; the config's max_position_embeddings is the context)."""
    preset, *_ = CARDS[name]
    fields = hf.load_model(HF / "moe" / name)
    expected = {k: v for k, v in presets()[preset].items() if k not in META}
    assert {k: v for k, v in fields.items() if k != "seq_len"} == {k: v for k, v in expected.items() if k != "seq_len"}
    assert fields["seq_len"] == json.loads((HF / "moe" / name / "config.json").read_text()).get(
        "max_position_embeddings", 10485760)  # Scout: text_config's 10,485,760


@pytest.mark.parametrize("name", sorted(CARDS))
def test_moe_total_parameters_within_one_percent_of_the_card(name):
    _, total, *_ = CARDS[name]
    ours = _counts(HF / "moe" / name)["params"]
    if name.startswith("llama-4-scout"):  # the card's 109B counts the vision encoder: 107.77B + 0.87B = 108.64B
        ours += _scout_vision_params()
    assert ours == pytest.approx(total, rel=0.01)


@pytest.mark.parametrize("name", sorted(CARDS))
def test_moe_active_parameters_match_the_card(name):
    """Within 1 % where the card gives three significant figures (12.9B, 3.61B, 5.13B). Where it gives
    two (37B, 3.3B, 17B) the figure itself is only known to half a unit of its last digit (+-1.4 %,
    1.5 %, 2.9 %), so the count must lie within that rounding interval widened by 1 %:
    DeepSeek-V3 37.55B, Qwen3-30B-A3B 3.353B, Scout 17.17B (all counting both embeddings)."""
    _, _, active, digits, convention = CARDS[name]
    res = _counts(HF / "moe" / name)
    ours = res["active_params"]
    if convention == "no input embedding":
        cfg = json.loads((HF / "moe" / name / "config.json").read_text())
        ours -= cfg["vocab_size"] * cfg["hidden_size"]  # 201,088 x 2,880 = 579,133,440
    if digits >= 3:
        assert ours == pytest.approx(active, rel=0.01)
    else:
        unit = 10 ** (len(str(int(active))) - digits)  # 37e9 -> 1e9, 3.3e9 -> 1e8, 17e9 -> 1e9
        assert unit == {"deepseek-v3": 1e9, "qwen3-30b-a3b": 1e8, "llama-4-scout-17b-16e-instruct": 1e9}[name]
        assert abs(ours - active) <= 0.5 * unit + 0.01 * active
    assert ours < res["params"]


def test_mixtral_by_hand():
    """Mixtral-8x7B layer: attention 2 x 4096^2 + 2 x 4096 x 8 x 128 = 41,943,040; router 4096 x 8
    = 32,768; one expert 3 x 4096 x 14336 = 176,160,768; 32 layers; embeddings 2 x 32000 x 4096 =
    262,144,000. Total 32 x (41,943,040 + 32,768 + 8 x 176,160,768) + 262,144,000 = 46,702,526,464;
    active (2 experts) 32 x 394,297,344 + 262,144,000 = 12,879,659,008."""
    res = _counts(HF / "moe" / "mixtral-8x7b-v0.1")
    assert res["params"] == 32 * (41_943_040 + 32_768 + 8 * 176_160_768) + 262_144_000 == 46_702_526_464
    assert res["active_params"] == 32 * (41_943_040 + 32_768 + 2 * 176_160_768) + 262_144_000 == 12_879_659_008


def test_qwen2_moe_shared_expert_and_deepseek_v2_lite_without_q_lora():
    """Qwen2-57B-A14B: one shared expert of shared_expert_intermediate_size 20480 beside 64 routed
    experts of 2560; 57.4B total (model card "57B"; hub 57.4B). DeepSeek-V2-Lite: q_lora_rank null is a
    full query projection (q_lora_rank 0), 2 shared experts, 1 leading dense layer; model card
    "15.7B total"."""
    q = hf.load_model(HF / "qwen2-57b-a14b")
    assert (q["experts"], q["top_k"], q["ffn_hidden"], q["shared_experts"], q["shared_ffn_hidden"]) == (64, 8, 2560, 1, 20480)
    assert "dense_layers" not in q  # decoder_sparse_step 1, no mlp_only_layers: every layer sparse
    # 28 x (attention 2 x 3584^2 + 2 x 3584 x 512 = 29,360,128 + router 229,376 + 3 x 3584 x (64 x 2560
    # + 20480) = 1,981,808,640) + embeddings 2 x 151936 x 3584 = 1,089,077,248 = 57,408,225,280
    assert _counts(HF / "qwen2-57b-a14b")["params"] == 28 * (29_360_128 + 229_376 + 1_981_808_640) + 1_089_077_248
    assert _counts(HF / "qwen2-57b-a14b")["params"] == pytest.approx(57.4e9, rel=0.01)
    d = hf.load_model(HF / "deepseek-v2-lite")
    assert (d["attention"], d["q_lora_rank"], d["shared_experts"], d["dense_layers"], d["expert_ffn_hidden"]) == (
        "mla", 0, 2, 1, 1408)
    assert "routed_nodes_limit" not in d  # n_group 1: no group-limited routing
    assert _counts(HF / "deepseek-v2-lite")["params"] == pytest.approx(15.7e9, rel=0.01)


def _write(tmp_path: Path, cfg: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def test_interleaved_and_sparse_step_layers_become_leading_dense_layers(tmp_path):
    """Llama 4 Maverick's interleave_moe_layer_step 2 (MoE layers 1, 3, ..., 47) -> 24 dense layers of
    intermediate_size_mlp, as the llama4-maverick preset; Qwen-MoE decoder_sparse_step 2 with
    mlp_only_layers [1] (odd layers 1, 3, ... sparse, less layer 1) -> 25 of 48 dense."""
    cfg = json.loads((HF / "moe" / "llama-4-scout-17b-16e-instruct" / "config.json").read_text())
    cfg["text_config"] = {**cfg["text_config"], "interleave_moe_layer_step": 2, "num_local_experts": 128}
    m = hf.load_model(_write(tmp_path, cfg))
    want = {k: v for k, v in presets()["llama4-maverick"].items() if k not in META and k != "seq_len"}
    assert {k: v for k, v in m.items() if k != "seq_len"} == want
    cfg["text_config"]["moe_layers"] = [0, 47]
    assert hf.load_model(_write(tmp_path, cfg))["dense_layers"] == 46
    q = json.loads((HF / "moe" / "qwen3-30b-a3b" / "config.json").read_text())
    m = hf.load_model(_write(tmp_path, {**q, "decoder_sparse_step": 2, "mlp_only_layers": [1]}))
    assert (m["dense_layers"], m["dense_ffn_hidden"], m["ffn_hidden"]) == (25, 6144, 768)


def test_bad_moe_keys_are_one_line_errors(tmp_path):
    mix = json.loads((HF / "moe" / "mixtral-8x7b-v0.1" / "config.json").read_text())
    for cfg, msg in (({**mix, "num_experts_per_tok": 9}, "'num_experts_per_tok': 9 exceeds num_local_experts 8"),
                     ({**mix, "num_local_experts": 0}, "'num_local_experts' must be a positive integer"),
                     ({**mix, "model_type": "olmoe"}, "'num_local_experts': this mixture-of-experts family is not mapped"),
                     ({**json.loads((HF / "moe" / "qwen3-30b-a3b" / "config.json").read_text()), "mlp_only_layers": [48]},
                      "'mlp_only_layers' must be a list of layer indices in 0..47")):
        with pytest.raises(CosearchError, match=msg) as e:
            cosearch.load_scenario({**BASE, "model": {"hf_config": str(_write(tmp_path, cfg))}})
        assert str(e.value).startswith("model.hf_config:") and "\n" not in str(e.value)


def test_moe_hf_config_overrides_and_estimates_with_expert_parallelism():
    sc = {"training": {"global_batch": 256}, "cluster": {"gpu": "h100-sxm", "gpus": 64},
          "model": {"hf_config": str(HF / "moe" / "mixtral-8x7b-v0.1"), "seq_len": 4096},
          "plan": {"tp": 2, "pp": 4, "ep": 8, "sequence_parallel": True, "zero": 1}}
    via_hf = cosearch.estimate(sc)
    via_preset = cosearch.estimate({**sc, "model": "mixtral-8x7b"})
    for key in ("step_time_s", "memory_gib", "params", "active_params", "breakdown_s"):
        assert via_hf[key] == via_preset[key]
    assert via_hf["breakdown_s"]["ep_comm"] > 0
