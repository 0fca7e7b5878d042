"""The uneven pipeline split of the Megatron-LM export (``--decoder-first/last-pipeline-num-layers``) against the
model's per-rank layer counts (``cosearch.model.memory.stage_layers``): the model evaluates the first rank (the
memory-critical one, pp micro-batches of activations in flight under 1F1B) a layer short when the split is uneven,
so the export must never put more layers there (nor on the last stage, with its MTP modules), and the import
refuses a split that does. The cases run on a small model (``_sc``) and on the real layouts (DeepSeek-V3, Qwen3-235B,
Llama 3 405B and 70B: ``scenario`` of tests/test_export.py)."""
from __future__ import annotations

import itertools

import pytest

from cosearch import CosearchError, estimate
from cosearch.frameworks import export, megatron
from cosearch.model.memory import stage_layers

from test_export import LLAMA_70B, _same, scenario

FIRST, LAST = megatron.FIRST, megatron.LAST
LLAMA_405B = {"layers": 126, "hidden": 16384, "heads": 128, "kv_heads": 8, "ffn_hidden": 53248, "gated_mlp": True,
              "vocab": 128256, "seq_len": 8192, "tied_embeddings": False}
#: The mixture-of-experts plans' batch (no token budget) and a Llama 3 405B cluster.
MOE_BATCH, H100_1024 = {"global_batch": 1024, "tokens": None}, {"gpu": "h100-sxm", "gpus": 1024}


def _sc(layers, pp, interleave=1, mtp=0):
    model = {"layers": layers, "hidden": 1024, "heads": 8, "vocab": 32000, "seq_len": 2048}
    if mtp:
        model["mtp_layers"] = mtp
    return scenario(model, {"global_batch": 64, "tokens": None}, {"gpu": "h100-sxm", "gpus": pp}, pp=pp,
                    interleave=interleave)


def _ends(tokens):
    """(first, last) written by the flags (None where a flag is absent)."""
    toks = [str(t) for t in tokens]
    get = (lambda f: int(toks[toks.index(f) + 1]) if f in toks else None)
    return get(FIRST), get(LAST)


