"""Model from a Hugging Face config.json: real public configs give their stated parameter counts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import cosearch
from cosearch import hf
from cosearch.errors import CosearchError
from cosearch.search.space import parse_space

HF = Path(__file__).parent / "data" / "hf"
#: Parameter counts the model cards / model pages state (tests/data/hf/SOURCES.md).
STATED = {
    "llama-2-7b-hf": 6.74e9, "llama-3-8b": 8.03e9, "llama-3-70b": 70.6e9, "mistral-7b-v0.1": 7.24e9,
    "qwen2-7b-instruct": 7.62e9, "gemma-2b": 2.51e9, "pythia-160m": 162_322_944, "pythia-1.4b": 1_414_647_808,
    "pythia-6.9b": 6_857_302_016, "gpt-neox-20b": 20_554_567_680, "gpt2": 124e6, "gpt2-medium": 355e6,
    "gpt2-large": 774e6,
    # exact public config texts added for issue 15 (SOURCES.md: text origin and the count's source)
    "llama-3.1-8b": 8.03e9, "llama-3.1-70b-instruct": 70.554e9, "qwen2.5-7b": 7.616e9, "qwen3-8b": 8.19e9,
    "phi-4": 14.7e9,
    # head_dim wider than hidden / heads, mapped since issue 15: Gemma technical report (arXiv 2403.08295)
    # Table 2, 7B: 786,432,000 embedding + 7,751,248,896 non-embedding parameters = 8,537,680,896
    "gemma-7b": 8_537_680_896,
}
#: Byte sizes of the config texts that are exact copies (SOURCES.md): the hub's own file size where a
#: hub page states it (gpt-neox-20b, pythia-160m, pythia-1.4b, mixtral), else the public copy's length.
#: A re-save (json.dump, another indent, a dropped final newline or CRLF) changes the size.
EXACT_BYTES = {
    "gpt-neox-20b": 617, "pythia-160m": 569, "pythia-1.4b": 570, "mixtral-8x7b-v0.1": 720, "gpt2-large": 666,
    "llama-3.1-8b": 826, "llama-3.1-70b-instruct": 855, "qwen2.5-7b": 686, "qwen3-8b": 729, "phi-4": 856,
    "moe/deepseek-v3": 1660, "moe/gpt-oss-120b": 2089, "moe/gpt-oss-20b": 1594, "moe/qwen3-30b-a3b": 964,
    "moe/llama-4-scout-17b-16e-instruct": 1883, "moe/mixtral-8x7b-v0.1": 720,
    # texts written from published values whose size equals the hub's (or a verbatim mirror's) file
    "gpt2": 665, "pythia-6.9b": 571, "gemma-2b": 627, "llama-3-8b": 654, "llama-3-70b": 654,
}
BASE = {"training": {"global_batch": 64}, "cluster": {"gpu": "h100-sxm", "gpus": 8}}


@pytest.mark.parametrize("name", sorted(STATED))
def test_stated_parameter_count_within_one_percent(name):
    res = cosearch.estimate({**BASE, "model": {"hf_config": str(HF / name / "config.json"), "seq_len": 2048}})
    assert res["params"] == pytest.approx(STATED[name], rel=0.01)


def test_at_least_eight_architectures_and_families():
    types = {json.loads((HF / n / "config.json").read_text())["model_type"] for n in STATED}
    assert len(STATED) >= 8 and {"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gpt_neox", "gpt2"} <= types


@pytest.mark.parametrize("name", sorted(EXACT_BYTES))
def test_exact_copies_keep_their_bytes(name):
    blob = (HF / name / "config.json").read_bytes()
    assert len(blob) == EXACT_BYTES[name]
    assert isinstance(json.loads(blob), dict)


def test_exact_gpt_neox_20b_is_the_hub_text():
    # huggingface.co/EleutherAI/gpt-neox-20b/blob/3523781c.../config.json: 617 bytes, gelu_fast, 0.1 dropouts
    cfg = json.loads((HF / "gpt-neox-20b" / "config.json").read_text())
    assert (cfg["hidden_act"], cfg["hidden_dropout_prob"], cfg["transformers_version"]) == ("gelu_fast", 0.1, "4.19.0.dev0")
    assert hf.load_model(HF / "gpt-neox-20b")["gated_mlp"] is False
    # phi-4 is the one CRLF text: every line but the last ends in \r\n, as the public copy has it
    assert (HF / "phi-4" / "config.json").read_bytes().count(b"\r\n") == 30


def test_fields_of_llama3_8b():
    assert hf.load_model(HF / "llama-3-8b") == {
        "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "gated_mlp": True,
        "vocab": 128256, "seq_len": 8192, "tied_embeddings": False}
    assert hf.load_model(HF / "gpt2")["tied_embeddings"] is True
    assert hf.load_model(HF / "gpt2")["ffn_hidden"] == 4 * 768  # n_inner null
    assert hf.load_model(HF / "pythia-1.4b")["gated_mlp"] is False
    assert hf.load_model(HF / "gemma-2b")["tied_embeddings"] is True


@pytest.mark.parametrize("name,key", [("mixtral-8x7b-v0.1", "num_local_experts"), ("qwen2-57b-a14b", "num_experts"),
                                      ("deepseek-v2-lite", "n_routed_experts")])
def test_unmapped_moe_family_refused_with_reason(name, key, tmp_path):
    """Mixtral, Qwen2-MoE and DeepSeek map since issue 15 (tests/test_hf_moe.py); the same expert keys
    under a family that is not mapped (OLMoE) are refused, naming the key."""
    assert hf.load_model(HF / name)["experts"] == json.loads((HF / name / "config.json").read_text())[key]
    cfg = {**json.loads((HF / name / "config.json").read_text()), "model_type": "olmoe"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CosearchError) as e:
        cosearch.load_scenario({**BASE, "model": {"hf_config": str(tmp_path)}})
    msg = str(e.value)
    assert msg.startswith("model.hf_config:") and key in msg and "mixture-of-experts family is not mapped" in msg
    assert "\n" not in msg


def test_attention_wider_than_model_maps_head_dim():
    """Gemma-7B: head_dim 256 x 16 heads = 4096 attention width against hidden_size 3072 (the model
    has head_dim since issue 13); 8.54B (count in STATED). Qwen3-8B's head_dim 128 x 32 = 4096 =
    hidden_size is left implicit (no head_dim field: the dense path)."""
    m = hf.load_model(HF / "gemma-7b")
    assert (m["head_dim"], m["heads"], m["hidden"], m["tied_embeddings"]) == (256, 16, 3072, True)
    assert "head_dim" not in hf.load_model(HF / "qwen3-8b")


def test_unknown_model_type_and_missing_key_are_named(tmp_path):
    cfg = json.loads((HF / "llama-3-8b" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "model_type": "rwkv"}))
    with pytest.raises(CosearchError, match="model_type 'rwkv' is not mapped"):
        hf.load_model(tmp_path)
    del cfg["num_hidden_layers"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CosearchError, match="'num_hidden_layers'"):
        hf.load_model(tmp_path / "config.json")
    cfg["num_hidden_layers"] = "32"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CosearchError, match="'num_hidden_layers' must be a positive integer"):
        hf.load_model(tmp_path)


def test_unknown_model_field_beside_hf_config_is_named():
    with pytest.raises(CosearchError, match="model.expert_count: unknown key"):
        cosearch.load_scenario({**BASE, "model": {"hf_config": str(HF / "gpt2"), "expert_count": 8}})


def test_overrides_win_and_seq_len_defaults_to_max_position_embeddings():
    sc = cosearch.load_scenario({**BASE, "model": {"hf_config": str(HF / "mistral-7b-v0.1")}})
    assert sc.model.seq_len == 32768 and sc.model.kv_heads == 8
    sc = cosearch.load_scenario({**BASE, "model": {"hf_config": str(HF / "mistral-7b-v0.1"), "seq_len": 8192,
                                                   "layers": 16, "tied_embeddings": True}})
    assert (sc.model.seq_len, sc.model.layers, sc.model.tied_embeddings, sc.model.hidden) == (8192, 16, True, 4096)


def test_bad_files_are_one_line_errors(tmp_path):
    for blob, msg in ((b"\xff\xfe{}", "not UTF-8"), (b"{nope", "not valid JSON"), (b"[1]", "JSON list"),
                      (b" " * (hf.MAX_BYTES + 1), "larger than")):
        (tmp_path / "config.json").write_bytes(blob)
        with pytest.raises(CosearchError, match=msg):
            hf.load_model(tmp_path)
    with pytest.raises(CosearchError, match="cannot read .*nothing is downloaded"):
        hf.load_model(tmp_path / "missing" / "config.json")
    with pytest.raises(CosearchError, match="expected the path"):
        hf.resolve_section({"hf_config": 3})


def test_space_resolves_hf_config_with_list_overrides():
    sp = parse_space({**BASE, "model": {"hf_config": str(HF / "llama-3-8b"), "seq_len": [4096, 8192]},
                      "plan": {"tp": [1, 2]}})
    assert sp.base["model"]["hidden"] == 4096 and sp.dim("model.seq_len").choices == [4096, 8192]
    assert sp.to_dict()["model"]["layers"] == 32  # the stored space does not need the file


def test_cli_estimate_reads_hf_config(tmp_path):
    import subprocess
    import sys

    import yaml

    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump({**BASE, "model": {"hf_config": str(HF / "llama-2-7b-hf"), "seq_len": 4096}}))
    out = subprocess.run([sys.executable, "-m", "cosearch", "estimate", str(path), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["params"] == pytest.approx(6.74e9, rel=0.01)
