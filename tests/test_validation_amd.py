"""The held-out training runs on AMD Instinct GPUs (experiments/data/validation/published_runs_amd.csv, S34 and S35):
each step time is derived from the source's own numbers as SOURCES.md says, each row becomes the stated GPU and plan
with its stack's facts, the set is reported apart by experiments/validate.py and no fit or band reads it. The prediction
errors are not asserted (held out: nothing is tuned to them)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import experiment_script

from cosearch._cells import gpu_id
from cosearch.fingerprint import model_fingerprint
from cosearch.validation import build_candidates, load_published_runs, validation_table

ROOT = Path(__file__).resolve().parents[1]
AMD = ROOT / "experiments" / "data" / "validation" / "published_runs_amd.csv"
RESULTS = ROOT / "experiments" / "results"

#: MLLOG ``tracked_stats`` throughput (sequences per second) of the last 12,288-sample block of each MLPerf Training
#: v5.1 llama31_8b result file the rows cite (mlcommons/training_results_v5.1 @4da2d1cd): AMD result_0.txt and
#: Supermicro result_1.txt, both at samples_count 172032
MLPERF_SAMPLES_PER_S = {801: 30.694098572187265, 802: 29.73503904316222}
#: steady-state steps 2-9 of job 16784 as amd-agi/maxtext-slurm LLAMA31_405B_RUN_REPORT.md section 5 lists them
REPORT_405B_STEPS = [37.73, 37.94, 38.09, 38.17, 38.21, 38.22, 38.19, 38.21]


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return pd.read_csv(AMD).set_index("row_id")


@pytest.fixture(scope="module")
def cands():
    return build_candidates(load_published_runs(AMD))


def _chosen(cands, rids):
    """The scenarios validate.py predicted rows ``rids`` with (the fastest candidate that fits), one prediction."""
    from cosearch.validation import predict

    _, chosen = predict(cands)
    return [cands.scenarios[chosen[cands.rows.index[cands.rows["row_id"] == rid][0]]] for rid in rids]


def test_the_table_has_the_published_columns_and_two_sources(rows):
    header = pd.read_csv(AMD.parent / "published_runs_public.csv", nrows=0).columns.tolist()
    assert pd.read_csv(AMD, nrows=0).columns.tolist() == header
    assert rows.index.tolist() == [801, 802, 803, 804]
    assert rows["source_id"].to_dict() == {801: "S34", 802: "S34", 803: "S35", 804: "S35"}


def test_mlperf_step_times_are_the_global_batch_over_the_logged_sequences_per_second(rows):
    for rid, samples_per_s in MLPERF_SAMPLES_PER_S.items():
        r = rows.loc[rid]
        # callbacks.py: throughput = sequences / summed batch times, so one step of 32 sequences takes 32 / throughput
        assert r.iteration_time_s == pytest.approx(32 / samples_per_s, rel=1e-8)
        assert repr(samples_per_s) in r.other_metrics
        # the plan: TP = PP = CP = 1 on 8 GPUs is DP 8; 8 ranks x micro-batch 2 x 2 accumulation steps = 32 sequences
        assert (r.tp, r.pp, r.cp, r.dp, r.num_gpus) == (1, 1, 1, 8, 8)
        assert r.dp * r.micro_batch_size * r.grad_accum_steps == r.global_batch_size == 32
        assert r.seq_len == 8192
    # AMD's 1.04 s by hand: 32 / 30.694 sequences per second
    assert rows.loc[801, "iteration_time_s"] == pytest.approx(1.0425457, abs=1e-6)


def test_maxtext_step_times_are_the_reports_own(rows):
    r = rows.loc[803]
    # the mean of the eight steady-state steps the report lists ("~38.1 s/step")
    assert r.iteration_time_s == pytest.approx(sum(REPORT_405B_STEPS) / 8, abs=1e-9) == pytest.approx(38.095)
    # and its ~645 tokens/s/device: 64 GPUs x 3 sequences of 8,192 tokens per step
    assert r.global_batch_size * r.seq_len / (r.tokens_per_s_per_gpu * r.num_gpus) == pytest.approx(38.1, abs=0.05)
    assert r.global_batch_size == r.micro_batch_size * r.num_gpus == 192
    r = rows.loc[804]
    # WithOUTANP: 5.67 s mean step, 1,444.4 tokens/s/device, one sequence of 8,192 tokens on each of 16 GPUs
    assert r.iteration_time_s == 5.67
    assert r.global_batch_size * r.seq_len / (r.tokens_per_s_per_gpu * r.num_gpus) == pytest.approx(5.67, rel=2e-3)
    # the reduced-depth model: 405B widths, 40 layers = the report's 131.7B parameters (untied 128,256 vocabulary)
    d, f, layers, vocab = r.hidden_size, r.ffn_hidden_size, r.n_layers, r.vocab_size
    per_layer = d * d * (1 + 2 * r.n_kv_heads / r.n_heads) + d * d + 3 * d * f + 2 * d
    assert (layers * per_layer + 2 * vocab * d + d) / 1e9 == pytest.approx(r.params_b_as_reported, abs=0.05)


def test_every_row_is_a_mi355x_with_its_stated_plan_and_stack_facts(rows, cands):
    assert not cands.skipped and len(cands.rows) == 4
    for rid, r in rows.iterrows():
        assert gpu_id(r.gpu_type) == ("mi355x", {}), rid
    t = validation_table(cands).set_index("row_id")
    assert (t["gpu"] == "mi355x").all() and (t["precision"] == "fp8").all() and t["fits"].all()
    assert t["gpus"].to_dict() == {801: 8, 802: 8, 803: 64, 804: 16}
    assert t["microbatch"].to_dict() == {801: 2, 802: 2, 803: 3, 804: 1}
    assert (t["tp"] == 1).all() and (t["pp"] == 1).all() and (t["cp"] == 1).all()
    # Megatron-Core's distributed optimizer for the NeMo rows; pure FSDP (ZeRO-3) for MaxText
    assert t["zero"].to_dict() == {801: 1, 802: 1, 803: 3, 804: 3}
    # the 40-layer run states remat_policy=full; the 405B run does not, and only full recompute fits it
    assert t.loc[804, "recompute"] == "full" and t.loc[803, "recompute"] == "full"
    nemo, maxtext = _chosen(cands, (801, 804))
    assert nemo["training"]["attention"] == "flash" and nemo["training"]["fusion"] == "fused"
    assert "fsdp_overlap" not in nemo["plan"] and not nemo["plan"]["tp_comm_overlap"]
    # XLA's latency-hiding scheduler prefetches the FSDP gathers; jax.checkpoint's rerun stops early
    assert maxtext["plan"]["fsdp_overlap"] == 1.0 and maxtext["plan"]["recompute_early_stop"] is True
    assert maxtext["training"]["attention"] == "flash"


def test_the_set_is_reported_apart_and_no_fit_reads_it(monkeypatch):
    import cosearch.validation as validation
    import cosearch.validation_moe as validation_moe

    validate = experiment_script("validate")
    assert ("amd", AMD) in [(name, Path(path)) for name, path, _ in validate.HELD_OUT_SETS]
    read: list[Path] = []
    real = pd.read_csv

    def spy(path, *a, **k):
        read.append(Path(path).resolve())
        return real(path, *a, **k)

    monkeypatch.setattr(validation.pd, "read_csv", spy)
    monkeypatch.setattr(validation_moe.pd, "read_csv", spy)
    calibration_rows = build_candidates(load_published_runs()).rows      # calibrate_default.py, validate.py's fits
    experiment_script("prediction_interval").load_candidates()          # the dense 80 % band
    both = validate.dense_and_moe_candidates()                           # the MoE fits and the MoE band
    assert read and AMD.resolve() not in read
    for ids in (calibration_rows["row_id"], both.rows["row_id"]):
        assert not set(ids) & {801, 802, 803, 804}
    assert not set(calibration_rows["source_id"]) & {"S34", "S35"}


def test_the_committed_results_are_this_model_and_this_table(tmp_path):
    validate = experiment_script("validate")
    from cosearch.model.profile import DEFAULT_PROFILE

    validate._held_out_set(DEFAULT_PROFILE, tmp_path, "amd", AMD, "AMD")
    assert (tmp_path / "validation_amd.csv").read_bytes() == (RESULTS / "validation_amd.csv").read_bytes()
    committed = json.loads((RESULTS / "validation_amd.json").read_text())
    assert committed["model_fingerprint"] == model_fingerprint()
    assert committed == json.loads((tmp_path / "validation_amd.json").read_text())
    assert committed["rows"] == 4 and committed["fits"] == 4
