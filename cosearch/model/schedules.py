"""Pipeline schedules beyond 1F1B: zero-bubble ZB-H1 and ZB-V (Qi et al., ICLR 2024) and DualPipe
(DeepSeek-V3 technical report, 2024, sec. 3.2.1), as closed forms on the model's per-micro-batch times.

Notation per pipeline rank and micro-batch: F forward, B input-gradient backward, W weight-gradient
backward (the split of Qi et al. sec. 1, Figure 1); the model's slot is F + B + W (+ exposed comm).
Bubbles (idle time per step on a rank):

  1F1B / interleaved  (p-1)/v * (F + B + W)          Narayanan et al. SC'21 sec. 2.2
  ZB-H1               (p-1) * (F + B - W)            Qi et al. Table 2 (1F1B peak memory, p M_B)
  ZB-V                (p-1) * max(F + B - 2W, 0)     ZB-H2's closed form (Qi et al. Table 2); the paper
                      gives ZB-V no closed form for unequal F/B/W (zero bubble when F = B = W, sec. 6)
                      and its Table 8 rates, from profiled times, are within 15 % of ZB-H2's
                      (e.g. 6.2B, p=16, m=48: 0.0697 vs 0.0823; 28.3B, m=96: 0.0593 vs 0.0629)
  DualPipe            (p/2-1) * (F&B + B_full - 3W)  DeepSeek-V3 Table 2 / deepseek-ai/DualPipe README,
                      B_full = B + W the full backward, F&B = F + B_full: the overlapped chunk pair
                      hides communication, not compute (the two chunks share the SMs); the model keeps
                      that communication in the slot (a conservative F&B)

Activations in flight on the peak rank, in units of M_B (one micro-batch of a stage's activations):
1F1B and ZB-H1 p (ZB-H1 worker i holds (p-i+1) M_B + (i-1) M_W, Qi et al. sec. 2.3), ZB-V p on every
rank (sec. 6: balanced across workers), DualPipe p+1 on every rank with two parameter copies (each
rank holds stages i and p-1-i; DeepSeek-V3 Table 2).

Schedule codes are a model column; NaN (the default) means "1F1B, interleaved when interleave > 1",
exactly the model before schedules existed.
"""
from __future__ import annotations

from . import _ops as ops
from .compute import BYTES_16BIT

SCHEDULE_CODES = {"1f1b": 0, "interleaved": 1, "zb-h1": 2, "zb-v": 3, "dualpipe": 4}
ONE_F_ONE_B, INTERLEAVED, ZB_H1, ZB_V, DUALPIPE = 0.0, 1.0, 2.0, 3.0, 4.0
#: ZB-V runs exactly two model chunks per rank (Qi et al. sec. 6: "exactly 2p chunks").
ZB_V_CHUNKS = 2.0


def schedule_name(schedule: str | None, interleave: int) -> str:
    """The schedule a plan runs: the stated one, else 1f1b (interleave 1) or interleaved (interleave > 1)."""
    return schedule if schedule is not None else ("interleaved" if interleave > 1 else "1f1b")


#: Chunks per rank each schedule runs (None: any interleave > 1).
SCHEDULE_INTERLEAVE = {"1f1b": 1, "interleaved": None, "zb-h1": 1, "zb-v": 2, "dualpipe": 1}


def uses_split_backward(schedule) -> bool:
    """True when any row runs a zero-bubble or DualPipe schedule (the rest keep the 1F1B code path)."""
    return ops.any(schedule >= ZB_H1)


def weight_grad_time_s(layers, gemm_fwd_layer_s, logit_gemm_s):
    """W: time of the weight-gradient GEMMs of one micro-batch on a rank.

    Each forward GEMM Y = XW has two backward GEMMs of the same shape, dX = dY W^T (in B) and
    dW = X^T dY (in W) (Qi et al. Figure 1, Table 1: W = 24sbh^2 FLOPs per layer = the forward GEMMs),
    so W is the forward GEMM time of the rank's layers plus the output layer's weight gradient.
    Attention backward, elementwise kernels, recomputation and communication stay in B.
    """
    return layers * gemm_fwd_layer_s + logit_gemm_s


