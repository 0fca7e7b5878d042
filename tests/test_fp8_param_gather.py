"""plan.fp8_param_gather (Megatron --fp8-param-gather, torchtitan's float8 FSDP all-gather): weights held in fp8
alone and all-gathered in fp8. Checked by hand against the model's own parameter counts and collective formulas."""
from __future__ import annotations

import pytest

import cosearch
from cosearch.errors import CosearchError
from cosearch.model import memory as mem

GIB = 2.0 ** 30

LLAMA70_3D = {"model": "llama3-70b", "training": {"global_batch": 512, "precision": "fp8"},
              "cluster": {"gpu": "h100-sxm", "gpus": 64},
              "plan": {"tp": 4, "pp": 4, "interleave": 5, "sequence_parallel": True, "zero": 1}}
LLAMA8_FSDP = {"model": "llama3-8b", "training": {"global_batch": 512, "precision": "fp8"},
               "cluster": {"gpu": "h100-sxm", "gpus": 64},
               "plan": {"zero": 3, "microbatch": 1, "recompute": "full"}}


def _with(sc, **plan):
    return {**sc, "plan": {**sc["plan"], **plan}}


def test_weight_bytes_per_parameter():
    assert mem.weight_bytes(0.0) == 2.0          # 16-bit
    assert mem.weight_bytes(1.0) == 3.0          # 16-bit + Transformer Engine's fp8 copy
    assert mem.weight_bytes(1.0, 1.0) == 1.0     # fp8 parameters alone


def test_fp8_weights_take_a_third_of_the_weight_memory_and_nothing_else_moves():
    # Llama 3 70B on TP 4 x PP 4: the weights a GPU holds drop from 3 B to 1 B a parameter; gradients,
    # optimizer states and activations stay as they were
    off = cosearch.estimate(LLAMA70_3D)
    on = cosearch.estimate(_with(LLAMA70_3D, fp8_param_gather=True))
    w_off, w_on = off["memory_breakdown_gib"]["weights"], on["memory_breakdown_gib"]["weights"]
    assert w_on == pytest.approx(w_off / 3.0, rel=1e-12)
    for k in ("gradients", "optimizer", "activations"):
        assert on["memory_breakdown_gib"][k] == pytest.approx(off["memory_breakdown_gib"][k], rel=1e-12)
    assert off["memory_gib"] - on["memory_gib"] == pytest.approx(2.0 / 3.0 * w_off, rel=1e-9)
    # the weights a GPU holds: about 70.6e9 / 16 (embedding and output layer on the end stages) at 1 B
    assert 3.5 < w_on < 5.5


def test_fsdp_gathers_move_half_the_bytes_in_fp8():
    # pure FSDP (zero 3, nothing hidden: fsdp_overlap 0), 32 layers: a micro-batch exposes the first layer's
    # gather, the forward gather G and the backward gather G and gradient reduce-scatter S (= G in 16 bits).
    # fp8 weights halve both gathers' bytes, not the 16-bit reduce-scatter: (G/64 + G + S) / (G/32 + 3G) with
    # G = S/2 is 0.665 of the traffic time; the per-call latencies (32 calls each) do not shrink, so a bit more
    sc = _with(LLAMA8_FSDP, fsdp_overlap=0.0)
    off = cosearch.estimate(sc)["breakdown_s"]
    on = cosearch.estimate(_with(sc, fp8_param_gather=True))["breakdown_s"]
    assert on["compute"] == off["compute"]
    bandwidth_only = (1 / 64 + 2) / (1 / 32 + 3)
    assert bandwidth_only == pytest.approx(0.665, abs=1e-3)
    assert bandwidth_only < on["dp_comm"] / off["dp_comm"] < 0.75
    # the gathered layers' buffers are 1-byte too
    assert cosearch.estimate(_with(sc, fp8_param_gather=True))["memory_gib"] < cosearch.estimate(sc)["memory_gib"]


def test_distributed_optimizer_gathers_fp8_weights():
    # ZeRO-1 (Megatron's distributed optimizer) on 8 data-parallel ranks of one node: the gradient all-reduce
    # (reduce-scatter + all-gather of 2-byte values) becomes a 2-byte reduce-scatter and a 1-byte all-gather,
    # 3/4 of its bandwidth time; with gradient reduction after the backward (overlap_grad_reduce false) all of it
    # is exposed
    sc = {"model": "llama3-8b", "training": {"global_batch": 64, "precision": "fp8"},
          "cluster": {"gpu": "h100-sxm", "gpus": 8},
          "plan": {"zero": 1, "microbatch": 1, "recompute": "full", "overlap_grad_reduce": False}}
    off = cosearch.estimate(sc)["breakdown_s"]["dp_comm"]
    on = cosearch.estimate(_with(sc, fp8_param_gather=True))["breakdown_s"]["dp_comm"]
    assert on == pytest.approx(0.75 * off, rel=0.01)


def test_fp8_weights_under_every_collective_algorithm():
    # the distributed optimizer's split reduction (reduce-scatter + fp8 all-gather) under a named algorithm: a
    # reduce-scatter costs what the all-gather does (was a ValueError 'unknown collective' outside the default)
    sc = _with({"model": "llama3-8b", "training": {"global_batch": 64, "precision": "fp8"},
                "cluster": {"gpu": "h100-sxm", "gpus": 16}, "plan": {"zero": 1, "overlap_grad_reduce": False}},
               fp8_param_gather=True)
    for algo in ("ring", "tree", "hierarchical", "direct", "auto"):
        on = cosearch.estimate(_with(sc, dp_collective=algo))["breakdown_s"]["dp_comm"]
        off = cosearch.estimate(_with(sc, dp_collective=algo, fp8_param_gather=False))["breakdown_s"]["dp_comm"]
        assert 0.0 < on < off, algo  # 1-byte weights gathered instead of 2-byte gradients: less traffic


