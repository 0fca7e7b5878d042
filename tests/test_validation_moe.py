"""Published MoE training runs: the step time each row's source implies, checked by hand arithmetic."""
from __future__ import annotations

import pandas as pd
import pytest

from cosearch.validation_moe import load_moe_runs, measured_step_time, tokens_per_s_per_gpu_from_gpu_hours


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return load_moe_runs()


def _row(runs: pd.DataFrame, row_id: int) -> pd.Series:
    return runs.set_index("row_id").loc[row_id]


def test_tokens_per_gpu_to_step_time_megatron_bridge_deepseek_v3_gb200(runs):
    # Megatron-Bridge 26.02, DGX-GB200, DeepSeek-V3 FP8-MX: 256 GPUs, GBS 4096, seq 4096, 3955 tokens/s/GPU.
    # step = 4096 x 4096 / (3955 x 256) = 16,777,216 / 1,012,480 = 16.5704 s
    r = _row(runs, 305)
    assert (r.model, r.num_gpus, r.global_batch_size, r.seq_len, r.tokens_per_s_per_gpu) == ("DeepSeek-V3", 256, 4096, 4096, 3955)
    assert r.step_time_s == pytest.approx(16.5704, abs=1e-4)
    assert r.step_time_from == "tokens_per_s_per_gpu"


def test_gpu_hours_to_step_time_deepseek_v3_report(runs):
    # DeepSeek-V3 report: 180K H800 GPU-hours per trillion tokens on 2048 H800; final batch 15360 x 4096 tokens.
    # tokens/s/GPU = 1e12 / (180,000 x 3600) = 1e12 / 6.48e8 = 1543.21
    # step = 15360 x 4096 / (1543.21 x 2048) = 62,914,560 / 3,160,494 = 19.9066 s (3.7 days per 1e12 tokens, as stated)
    assert tokens_per_s_per_gpu_from_gpu_hours(180_000) == pytest.approx(1543.21, abs=0.01)
    r = _row(runs, 367)
    assert (r.gpu, r.num_gpus, r.pp, r.ep, r.schedule) == ("h800", 2048, 16, 64, "dualpipe")
    assert r.step_time_s == pytest.approx(19.9066, abs=1e-3)
    assert r.step_time_from == "gpu_hours_per_trillion_tokens"
    days_per_trillion = 1e12 / (r.measured_tokens_per_s_per_gpu * 2048) / 86400
    assert days_per_trillion == pytest.approx(3.66, abs=0.01)  # the report rounds it to 3.7 days


def test_tflops_with_flops_per_token_to_step_time_gb200_baseline(runs):
    # Megatron-LM GB200 discussion, baseline: 494.46 TFLOP/s/GPU, 256 GB200, GBS 2048, seq 4096, and
    # 2.497e11 model FLOPs per token (961 TFLOP/s / 3848 tokens/s of Megatron-Bridge's DeepSeek-V3 w/o MTP row).
    # step = 2048 x 4096 x 2.497e11 / (494.46e12 x 256) = 2.09464e18 / 1.26582e17 = 16.548 s
    r = _row(runs, 369)
    assert r.model_flops_per_token == pytest.approx(961e12 / 3848, rel=1e-3)
    assert r.step_time_s == pytest.approx(16.548, abs=1e-3)
    assert r.step_time_from == "tflops_per_gpu x model_flops_per_token"


def test_gpu_count_missing_gives_no_step_time_but_a_per_gpu_rate(runs):
    # DeepSeek-V2: 172.8K GPU-hours per trillion tokens, GPU count not published.
    # tokens/s/GPU = 1e12 / (172,800 x 3600) = 1607.51
    r = _row(runs, 368)
    assert pd.isna(r.step_time_s) and r.step_time_from == "no num_gpus"
    assert r.measured_tokens_per_s_per_gpu == pytest.approx(1607.51, abs=0.01)


