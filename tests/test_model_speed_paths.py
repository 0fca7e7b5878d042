"""The speed rewrites of issue 13 (MoE mix at 1e6 configurations/s) give numpy's own bits.

Each rewrite replaces a numpy call or a repeated formula by a cheaper one that must be exact: the
bit mask in ``_ops.where`` (a +0.0 branch), ``_ops.clip`` as minimum(maximum()), one span test for a
group's bandwidth and latency, the all-to-all geometry shared by dispatch and combine, and the
attention parameters split into total and per-rank counts. The references are numpy's functions and
the formulas as they stood, on values chosen to break a careless rewrite: NaN of both signs, -0.0,
infinities, and bounds in the wrong order.
"""
from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest

from cosearch.model import _ops as ops
from cosearch.model import collectives as coll
from cosearch.model import communication as comm
from cosearch.model import moe
from cosearch.model.moe_params import attention_params_local, attention_params_total, widths

#: Awkward float64 values: NaN and -NaN (sign bit set), signed zeros, infinities, ordinary numbers.
AWKWARD = np.array([np.nan, -np.nan, 0.0, -0.0, 0.5, 1.0, 3.0, 9.0, -2.0, np.inf, -np.inf])


def _bits(x) -> bytes:
    return np.ascontiguousarray(x, dtype=np.float64).tobytes()