@pytest.mark.parametrize("sc, first, middle, last, comment", [
    # 31 on pp 4: fullest 8, deficit 1 -> the model evaluates first 7, middle 8, last 8 (this export used to write
    # first 8, last 7: one layer more on the first rank than the model charged)
    (_sc(31, 4), 7, 8, 8, "7 (first), 8 x 2 (middle), 8 (last)"),
    # Llama 3 405B's layout: 126 on pp 16, fullest 8, deficit 2 -> 7 on the first and last, 8 on the 14 others
    (_sc(126, 16), 7, 8, 7, "7 (first), 8 x 14 (middle), 7 (last)"),
    # MTP: 30 layers + 1 MTP on pp 4 are 31 for the model (first 7, last 8 with the MTP module): 7 and 7 + 1
    (_sc(30, 4, mtp=1), 7, 8, 7, "7 (first), 8 x 2 (middle), 7 (last, + 1 MTP)"),
    # DeepSeek-V3's 61 + 1 MTP on pp 8: 62 -> fullest 8, deficit 2, ends at 7: first 7, last 6 + 1
    (_sc(61, 8, mtp=1), 7, 8, 6, "7 (first), 8 x 6 (middle), 6 (last, + 1 MTP)"),
    # deficit 3: 29 on pp 4 leave 13 for ends the model evaluates at 7 each; the first the smaller share
    (_sc(29, 4), 6, 8, 7, "6 (first), 8 x 2 (middle), 7 (last)"),
    # pp 2: 31 layers, fullest 16, deficit 1 -> first 15, last 16
    (_sc(31, 2), 15, 0, 16, "15 (first), 16 (last)"),
    # two virtual stages: 28 on pp 4 -> fullest 8 (ceil(28/8)*2), deficit 4, ends at 7 each, multiples of 2: 6 and 6
    (_sc(28, 4, 2), 6, 8, 6, "6 (first), 8 x 2 (middle), 6 (last); each over 2 virtual"),
    # the real models. DeepSeek-V3: 61 layers + 1 MTP module on the last stage
    (scenario("deepseek-v3", MOE_BATCH, {"gpu": "h800", "gpus": 1024}, zero=1, pp=8, ep=32, moe_dispatcher="deepep"),
     7, 8, 6, "7 (first), 8 x 6 (middle), 6 (last, + 1 MTP)"),
    (scenario("deepseek-v3", MOE_BATCH, {"gpu": "h800", "gpus": 1024}, zero=1, pp=16, ep=32, moe_dispatcher="deepep"),
     3, 4, 2, "3 (first), 4 x 14 (middle), 2 (last, + 1 MTP)"),
    (scenario("qwen3-235b-a22b", MOE_BATCH, {"gpu": "h100-sxm", "gpus": 512}, zero=1, pp=8, ep=16), 11, 12, 11,
     "11 (first), 12 x 6 (middle), 11 (last)"),
    (scenario("qwen3-235b-a22b", MOE_BATCH, {"gpu": "h100-sxm", "gpus": 512}, zero=1, pp=16, ep=16), 5, 6, 5,
     "5 (first), 6 x 14 (middle), 5 (last)"),
    # Llama 3 405B's own layout (Dubey et al. 2024, sec. 3.3.2): 7 on the first and last, 8 on the others
    (scenario(LLAMA_405B, cluster=H100_1024, tp=8, pp=16, sequence_parallel=True, zero=1),
     7, 8, 7, "7 (first), 8 x 14 (middle), 7 (last)"),
    # two virtual stages: every stage's count a multiple of 2; 76 layers on pp 8 leave 16 for the ends, which the
    # model evaluates at 9 each (fullest 10, deficit 4): 8 and 8, both within it
    (scenario(dict(LLAMA_70B, layers=76), cluster={"gpu": "h100-sxm", "gpus": 64}, tp=8, pp=8, interleave=2,
              sequence_parallel=True, zero=1), 8, 10, 8, "8 (first), 10 x 6 (middle), 8 (last); each over 2 virtual"),
])
def test_exported_split_matches_the_model(sc, first, middle, last, comment):
    """pp not dividing the layers: the middle ranks hold the model's fullest count, first and last the rest (the
    first the smaller share, neither above the model's count for it); the command line parses back to a plan with
    the same step time."""
    layers, pp, v = sc.model.layers, sc.plan.pp, sc.plan.interleave
    assert megatron.uneven_stages(sc) == (first, middle, last)
    toks = megatron.flags(sc)
    assert _ends(toks) == (first, last)
    line = " ".join(str(t) for t in toks)
    assert f"{FIRST} {first} {LAST} {last}" in line
    assert f"--pipeline-model-parallel-size {pp} {FIRST} {first} {LAST} {last}" in line
    assert ("--num-virtual-stages-per-pipeline-rank 2" in line) == (v == 2)
    assert "--num-layers-per-virtual-pipeline-stage" not in line
    text = export(sc, "megatron")
    mid = "" if pp == 2 else f"{middle} x {pp - 2} (middle), "
    assert f"# decoder layers per pipeline stage: {first} (first), {mid}{last} (last" in text
    assert f"# decoder layers per pipeline stage: {comment}" in text
    # the exported command line reads back, to the same estimate
    back = megatron.parse_args(text, sc.cluster.model_dump(exclude_none=True))
    assert (back.model.layers, back.plan.pp, back.plan.interleave) == (layers, pp, v)
    assert estimate(back)["step_time_s"] == pytest.approx(estimate(sc)["step_time_s"], rel=1e-9)
    if sc.model.experts == 0:
        _same(sc, back)


@pytest.mark.parametrize("sc, field, words", [
    # 30 on pp 4 with 2 virtual stages: fullest 8, ends 14, which the model evaluates at 7 each; multiples of 2
    # within 7 hold 12 -- the interleave makes the model's counts impossible; interleave 1 splits 7, 8, 8, 7
    (_sc(30, 4, 2), "plan.interleave", "at most 12, not 14; use interleave = 1"),
    # 10 on pp 8: 2 on each middle stage leave -2 for the ends
    (_sc(10, 8), "plan.pp", "use a smaller pp"),
    # 10 layers on 8 stages: 2 on each middle one leave nothing for the first and last
    (scenario(dict(LLAMA_70B, layers=10), cluster={"gpu": "h100-sxm", "gpus": 64}, tp=8, pp=8), "plan.pp",
     "at least 1 on each"),
    # 61 layers, pp 4, 2 virtual stages: 16 per middle rank leave 29, which 2 virtual stages cannot split
    (scenario("deepseek-v3", MOE_BATCH, {"gpu": "h800", "gpus": 1024}, zero=1, pp=4, interleave=2, ep=32,
              moe_dispatcher="deepep"), "plan.interleave", "not a multiple of 2"),
    # Llama 3 405B, pp 16, 2 virtual stages: 14 layers for the ends, which the model evaluates at 7 each; multiples
    # of 2 within 7 hold 12 (this export used to write 8 and 6, a first stage one layer above the model's 7)
    (scenario(LLAMA_405B, cluster=H100_1024, tp=8, pp=16, interleave=2, sequence_parallel=True, zero=1),
     "plan.interleave", "at most 12, not 14; use interleave = 1"),
])
def test_a_split_the_model_did_not_evaluate_is_refused(sc, field, words):
    for call in (lambda: megatron.uneven_stages(sc), lambda: export(sc, "megatron")):
        with pytest.raises(CosearchError) as err:
            call()
        assert err.value.field == field and words in str(err.value) and "\n" not in str(err.value)