def bubble_time_s(schedule, pp, interleave, slot_s, forward_s, wgrad_s, microbatches):
    """Idle seconds per step on a pipeline rank for each schedule (closed forms in the module doc).

    ``slot_s`` = F + B + W of one micro-batch (with its exposed communication), ``forward_s`` = F,
    ``wgrad_s`` = W (the part of it that leaves the slot when deferred). Codes: NaN/0/1 the 1F1B family, 2 ZB-H1,
    3 ZB-V, 4 DualPipe. The closed forms fill k W's into each of the bubble's positions (k(p-1) in all); a rank
    has one W per micro-batch, so at most ``microbatches`` fill it (the forms hold for m >= k(p-1)): with fewer, a
    longer W shortened the step (at p=2, m=1 ZB-H1 runs 2F + 2B + W: one W filled, not two).
    """
    one_f_one_b = (pp - 1.0) / interleave * slot_s
    per_rank = microbatches / ops.maximum(pp - 1.0, 1.0)  # W's a rank has per bubble position
    zb_h1 = (pp - 1.0) * ops.maximum(slot_s - ops.minimum(2.0, per_rank) * wgrad_s, 0.0)
    zb_v = (pp - 1.0) * ops.maximum(slot_s - ops.minimum(3.0, per_rank) * wgrad_s, 0.0)
    # F&B + B_full - 3W with F&B = F + B_full = slot and B_full = slot - F; p/2 - 1 positions (a multiple of 1/2)
    half = ops.maximum(pp / 2.0 - 1.0, 0.0)
    dualpipe = half * ops.maximum(2.0 * slot_s - forward_s
                                  - ops.minimum(3.0, microbatches / ops.maximum(half, 0.5)) * wgrad_s, 0.0)
    return ops.select([schedule == ZB_H1, schedule == ZB_V, schedule == DUALPIPE], [zb_h1, zb_v, dualpipe],
                      one_f_one_b)


def linear_wgrad_bytes(tokens, in_width, out_width, fp8):
    """Bytes one linear layer keeps for its deferred W pass (dW = X^T dY, Qi et al. sec. 2.3): its input X
    (1 byte a value when fp8 keeps fp8 copies) and its 16-bit output gradient dY, for ``tokens`` rows."""
    return tokens * ((BYTES_16BIT - fp8) * in_width + BYTES_16BIT * out_width)


def attention_wgrad_bytes(tokens, hidden_rep, q_local, kv_local, fp8):
    """M_W of an attention block's projections (:func:`linear_wgrad_bytes`): QKV hidden -> q + 2 kv, output
    q -> hidden (``hidden_rep``: h/tp under SP, h otherwise)."""
    return (linear_wgrad_bytes(tokens, hidden_rep, q_local + 2.0 * kv_local, fp8)
            + linear_wgrad_bytes(tokens, q_local, hidden_rep, fp8))


def mlp_wgrad_bytes(tokens, hidden_in, ffn_local, gated, fp8):
    """M_W of a (gated) MLP (:func:`linear_wgrad_bytes`): fc1 hidden -> f(1+gated), fc2 f -> hidden."""
    return (linear_wgrad_bytes(tokens, hidden_in, ffn_local * (1.0 + gated), fp8)
            + linear_wgrad_bytes(tokens, ffn_local, hidden_in, fp8))