def _tiled(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every AWKWARD value against every other in both branches, with both condition values, repeated
    up to at least ``n`` rows (the bit-mask path starts at ``ops._MASK_MIN_ROWS`` rows)."""
    a, b, c = (x.ravel() for x in np.meshgrid(AWKWARD, AWKWARD, [False, True], indexing="ij"))
    reps = -(-n // a.size)
    return np.tile(a, reps), np.tile(b, reps), np.tile(c.astype(bool), reps)


@pytest.mark.parametrize("n", [10, 4096])
def test_where_on_float64_branches_gives_numpys_bits(n):
    a, b, cond = _tiled(n)
    assert (n >= ops._MASK_MIN_ROWS) == (cond.size >= ops._MASK_MIN_ROWS)
    for got, want in ((ops.where(cond, a, 0.0), np.where(cond, a, 0.0)),
                      (ops.where(cond, 0.0, b), np.where(cond, 0.0, b)),
                      (ops.where(cond, a, b), np.where(cond, a, b)),
                      (ops.where(cond, a, 2.5), np.where(cond, a, 2.5)),
                      (ops.where(cond, -np.nan, b), np.where(cond, -np.nan, b)),
                      (ops.where(cond, np.float64(-0.0), b), np.where(cond, np.float64(-0.0), b))):
        assert got.dtype == want.dtype == np.float64 and got.shape == want.shape
        assert _bits(got) == _bits(want)
    for x, y in itertools.product(AWKWARD, repeat=2):  # two constants: bit masks
        x, y = float(x), float(y)
        got, want = ops.where(cond, x, y), np.where(cond, x, y)
        assert got.dtype == want.dtype == np.float64 and _bits(got) == _bits(want), (x, y)
    # a -0.0 branch is not all-zero bits: it must take numpy's path and keep its sign
    got = ops.where(cond, a, -0.0)
    assert _bits(got) == _bits(np.where(cond, a, -0.0))
    assert np.signbit(got[~cond]).all()


def test_where_mask_path_leaves_its_inputs_alone_and_other_dtypes_to_numpy():
    a, _, cond = _tiled(4096)
    a_before = a.copy()
    out = ops.where(cond, a, 0.0)
    assert _bits(a) == _bits(a_before) and not np.shares_memory(out, a)
    ints = np.arange(cond.size)  # an int64 branch: numpy's result (float64 with a float 0.0 branch)
    assert ops.where(cond, ints, 0.0).dtype == np.where(cond, ints, 0.0).dtype
    assert ops.where(cond, 1, 0).dtype == np.where(cond, 1, 0).dtype  # int constants: numpy's path
    short = a[:7]  # a branch of another shape broadcasts (numpy's path)
    assert _bits(ops.where(cond[:7], short, a[0])) == _bits(np.where(cond[:7], short, a[0]))
    assert ops.where(True, 2.0, 0.0) == 2.0 and ops.where(False, 2.0, 0.0) == 0.0  # the scalar path


def test_clip_gives_numpys_bits_for_every_ordering_of_awkward_values():
    x, lo, hi = (v.ravel() for v in np.meshgrid(AWKWARD, AWKWARD, AWKWARD, indexing="ij"))
    assert _bits(ops.clip(x, lo, hi)) == _bits(np.clip(x, lo, hi))  # lo > hi and NaN bounds included
    for lo_ in (1.0, 0.0, -0.0, 0.5, -2.0, np.inf, -np.inf, np.nan):  # the minimum(maximum()) path and numpy's
        assert _bits(ops.clip(x, lo_, hi)) == _bits(np.clip(x, lo_, hi)), lo_
    for v, lo_, hi_ in itertools.product((np.nan, -0.0, 0.0, 0.5, 7.0), (0.0, -0.0, 1.0), (1.0, 4.0, -0.0)):
        assert _bits(ops.clip(np.float64(v), lo_, hi_)) == _bits(np.clip(np.float64(v), lo_, hi_))
        assert _bits(ops.clip(np.full(3, v), lo_, hi_)) == _bits(np.clip(np.full(3, v), lo_, hi_))


def _group_grid():
    size = np.array([1.0, 2.0, 8.0, 64.0, 0.0, np.nan, np.inf])
    stride = np.array([1.0, 4.0, 8.0, 0.0, np.nan])
    domain = np.array([8.0, 72.0, 4.0, np.inf, np.nan])
    return (v.ravel() for v in np.meshgrid(size, stride, domain, indexing="ij"))


def test_group_link_equals_bandwidth_and_latency_apart():
    size, stride, domain = _group_grid()
    with np.errstate(divide="ignore", invalid="ignore"):
        bw, lat = comm.group_link(size, stride, domain, 450e9, 50e9, 3e-6, 8e-6)
        assert _bits(bw) == _bits(comm.group_bandwidth_Bps(size, stride, domain, 450e9, 50e9))
        assert _bits(lat) == _bits(comm.group_latency_s(size, stride, domain, 3e-6, 8e-6))
        fabric = coll.Fabric(450e9, 50e9, 3e-6, 8e-6, domain, 2.0, 16.0)  # oversubscribed: spine share in play
        bw, lat = fabric.link(size, stride)
        assert _bits(bw) == _bits(fabric.bandwidth_Bps(size, stride))
        assert _bits(lat) == _bits(fabric.latency_s(size, stride))


def test_group_link_hand_computed():
    """8 ranks at stride 2 in an 8-GPU NVLink domain span 16 GPUs: across the network, 8/2 = 4 members
    per node share 4 NICs of 50 GB/s = 200 GB/s (below NVLink's 450), at the network latency."""
    bw, lat = comm.group_link(8.0, 2.0, 8.0, 450e9, 50e9, 3e-6, 8e-6)
    assert (bw, lat) == (200e9, 8e-6)
    assert comm.group_link(4.0, 2.0, 8.0, 450e9, 50e9, 3e-6, 8e-6) == (450e9, 3e-6)  # 4 x 2 = 8: inside


@pytest.mark.parametrize("deepep", [0.0, 1.0])
def test_a2a_times_share_the_geometry_and_equal_one_call_each(deepep):
    ep = np.array([1.0, 2.0, 8.0, 32.0, 64.0, 8.0, 16.0])
    etp = np.array([1.0, 1.0, 2.0, 1.0, 4.0, 8.0, 1.0])
    domain = np.array([8.0, 8.0, 8.0, 72.0, 8.0, 4.0, np.nan])
    fabric = coll.Fabric(450e9, 50e9, 3e-6, 8e-6, domain, np.array([1.0, 1.0, 2.0, 1.0, 3.0, 1.0, 1.0]), np.nan)
    msgs = (np.array([1e6, 2e7, 3e8, 4e5, 0.0, 1e9, 5e6]), np.array([2e6, 4e7, 6e8, 8e5, 1.0, 2e9, 1e7]))
    top_k, limit = np.array([2.0, 8.0, 8.0, 1.0, 4.0, 2.0, 8.0]), np.array([0.0, 4.0, 4.0, 0.0, 2.0, 0.0, 1.0])
    with np.errstate(divide="ignore", invalid="ignore"):
        both = moe.a2a_times_s(msgs, ep, etp, fabric, top_k, deepep, limit)
        for m, t in zip(msgs, both):
            assert _bits(t) == _bits(moe.a2a_s(m, ep, etp, fabric, top_k, deepep, limit))


def test_a2a_hand_computed():
    """8 EP ranks at stride 1 in one 8-GPU domain: 7/8 of 8 MB leave over NVLink at 400 GB/s:
    7 MB / 400 GB/s = 17.5 us, plus the NVLink latency 3 us; one rank sends nothing."""
    fabric = coll.Fabric(400e9, 50e9, 3e-6, 8e-6, 8.0)
    t_disp, t_one = moe.a2a_times_s((8e6, 8e6), np.array([8.0, 1.0]), 1.0, fabric)
    assert t_disp[0] == pytest.approx(17.5e-6 + 3e-6, rel=1e-12) and t_disp[1] == 0.0
    assert _bits(t_disp) == _bits(t_one)


def _attention_columns():
    """GQA (Llama-3-70B-like), MHA, an explicit head_dim, and MLA with and without a Q LoRA rank."""
    n = 5
    c = {k: np.full(n, v) for k, v in moe.MOE_INPUT_COLUMNS.items()}
    c.update(hidden=np.array([8192.0, 4096.0, 4096.0, 7168.0, 5120.0]), heads=np.array([64.0, 32.0, 64.0, 128.0, 128.0]),
             kv_heads=np.array([8.0, 32.0, 4.0, 128.0, 128.0]), ffn_hidden=np.full(n, 14336.0),
             head_dim=np.array([np.nan, np.nan, 128.0, np.nan, np.nan]), mla=np.array([0.0, 0.0, 0.0, 1.0, 1.0]),
             q_lora_rank=np.array([0.0, 0.0, 0.0, 1536.0, 0.0]), kv_lora_rank=np.array([0.0, 0.0, 0.0, 512.0, 512.0]),
             qk_rope_head_dim=np.array([0.0, 0.0, 0.0, 64.0, 64.0]), qk_nope_head_dim=np.array([0.0, 0.0, 0.0, 128.0, 128.0]),
             v_head_dim=np.array([0.0, 0.0, 0.0, 128.0, 128.0]))
    return c


def test_attention_params_total_and_local_hand_computed():
    """GQA h 8192, 64 heads of 128, 8 KV heads: 2*h*a*d + 2*h*kvh*d = 2*8192*8192 + 2*8192*1024 =
    150,994,944; on tp 8: 2*h*a*d/8 + 2*h*(d*max(8/8, 1)) = 16,777,216 + 2,097,152 = 18,874,368.
    DeepSeek-V3 MLA (h 7168, 128 heads, q_lora 1536, kv_lora 512, rope 64, nope 128, v 128):
    replicated 7168*1536 + 7168*(512+64) = 15,138,816; split 1536*128*192 + 512*128*256 + 128*128*7168
    = 37,748,736 + 16,777,216 + 117,440,512 = 171,966,464; total 187,105,280, on tp 8 15,138,816 + 21,495,808."""
    c = _attention_columns()
    w = widths(c)
    total, loc = attention_params_total(c, w), attention_params_local(c, 8.0, w)
    assert total[0] == 150_994_944 and loc[0] == 18_874_368
    assert total[3] == 187_105_280 and loc[3] == 15_138_816 + 21_495_808
    assert _bits(total) == _bits(moe.attention_params(c, 1.0, w)[0])
    assert _bits(loc) == _bits(moe.attention_params(c, 8.0, w)[1])
    kv_loc = w[3] * np.maximum(c["kv_heads"] / 8.0, 1.0)
    assert _bits(attention_params_local(c, 8.0, w, kv_loc)) == _bits(loc)


def test_block_columns_gather_on_first_use_and_behave_as_the_gathered_dict():
    from cosearch.model.blocks import BlockColumns

    full = {"a": np.arange(10.0), "b": np.arange(10.0) * 2.0, "k": np.asarray(7.0)}
    rows = np.array([1, 4, 9])
    block = BlockColumns(full, rows)
    assert dict.keys(block) == {"k"}  # nothing gathered yet; the 0-d column is shared as it is
    assert block["a"].tolist() == [1.0, 4.0, 9.0] and dict.keys(block) == {"k", "a"}  # "b" still not gathered
    assert "b" in block and "z" not in block and len(block) == 3 and block.get("z", 5) == 5
    assert block.get("b").tolist() == [2.0, 8.0, 18.0]
    assert {k: v.tolist() for k, v in block.items()} == {"a": [1.0, 4.0, 9.0], "b": [2.0, 8.0, 18.0], "k": 7.0}
    with pytest.raises(KeyError):
        block["z"]


def test_split_batch_reads_only_the_columns_a_block_uses(monkeypatch):
    """A dense block of a mixed batch never gathers the MoE-only columns (top_k); the MoE block does,
    and the batch (its training outputs computed after the merge) gives what each row gives alone."""
    from cosearch import evaluate
    from cosearch.model import blocks
    from cosearch.presets import moe_columns, preset
    from cosearch.scenario import parse_scenario, scenario_columns

    dense = scenario_columns(parse_scenario({"model": "llama3-8b", "training": {"global_batch": 64},
                                                "cluster": {"gpu": "h100-sxm", "gpus": 8}}))
    mix = {k: np.array([v, v], dtype=float) for k, v in dense.items()}
    for k, v in moe_columns(preset("mixtral-8x7b")).items():
        mix[k] = np.array([moe.MOE_INPUT_COLUMNS[k], float(v)])
    for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab"):
        mix[k][1] = float(preset("mixtral-8x7b")[k])
    seen: list[tuple[np.ndarray, set]] = []
    real_missing = blocks.BlockColumns.__missing__

    def missing(self, key):
        if not seen or seen[-1][0] is not self._rows:
            seen.append((self._rows, set()))
        seen[-1][1].add(key)
        return real_missing(self, key)

    monkeypatch.setattr(blocks.BlockColumns, "__missing__", missing)
    monkeypatch.setattr(importlib.import_module("cosearch.model.evaluate"), "CHUNK_ROWS", 1)
    both = evaluate(mix)
    (dense_rows, dense_keys), (moe_rows, moe_keys) = seen
    assert dense_rows.tolist() == [0] and moe_rows.tolist() == [1]
    assert "top_k" not in dense_keys and "hidden" in dense_keys
    assert {"top_k", "experts", "hidden"} <= moe_keys
    for i in (0, 1):
        alone = evaluate({k: v[i:i + 1] for k, v in mix.items()})
        assert list(alone) == list(both)  # same outputs in the same order (the training ones filled last)
        for k, v in alone.items():
            assert _bits(np.asarray(v, dtype=float)) == _bits(np.asarray(both[k][i:i + 1], dtype=float)), k


def test_scalar_divisibility_fast_path_agrees_with_the_array_path():
    """feasibility._divides / _is_int answer plain floats with ``float.is_integer`` (no dispatch); on every
    pair of awkward values (a zero divisor left out: Python raises there, and valid_mask retries on arrays)
    they must give what the array path gives."""
    from cosearch.model.feasibility import _divides, _is_int

    values = [float(v) for v in AWKWARD] + [4.0, 6.0, 12.0, 2.0 ** 53, 1e300]
    with np.errstate(invalid="ignore", divide="ignore"):
        for x in values:
            assert _is_int(x) == bool(_is_int(np.asarray(x))), x
            for a in values:
                if a == 0.0:
                    continue
                assert _divides(a, x) == bool(_divides(np.asarray(a), np.asarray(x))), (a, x)