def _feasible(layers, pp, v, mtp):
    """Whether any split fits the model's counts (brute force, the check the export's refusals must agree with)."""
    full, first_max, last_max = (int(n) for n in stage_layers(layers + mtp, pp, v))
    rest = layers - (pp - 2) * full
    for first in range(v, rest, v):
        last = rest - first
        if (last >= v and last % v == 0 and first <= first_max and last + mtp <= last_max
                and (pp > 2 or max(first, last + mtp) == full)):
            return True
    return False


def test_exported_split_never_exceeds_the_models_counts():
    """Over layers 8..130, pp 2..16, interleave 1..4 (and 0 or 1 MTP module): where the export writes a split, the
    first stage holds at most the model's first-rank count, the last with its MTP at most the model's last-rank
    count, the middle ones the fullest count, and the stages add up to the layers; where it refuses, no split
    fits (and the refusal names plan.pp or plan.interleave)."""
    written = refused = 0
    for layers, pp, v, mtp in itertools.product(range(8, 131), range(2, 17), range(1, 5), (0, 1)):
        if layers % (pp * v) == 0:
            continue
        sc = _sc(layers, pp, v, mtp)
        full, first_max, last_max = (int(n) for n in stage_layers(layers + mtp, pp, v))
        try:
            toks = megatron.flags(sc)
        except CosearchError as err:
            assert err.field in ("plan.pp", "plan.interleave"), str(err)
            assert not _feasible(layers, pp, v, mtp), (layers, pp, v, mtp, str(err))
            refused += 1
            continue
        first, last = _ends(toks)
        middle = (layers - first - last) // (pp - 2) if pp > 2 else full
        case = (layers, pp, v, mtp, first, middle, last, first_max, full, last_max)
        assert megatron.uneven_stages(sc) == (first, middle if pp > 2 else 0, last), case
        assert first <= first_max and last + mtp <= last_max, case
        assert middle == full, case
        assert first + (pp - 2) * middle + last == layers, case
        assert first >= v and last >= v and first % v == 0 and last % v == 0, case
        assert first <= last or last + mtp == last_max, case  # the first the smaller share where the last has room
        written += 1
    assert written > 1000 and refused > 1000


_BASE = ("--num-layers {layers} --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --micro-batch-size 1 "
         "--vocab-size 32000 --bf16 --pipeline-model-parallel-size {pp} ")


def _args(layers, mtp, pp, extra):
    return _BASE.format(layers=layers, pp=pp) + (f"--mtp-num-layers {mtp} " if mtp else "") + extra


@pytest.mark.parametrize("layers, mtp, pp, gpus, extra, split", [
    (31, None, 4, 4, f"{FIRST} 7 {LAST} 8", (7, 8, 8)),
    (31, None, 4, 4, f"{FIRST} 7", (7, 8, 8)),  # the last holds the middle count, 8, as the model evaluates it
    (31, None, 2, 2, f"{FIRST} 15 {LAST} 16", (15, 0, 16)),
    # DeepSeek-V3's 61 + 1 MTP: the middle ranks hold the fullest count
    (61, 1, 8, 64, f"{FIRST} 7 {LAST} 6", (7, 8, 6)),
    (61, 1, 2, 64, f"{FIRST} 31 {LAST} 30", (31, 0, 30)),
])
def test_import_reads_a_split_within_the_models_counts(layers, mtp, pp, gpus, extra, split):
    args = _args(layers, mtp, pp, extra)
    sc = megatron.parse_args(args, {"gpu": "h100-sxm", "gpus": gpus})
    assert (sc.model.layers, sc.plan.pp, sc.model.mtp_layers) == (layers, pp, mtp)
    assert megatron.stage_split(layers, pp, 1, mtp or 0, *_ends(args.split())) == split