def wgrad_activation_bytes(seq_local, micro, hidden_rep, hidden_local, kv_local, ffn_local, gated, fp8):
    """M_W: bytes one dense layer keeps for a deferred W pass of one micro-batch on one GPU.

    W needs each linear layer's input X and its output gradient dY (Qi et al. sec. 2.3: after B "keeps
    some extra gradients for W"; Table 1: 32sbh for a GPT layer) (:func:`linear_wgrad_bytes`): QKV h -> h/tp + 2 kv
    and fc1 h -> f(1+gated)/tp (inputs h/tp under SP, gathered again for W), projection h/tp -> h and fc2
    f/tp -> h (outputs h/tp under SP). For h = f/4, tp = 1: 2 * (h + h + h + 4h) + 2 * (3h + h + 4h + h) = 32h
    per token. MoE layers: :mod:`cosearch.model.moe`.
    """
    tok = seq_local * micro
    return (attention_wgrad_bytes(tok, hidden_rep, hidden_local, kv_local, fp8)
            + mlp_wgrad_bytes(tok, hidden_rep, ffn_local, gated, fp8))


def paced_stage_s(schedule, pp, n_stage, n_first, n_last, layer_s, heads_s, one_f_one_b_s):
    """Compute time per micro-batch (one direction: forward or backward) on the rank that paces the pipeline.

    ``one_f_one_b_s``: the 1F1B family's value (the fullest stage plus the output heads, or the last stage
    with all its heads where MTP makes that slower), kept for 1F1B, interleaved and ZB-H1, whose ranks each
    hold one stage. The other two layouts put both ends of the model on the same ranks, as their parameters
    already are (:func:`rank_params`):
    DualPipe rank i runs stage i for the micro-batches fed from one end and stage p-1-i for those fed from the
    other, half each (DeepSeek-V3 sec. 3.2.1: "the shallowest layers (including the embedding layer) and deepest
    layers (including the output head) ... on the same PP rank"), so the end ranks average the first and last
    stage, ((n_first + n_last) layers + heads) / 2, and the middle ranks (p > 2) run ``n_stage`` layers.
    ZB-V rank 0 holds chunks 0 and 2p-1 and every micro-batch passes both (Qi et al. sec. 6): the two ends' layer
    deficits both land there, (n_first + n_last - n_stage) layers + heads; the other ranks ``n_stage`` layers.
    """
    mid, dual_end, zb_v_end = _layout_loads(n_stage, n_first, n_last, layer_s, heads_s)
    dual = ops.where(pp > 2, ops.maximum(mid, dual_end), dual_end)
    zb_v = ops.maximum(mid, zb_v_end)
    return ops.select([(schedule == DUALPIPE) & (pp > 1), schedule == ZB_V], [dual, zb_v], one_f_one_b_s)


def _layout_loads(n_stage, n_first, n_last, per_layer, heads):
    """(a middle rank, a DualPipe end rank, ZB-V rank 0)'s load per micro-batch of ``per_layer`` a layer plus
    ``heads`` for the output heads, as :func:`paced_stage_s` lays the ranks out."""
    return (n_stage * per_layer, 0.5 * ((n_first + n_last) * per_layer + heads),
            (n_first + n_last - n_stage) * per_layer + heads)


def paced_wgrad_s(schedule, pp, n_stage, n_first, n_last, gemm_layer_s, logit_gemm_s, layer_s, heads_s):
    """W (:func:`weight_grad_time_s`) of the rank that paces the pipeline, so that W and the slot it fills come
    from one rank: under DualPipe and ZB-V the rank :func:`paced_stage_s` picks by its compute per micro-batch
    (``layer_s``, ``heads_s``: forward + backward of a layer and of the output heads), a middle rank (no output
    layer) where it is the fuller one; the 1F1B family's W (the fullest stage and the output layer) otherwise."""
    one = weight_grad_time_s(n_stage, gemm_layer_s, logit_gemm_s)
    mid_s, dual_s, zb_v_s = _layout_loads(n_stage, n_first, n_last, layer_s, heads_s)
    mid_w, dual_w, zb_v_w = _layout_loads(n_stage, n_first, n_last, gemm_layer_s, logit_gemm_s)
    dual = ops.where((pp > 2) & (mid_s > dual_s), mid_w, dual_w)
    zb_v = ops.where(mid_s > zb_v_s, mid_w, zb_v_w)
    return ops.select([(schedule == DUALPIPE) & (pp > 1), schedule == ZB_V], [dual, zb_v], one)


