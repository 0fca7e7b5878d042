"""torchtitan's pipeline split, both ways: torchtitan counts the embedding and the output as a layer each
(v0.1.0 ``generate_split_points``, v0.2 ``pipeline_llm`` / ``generate_llm_fqn_per_model_part``), so its stages hold
(layers + 2) / stages effective layers, the first and the last a transformer layer fewer. Values worked out by hand."""
from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest
import yaml

from cosearch.frameworks import export, torchtitan
from cosearch.frameworks.torchtitan import _per_rank, _refusal, _split_to_write, split_layers
from cosearch.scenario import parse_scenario
from test_hostile_importers import NO_AC
from test_hostile_importers import _refuses as _refused

MODEL = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "gated_mlp": True,
         "vocab": 128256, "seq_len": 8192, "tied_embeddings": False}
CLUSTER = {"gpu": "h100-sxm", "gpus": 64}


def _scenario(layers, **plan):
    plan = {"microbatch": 1, "zero": 1, "recompute": "op", "sequence_parallel": True, **plan}
    return parse_scenario({"model": dict(MODEL, layers=layers), "cluster": dict(CLUSTER),
                           "training": {"global_batch": 64, "precision": "bf16"}, "plan": plan})


def _read(text, layers=32):
    return torchtitan.parse_toml(NO_AC + text, dict(MODEL, layers=layers), dict(CLUSTER))


def _pipeline(text):
    return tomllib.loads(text)["parallelism"]




def test_split_is_torchtitans():
    # 30 layers + 2 on 4 stages: 8 effective each, the ends a transformer layer fewer
    assert split_layers(30, 4) == [7, 8, 8, 7]
    # 82 on 4 stages: 20 each and 2 over, one more on the first two stages (generate_split_points' extra layers)
    assert split_layers(80, 4) == [20, 21, 20, 19]
    # 34 on 8 stages: 4 each, 2 over
    assert split_layers(32, 8) == [4, 5, 4, 4, 4, 4, 4, 3]
    # v0.2's weights: the ends 0 split the layers evenly
    assert split_layers(32, 4, 0, 0) == [8, 8, 8, 8]


def test_32_layers_pp_2_layers_per_stage_17_reads_as_pp_2():
    # (32 + 2) / 17 = 2 stages, one per rank: 16 layers on each (the old rule refused 17: 32 % (2 x 17) != 0)
    sc = _read("[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_layers_per_stage = 17\n")
    assert (sc.plan.pp, sc.plan.interleave, sc.plan.schedule) == (2, 1, None)


def test_30_layers_on_pp_4_export_8_and_read_back():
    sc = _scenario(30, tp=2, pp=4)
    text = export(sc, "torchtitan")
    par = _pipeline(text)
    assert par["pipeline_parallel_layers_per_stage"] == 8       # (30 + 2) / 4; the old rule wrote 30 // 4 = 7
    assert par["pipeline_parallel_schedule"] == "1F1B"
    back = torchtitan.parse_toml(text, dict(MODEL, layers=30), dict(CLUSTER))
    assert (back.plan.pp, back.plan.interleave) == (4, 1)


def test_80_layers_pp_4_interleave_5_is_refused_not_written_as_4():
    # the old export wrote 80 / (4 x 5) = 4: torchtitan v0.1.0 asserts 82 % 4 == 0, v0.2 makes ceil(82 / 4) = 21 stages
    # for 4 ranks; no interleave fits at pp 4 (82 = 2 x 41), so the message names a pp (with an interleave) that does
    sc = _scenario(80, tp=2, pp=4, interleave=5)
    err = _refused(lambda: export(sc, "torchtitan"), "plan.pp", "82", "no whole pipeline_parallel_layers_per_stage",
                   "use pp = 2 with interleave = 2")
    assert "pp = 4" in err.message
    # the suggestion exports: 80 layers on pp 2 x 2 stages is torchtitan's default split, 40 on each rank
    par = _pipeline(export(_scenario(80, tp=2, pp=2, interleave=2), "torchtitan"))
    assert "pipeline_parallel_layers_per_stage" not in par and par["pipeline_parallel_schedule"] == "Interleaved1F1B"