def test_fp8_param_gather_needs_fp8_and_sharded_weights():
    with pytest.raises(CosearchError, match=r"^plan.fp8_param_gather: needs training.precision fp8.*bf16"):
        cosearch.estimate({**_with(LLAMA70_3D, fp8_param_gather=True), "training": {"global_batch": 512}})
    with pytest.raises(CosearchError, match=r"^plan.fp8_param_gather: .*plan.zero is 0"):
        cosearch.estimate(_with(LLAMA70_3D, fp8_param_gather=True, zero=0))


def test_bridge_fp8_recipes_gather_fp8_weights():
    # Megatron-Bridge's MXFP8 and current-scaling recipes set fp8_param_gather (mixed_precision.py); the
    # validation rows that name them run with it, others without
    from cosearch._cells import fp8_param_gather_of
    assert fp8_param_gather_of("fp8-mx (MXFP8)", 1) and fp8_param_gather_of("fp8-cs (per-tensor current scaling)", 1)
    assert not fp8_param_gather_of("fp8-mx (MXFP8)", 0)
    assert not fp8_param_gather_of("fp8 (TE hybrid, delayed scaling; yaml fp8_hybrid)", 1)
    assert not fp8_param_gather_of("bf16", 1)


def test_stated_fp8_weight_switches_map_to_fp8_param_gather():
    # NeMo 1.x's model.fp8_params and torchtitan's enable_fsdp_float8_all_gather, named in the precision cell or set
    # by the recipe (the fp8_params cell that recipe_settings.csv fills), on sharded weights of an fp8 run only
    from cosearch._cells import fp8_param_gather_of
    assert fp8_param_gather_of("fp8 (TE; fp8_hybrid E4M3/E5M2, fp8_params; scaling history not stated)", 1)
    assert fp8_param_gather_of("fp8 (torchao float8 tensorwise; enable_fsdp_float8_all_gather)", 3)
    assert fp8_param_gather_of("fp8 (Transformer Engine; scaling recipe not stated)", 1, "yes")
    assert not fp8_param_gather_of("fp8 (Transformer Engine; scaling recipe not stated)", 1, "no")
    assert not fp8_param_gather_of("fp8 (Transformer Engine; scaling recipe not stated)", 1, float("nan"))
    assert not fp8_param_gather_of("fp8 (TE; fp8_params)", 0)  # nothing sharded: nothing gathered
    assert not fp8_param_gather_of("bf16", 1, "yes")  # a recipe's switch means nothing without fp8
    # a switch the cell names as off is off
    for off in ("fp8 (TE; no fp8_params)", "fp8 (TE; fp8_params=false)", "fp8 (TE; fp8_params: False)",
                "fp8 (torchao; enable_fsdp_float8_all_gather = false)", "fp8 (TE; without fp8_params)"):
        assert not fp8_param_gather_of(off, 1), off
    assert fp8_param_gather_of("fp8 (TE; fp8_params=true)", 1) and fp8_param_gather_of("fp8 (TE; fp8_params: yes)", 1)


def test_validation_rows_run_with_the_fp8_weights_their_recipe_states():
    # S33 states fp8_params in its fp8 cells, S7's fp8 rows take it from the dgxc-benchmarking configure.sh
    # (recipe_settings.csv), torchtitan rows 541-542 name enable_fsdp_float8_all_gather; their bf16 twins and the
    # S8 table (the launcher's yaml sets no fp8_params) run without
    from cosearch.validation import DGXC_2024_PATH, TORCHTITAN_PATH, build_candidates, load_published_runs

    def gathers(*paths):
        c = build_candidates(load_published_runs(*paths))
        out: dict[int, bool] = {}
        for pos, sc in zip(c.row_of, c.scenarios):  # every candidate of a row states the same recipe
            out.setdefault(int(c.rows["row_id"].iloc[pos]), bool(sc["plan"].get("fp8_param_gather", False)))
        return out

    s33, dense, titan = gathers(DGXC_2024_PATH), gathers(), gathers(TORCHTITAN_PATH)
    assert s33[706] and s33[733] and not s33[701] and not s33[727]
    assert all(dense[r] for r in (67, 72, 79, 84, 90, 94)) and not dense[73] and not dense[85]
    assert not any(dense[r] for r in range(178, 190))
    assert titan[541] and titan[542] and not titan[513]


def test_explain_offers_fp8_weights_where_they_apply():
    from cosearch.neighbours import neighbours
    from cosearch.scenario import parse_scenario, scenario_columns

    def labels(sc):
        s = parse_scenario(sc)
        return {c.label for c in neighbours(s, scenario_columns(s))}

    assert "fp8_param_gather false -> true" in labels(LLAMA70_3D)
    assert "fp8_param_gather false -> true" not in labels(_with(LLAMA70_3D, fp8_param_gather=True))
    assert "fp8_param_gather false -> true" not in labels(_with(LLAMA70_3D, zero=0))
    assert "fp8_param_gather false -> true" not in labels({**LLAMA70_3D, "training": {"global_batch": 512}})