def rank_params(schedule, pp, tied, params_first, params_last, params_mid, emb_local):
    """Parameters on the first, last and a middle pipeline rank under the schedule's layout.

    ZB-V's V-shape puts chunks 0 and 2p-1 on rank 0 (Qi et al. sec. 6: layers 1-2 and 15-16 on worker
    1), so rank 0 holds the embedding and the output layer (one copy when tied) and rank p-1 holds two
    middle chunks. DualPipe rank i holds stages i and p-1-i: two parameter copies (DeepSeek-V3 Table 2).
    """
    zb_v, dual = schedule == ZB_V, schedule == DUALPIPE
    ends = params_first + params_last
    first = ops.where(dual, ends, ops.where(zb_v, params_first + (1.0 - tied) * emb_local, params_first))
    last = ops.where(dual, ends, ops.where(zb_v, params_mid, params_last))
    mid = ops.where(dual, 2.0 * params_mid, params_mid)
    return first, last, mid


def inflight_microbatches(schedule, pp, num_microbatches):
    """(first-rank, last-rank) micro-batches whose full activations (M_B) are held at the peak.

    1F1B family and ZB-H1: p on the first rank, 1 on the last; ZB-V: p on every rank; DualPipe: p+1
    on every rank (its step() needs m >= 2p, so all are in flight).
    """
    p_or_m = ops.minimum(num_microbatches, pp)
    balanced = schedule == ZB_V
    first = ops.where(schedule == DUALPIPE, pp + 1.0, p_or_m)
    last = ops.where(schedule == DUALPIPE, pp + 1.0, ops.where(balanced, p_or_m, 1.0))
    return first, last


def rank_activation_bytes(schedule, pp, num_microbatches, n_stage, n_last, act_layer, wgrad_layer, stored_first,
                          stored_mid, logits_first, logits_last):
    """(rank 0, a middle rank (rank 1), last rank) stored activations and (rank 0, last rank) logits bytes under the
    schedule, from the 1F1B values: ZB-V and DualPipe hold their in-flight count on every rank (``n_stage``
    layers, an upper bound), ZB-H1 adds its deferred W passes (M_W = ``wgrad_layer`` per layer) on rank 1 and the
    last rank (rank 0 has none); the loss sits on rank 0 under ZB-V (chunk 2p-1) and on both end ranks under
    DualPipe."""
    inflight, _ = inflight_microbatches(schedule, pp, num_microbatches)
    balanced = (schedule == ZB_V) | (schedule == DUALPIPE)
    stored_bal = n_stage * inflight * act_layer
    first = ops.where(balanced, stored_bal, stored_first)
    mid = ops.where(balanced, stored_bal,
                    stored_mid + n_stage * deferred_wgrads(schedule, pp, num_microbatches, 1.0) * wgrad_layer)
    last = ops.where(balanced, stored_bal,
                     n_last * (act_layer + deferred_wgrads(schedule, pp, num_microbatches, pp - 1.0) * wgrad_layer))
    return (first, mid, last, ops.where(balanced, logits_last, logits_first),
            ops.where(schedule == ZB_V, 0.0, logits_last))


def deferred_wgrads(schedule, pp, num_microbatches, rank):
    """Micro-batches whose W is still pending (holding M_W) on pipeline rank ``rank`` (0-based) at its
    peak under ZB-H1: worker i = rank+1 holds (i-1) M_W (Qi et al. sec. 2.3); none for other schedules."""
    pending = ops.minimum(rank, ops.maximum(num_microbatches - 1.0, 0.0))
    return ops.where(schedule == ZB_H1, ops.minimum(pending, pp - 1.0), 0.0)