@pytest.mark.parametrize("layers, mtp, pp, gpus, extra, field, words", [
    # the old export's split of 31 on pp 4: 8 on the first stage, which the model evaluates at 7
    (31, None, 4, 4, f"{FIRST} 8 {LAST} 7", FIRST, (f"8: cosearch evaluates the first stage (pp micro-batches of "
     f"activations in flight) at 7 layers and would under-estimate its memory by 1 layer; at most 7, e.g. {FIRST} 7 "
     f"{LAST} 8",)),
    (31, None, 4, 4, f"{LAST} 7", FIRST, ("8 (absent: the middle count)",)),
    # 30 layers + 1 MTP on pp 4: the model evaluates the last stage at 8 with the MTP module; 8 decoder layers there
    # are 9
    (30, 1, 4, 4, f"{FIRST} 6 {LAST} 8", LAST, ("8 + 1 MTP", "at most 7")),
    # DeepSeek-V3's 61 + 1 MTP. Middle ranks at 6, not the 8 the model evaluates: the message gives the count and a
    # split that has it
    (61, 1, 8, 64, f"{FIRST} 13 {LAST} 12", FIRST, (f"need 8 each, e.g. {FIRST} 7",)),
    (61, 1, 8, 64, f"{FIRST} 5 {LAST} 8", LAST, ("at most 6",)),  # 8 + MTP above the model's 7
    # the first stage holds the middle count, 8, where the model evaluates 7 (deficit 2: first and last at 7)
    (61, 1, 8, 64, f"{LAST} 5", FIRST, ("8 (absent: the middle count): cosearch evaluates the first stage",)),
    (61, 1, 8, 64, f"{FIRST} 7", FIRST, ("7 middle stages",)),
    (61, 1, 8, 64, f"{FIRST} 0 {LAST} 6", FIRST, ("positive",)),
    (61, 1, 2, 64, f"{FIRST} 30 {LAST} 31", LAST, ("at most 30",)),
    (61, 1, 2, 64, f"{FIRST} 31 {LAST} 31", FIRST, ("--num-layers is 61",)),
    (61, 1, 8, 64, "--pipeline-model-parallel-layout 'Et*3|(tt|)*29,m|L'", "--pipeline-model-parallel-layout",
     ("not modelled",)),
])
def test_import_refuses_a_split_beyond_the_models_counts(layers, mtp, pp, gpus, extra, field, words):
    with pytest.raises(CosearchError) as err:
        megatron.parse_args(_args(layers, mtp, pp, extra), {"gpu": "h100-sxm", "gpus": gpus})
    assert err.value.field == field and all(w in str(err.value) for w in words) and "\n" not in str(err.value)


def test_pp2_interleave_refusal_suggests_an_interleave_that_exports():
    """45 layers + 4 MTP on pp 2 with 5 virtual stages: the refusal used to suggest interleave 3, which the export
    then refused with a split "24, 27, 21 (first, middle, last)" (no middle stage exists at pp 2): at interleave 3
    the model evaluates the fullest rank at 27, which pp 2 needs on the first stage or on the last with its MTP
    modules, and multiples of 3 within the ends' counts (26 and 26 - 4) cannot hold it. The suggestion must export."""
    with pytest.raises(CosearchError) as err:
        megatron.uneven_stages(_sc(45, 2, 5, 4))
    msg = str(err.value)
    assert err.value.field == "plan.interleave" and "\n" not in msg and "middle" not in msg
    assert msg.endswith("use interleave = 1")
    sc = _sc(45, 2, 1, 4)
    assert megatron.uneven_stages(sc) == (24, 0, 21)  # 24 (model: 24) and 21 + 4 MTP = 25, the fullest
    text = export(sc, "megatron")
    back = megatron.parse_args(text, sc.cluster.model_dump(exclude_none=True))
    assert estimate(back)["step_time_s"] == pytest.approx(estimate(sc)["step_time_s"], rel=1e-9)
    # interleave 3 itself: refused on plan.interleave, naming the pp 2 rule (not a split with a middle stage)
    for call in (lambda: megatron.uneven_stages(_sc(45, 2, 3, 4)), lambda: export(_sc(45, 2, 3, 4), "megatron")):
        with pytest.raises(CosearchError) as err:
            call()
        msg = str(err.value)
        assert err.value.field == "plan.interleave" and "middle" not in msg and "\n" not in msg
        assert "fullest rank at 27 layers, which with pp 2 the first or the last stage + 4 MTP must hold" in msg
        assert msg.endswith("use interleave = 1")


def test_suggested_interleave_always_exports():
    """Over layers 8..80, pp 2..8, interleave 2..5 and 0..4 MTP modules: where plan.interleave is refused with a
    suggested interleave, the export takes that interleave."""
    suggested = 0
    for layers, pp, v, mtp in itertools.product(range(8, 81), range(2, 9), range(2, 6), range(5)):
        if layers % (pp * v) == 0:
            continue
        try:
            megatron.uneven_stages(_sc(layers, pp, v, mtp))
        except CosearchError as err:
            words = str(err).rsplit("use interleave = ", 1)
            if err.field != "plan.interleave" or len(words) < 2 or not words[1].isdigit():
                continue
            megatron.flags(_sc(layers, pp, int(words[1]), mtp))  # raises if the suggestion is refused
            suggested += 1
    assert suggested > 100