def test_80_layers_pp_2_interleave_3_is_refused_naming_an_interleave():
    # 82 effective layers on pp 2 x 3 = 6 stages: not whole, and 3 is not torchtitan's default (2)
    _refused(lambda: export(_scenario(80, tp=2, pp=2, interleave=3), "torchtitan"), "plan.interleave",
             "interleave = 3", "6 stages do not divide them", "use interleave = 2")


def test_export_never_puts_more_layers_on_a_rank_than_the_model():
    # 80 layers on pp 4, 1F1B: torchtitan's default split 20, 21, 20, 19 puts 21 on rank 1, the model evaluates 20
    _refused(lambda: export(_scenario(80, tp=2, pp=4), "torchtitan"), "plan.pp",
             "21 layers on pipeline rank 1", "evaluates at 20", "use pp = 2")
    # 30 layers on pp 2 x 2: (30 + 2) / 4 = 8 a stage, 15 layers on each rank, and the model paces the pipeline with
    # ceil(30 / 4) x 2 = 16 layers, a rank that would not exist (Megatron's pp-2 rule); no interleave fits at pp 2,
    # pp 4 does: (30 + 2) / (4 x 2) = 4 a stage, 7, 8, 8, 7 layers per rank as the model evaluates them
    _refused(lambda: export(_scenario(30, tp=2, pp=2, interleave=2), "torchtitan"), "plan.pp",
             "at most 15 layers", "paces the pipeline with 16", "use pp = 4")
    assert _pipeline(export(_scenario(30, tp=2, pp=4, interleave=2), "torchtitan"))[
        "pipeline_parallel_layers_per_stage"] == 4