def test_stated_step_time_wins_and_agrees_with_the_sources_own_throughput_and_mfu(runs):
    # Grok-1 314B BF16 on 2048 H100 (dgxc-benchmarking): 21.09 s per step, 1,591,011 tokens/s, MFU 41.0 %.
    # tokens/s = 8192 x 4096 / 21.09 = 1,591,011; MFU = 4096 x 4.27e15 / (21.09 x 2048 x 989e12) = 40.9 %
    r = _row(runs, 360)
    assert r.step_time_s == 21.09 and r.step_time_from == "iteration_time_s"
    assert r.seq_len * r.global_batch_size / r.step_time_s == pytest.approx(r.tokens_per_s, abs=1)
    assert 4096 * 4.27e15 / (21.09 * 2048 * 989e12) == pytest.approx(r.mfu_pct / 100, abs=0.002)


def test_every_stated_time_matches_every_stated_throughput(runs):
    """Transcription check: where a source states both a step time and tokens/s, they agree (0.1 %)."""
    both = runs[runs.iteration_time_s.notna() & runs.tokens_per_s.notna()]
    assert len(both) == 12
    ratio = both.global_batch_size * both.seq_len / both.iteration_time_s / both.tokens_per_s
    assert ratio.between(0.999, 1.001).all()


def test_flops_per_token_is_consistent_within_each_model(runs):
    """Transcription check: Megatron's model FLOPs per token depend only on the model (and seq, MTP), so
    TFLOP/s over tokens/s is one number per model; the one row its source misprints is marked low."""
    # S28 (NeMo AutoModel) counts with its own formulas: GPT-OSS-120B 3.03e10 per token against Megatron's 2.72e10
    seq4k = runs[(runs.seq_len == 4096) & runs.implied_flops_per_token.notna() & ~runs.source_id.isin(["S26", "S28"])]
    for (model, mtp), grp in seq4k.groupby(["model", seq4k.mtp_layers.fillna(0)]):
        med = grp.implied_flops_per_token.median()
        off = (grp.implied_flops_per_token / med - 1).abs() > 0.01
        assert set(grp[off].confidence) <= {"low"}, (model, grp[off].row_id.tolist())
    assert _row(runs, 318).confidence == "low"


def test_batch_bookkeeping_holds_except_where_noted(runs):
    """GBS = MBS x DP x GA with DP = GPUs / (TP x PP x CP); the two rows where the source breaks it say so."""
    rows = runs.dropna(subset=["micro_batch_size", "grad_accum_steps", "dp"])
    bad = rows[rows.global_batch_size != rows.micro_batch_size * rows.dp * rows.grad_accum_steps]
    assert sorted(bad.row_id) == [324, 334]
    assert bad.notes.str.contains("disagrees").all()
    assert (rows.dp == rows.num_gpus // (rows.tp * rows.pp * rows.cp)).all()


def test_coverage_and_provenance(runs):
    assert len(runs) >= 15 and runs.model.nunique() >= 4 and runs.row_id.is_unique
    assert runs.source_location.str.len().gt(20).all() and runs.confidence.isin(["high", "medium", "low"]).all()
    moe = runs[["experts", "top_k", "expert_ffn_hidden", "attention", "ep"]]
    assert moe.notna().all().all() and runs.attention.isin(["mha", "gqa", "mla"]).all()
    mla = runs[runs.attention == "mla"]
    assert mla[["q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"]].notna().all().all()
    # EP divides the data-parallel x context-parallel ranks (Megatron-Core's folding of EP into DP x CP)
    known = runs.dropna(subset=["dp"])
    assert ((known.dp * known.cp * known.tp) % known.ep == 0).all()


def test_measured_step_time_on_a_plain_dict():
    # 8 GPUs x 1000 tokens/s/GPU, GBS 16 x seq 1000 = 16,000 tokens -> 2 s
    row = {"global_batch_size": 16, "seq_len": 1000, "num_gpus": 8, "tokens_per_s_per_gpu": 1000}
    assert measured_step_time(row) == (2.0, "tokens_per_s_per_gpu")
    assert measured_step_time({"global_batch_size": 16, "seq_len": 1000, "num_gpus": 8})[0] is None