def test_import_refusal_examples_are_splits_the_import_reads():
    """The "e.g." split a stage_split refusal gives is the export's (_model_split) and reads back; at pp 2 where no
    split has an end at the fullest count (8 layers + 1 MTP, 2 virtual stages: the model evaluates 6, 5 and 5), none
    is given (the ends' bounds alone gave 4 and 4, which the pp 2 rule refuses)."""
    examples = 0
    for layers, pp, v, mtp in itertools.product(range(6, 28), range(2, 6), range(1, 4), (0, 1, 2)):
        for first, last in itertools.product([None, *range(1, layers)], repeat=2):
            if (first, last) == (None, None):
                continue
            try:
                megatron.stage_split(layers, pp, v, mtp, first, last)
            except CosearchError as err:
                words = str(err).split(", e.g. ")
                if len(words) == 2:
                    toks = words[1].split()
                    megatron.stage_split(layers, pp, v, mtp, int(toks[1]), int(toks[3]))  # raises if refused
                    examples += 1
    assert examples > 1000
    with pytest.raises(CosearchError) as err:
        megatron.stage_split(8, 2, 2, 1, 6, None)
    assert str(err.value).endswith("at most 5") and "e.g." not in str(err.value)


@pytest.mark.parametrize("layers, pp, extra, field, example", [
    # DeepSeek-V3's 61 layers on pp 8 without a split flag: Megatron-LM's validate_args refuses it
    (61, 8, "", "--pipeline-model-parallel-size", (6, 7)),
    (61, 8, "--mtp-num-layers 1", "--pipeline-model-parallel-size", (7, 6)),  # 61 + 1 MTP: the export's 7 and 6
    (61, 8, "--num-virtual-stages-per-pipeline-rank 3", "--pipeline-model-parallel-size", None),
    (31, 4, "", "--pipeline-model-parallel-size", (7, 8)),
    # 60 on pp 4 is 15 per stage, which 2 virtual stages cannot split evenly
    (60, 4, "--num-virtual-stages-per-pipeline-rank 2", "--num-virtual-stages-per-pipeline-rank", (14, 14)),
    (61, 1, "--num-virtual-stages-per-pipeline-rank 3", "--num-virtual-stages-per-pipeline-rank", None),
])
def test_import_refuses_layers_pp_does_not_divide_without_a_split(layers, pp, extra, field, example):
    """Without --decoder-first/last-pipeline-num-layers, --num-layers must divide by pp (and by pp * the virtual
    stages), as Megatron-LM requires; it was read silently, and the model evaluated an uneven split nobody ran.
    The refusal names the flag and gives the split the export would write, which then reads back."""
    args = _BASE.format(layers=layers, pp=pp) + extra
    with pytest.raises(CosearchError) as err:
        megatron.parse_args(args, {"gpu": "h100-sxm", "gpus": pp})
    msg = str(err.value)
    assert err.value.field == field and "\n" not in msg
    if field == "--pipeline-model-parallel-size":
        assert f"{pp} does not divide --num-layers {layers}" in msg
        assert "Number of layers should be divisible by the pipeline-model-parallel size" in msg
    if example is None:
        assert "e.g." not in msg and "split fits" in msg
        return
    assert msg.endswith(f"e.g. {FIRST} {example[0]} {LAST} {example[1]}")
    sc = megatron.parse_args(args + f" {FIRST} {example[0]} {LAST} {example[1]}", {"gpu": "h100-sxm", "gpus": pp})
    split = megatron.uneven_stages(sc)
    assert split is not None and (split[0], split[2]) == example


@pytest.mark.parametrize("layers, pp, extra", [
    (64, 8, ""), (64, 8, "--num-virtual-stages-per-pipeline-rank 2"),
    (64, 8, "--num-layers-per-virtual-pipeline-stage 4"),
    (61, 1, ""), (62, 2, "--mtp-num-layers 1"),  # MTP modules are not counted in Megatron's divisibility check
])
def test_import_reads_layers_pp_divides_without_a_split(layers, pp, extra):
    sc = megatron.parse_args(_BASE.format(layers=layers, pp=pp) + extra, {"gpu": "h100-sxm", "gpus": pp})
    assert (sc.model.layers, sc.plan.pp) == (layers, pp) and megatron.uneven_stages(sc) is None