def test_cli_refusal_is_one_line_exit_2(tmp_path):
    sc = _scenario(80, tp=2, pp=4, interleave=5)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(sc.model_dump(exclude_none=True)))
    r = subprocess.run([sys.executable, "-m", "cosearch", "export", str(path), "--format", "torchtitan"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "plan.pp" in r.stderr, r.stderr


@pytest.mark.parametrize("schedule, v", [("1f1b", 1), ("interleaved", 2), ("interleaved", 3), ("interleaved", 4),
                                         ("zb-v", 2)])
def test_every_written_split_is_torchtitans_and_reads_back(schedule, v):
    """Over 2..120 layers and pp 2..8: a written layers_per_stage is (layers + 2) / (pp x v), which v0.1.0's exact
    rule and v0.2's ceil rule take alike; a left-out one is torchtitan's default stages per rank; the import derives
    the same stages per rank from either."""
    written = 0
    for layers in range(2, 121):
        for pp in range(2, 9):
            lps, _ = _split_to_write(layers, pp, v, schedule)
            if lps is None:
                continue
            written += 1
            par = {} if lps == 0 else {"pipeline_parallel_layers_per_stage": lps}
            if lps:
                assert layers + 2 == pp * v * lps                      # v0.1.0: an exact fit
                assert _refusal(layers, pp, schedule, lps) is None     # v0.2
            else:
                assert v == (1 if schedule == "1f1b" else 2)
            assert _per_rank(par, layers, pp, schedule, 1, 1) == v
    assert written >= 30  # splits written at each (layers, pp) that fits: 35 to 491 of the 833


@pytest.mark.parametrize("text, field, words", [
    # 1F1B runs one stage per rank: ceil(34 / 9) = 4 stages on pp 2 is 2 per rank
    ("pipeline_parallel_layers_per_stage = 9\n", "parallelism.pipeline_parallel_layers_per_stage",
     ("= 4 stages, 2 per rank", "1F1B", "fits at this pp: 17..33 (v0.1.0 takes 17), or leave it out")),
    # a multi-stage schedule needs 2 or more: ceil(34 / 17) = 2 stages on pp 2 is 1 per rank
    ('pipeline_parallel_schedule = "Interleaved1F1B"\npipeline_parallel_layers_per_stage = 17\n',
     "parallelism.pipeline_parallel_layers_per_stage", ("1 per rank", "at least 2")),
    # ZBVZeroBubble's V places exactly 2: ceil(34 / 6) = 6 stages on pp 2 is 3 per rank
    ('pipeline_parallel_schedule = "ZBVZeroBubble"\npipeline_parallel_layers_per_stage = 6\n',
     "parallelism.pipeline_parallel_layers_per_stage", ("3 per rank", "exactly 2")),
    # ceil(34 / 16) = 3 stages: not a multiple of pp 2
    ("pipeline_parallel_layers_per_stage = 16\n", "parallelism.pipeline_parallel_layers_per_stage",
     ("= 3 stages, not a multiple of pipeline_parallel_degree 2",)),
])
def test_import_refuses_what_torchtitan_refuses(text, field, words):
    _refused(lambda: _read("[parallelism]\npipeline_parallel_degree = 2\n" + text), field, *words)


def test_import_refuses_80_layers_pp_4_layers_per_stage_4():
    # what the old export wrote for pp 4 x interleave 5: torchtitan makes ceil(82 / 4) = 21 stages for 4 ranks
    text = '[parallelism]\npipeline_parallel_degree = 4\npipeline_parallel_schedule = "Interleaved1F1B"\n' \
           "pipeline_parallel_layers_per_stage = 4\n"
    _refused(lambda: _read(text, layers=80), "parallelism.pipeline_parallel_layers_per_stage", "21 stages")


def test_import_follows_torchtitans_default_stages_per_rank():
    # without layers_per_stage torchtitan runs 2 stages per rank under a multi-stage schedule (it was refused here):
    # 34 effective layers on 4 stages, 8, 9, 8, 7 layers, 16 on each rank
    sc = _read('[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "Interleaved1F1B"\n')
    assert (sc.plan.pp, sc.plan.interleave, sc.plan.schedule) == (2, 2, None)
    # ZBVZeroBubble: 32 effective layers on 8 stages, 3, 4 x 6, 3; rank 0 holds stages 0 and 7 (6 layers), the
    # others 8, as the model evaluates ZB-V (ceil(30 / 8) x 2 = 8, both ends' missing layers on rank 0)
    sc = _read('[parallelism]\npipeline_parallel_degree = 4\npipeline_parallel_schedule = "ZBVZeroBubble"\n', 30)
    assert (sc.plan.pp, sc.plan.interleave, sc.plan.schedule) == (4, 2, "zb-v")
    # and 1 per rank under 1F1B: 30 layers on pp 4, 7, 8, 8, 7
    sc = _read("[parallelism]\npipeline_parallel_degree = 4\n", 30)
    assert (sc.plan.pp, sc.plan.interleave) == (4, 1)


def test_import_refuses_a_split_the_model_does_not_evaluate():
    # 32 layers on pp 4, 1F1B by default: 8, 9, 8, 7 puts 9 on rank 1, the model evaluates 8; no layers_per_stage
    # fits (34 is not a multiple of 4), v0.2's end weights 0 do (8 each)
    _refused(lambda: _read("[parallelism]\npipeline_parallel_degree = 4\n"),
             "parallelism.pipeline_parallel_layers_per_stage", "absent (torchtitan's default: 1 stage per rank)",
             "9 layers on pipeline rank 1", "evaluates at 8",
             "pipeline_parallel_first_stage_less_layers = 0 and pipeline_parallel_last_stage_less_layers = 0 fits")
    text = ("[parallelism]\npipeline_parallel_degree = 4\npipeline_parallel_first_stage_less_layers = 0\n"
            "pipeline_parallel_last_stage_less_layers = 0\n")
    assert (_read(text).plan.pp, _read(text).plan.interleave) == (4, 1)
    # more stages than effective layers: torchtitan's ValueError
    _refused(lambda: _read('[parallelism]\npipeline_parallel_degree = 8\npipeline_parallel_schedule = '
                           '"Interleaved1F1B"\n', layers=4), "parallelism.pipeline_parallel_degree", "16 stages")
