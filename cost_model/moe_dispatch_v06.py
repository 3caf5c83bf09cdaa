"""Megatron-Core core_v0.6.0's token dispatchers as they ran: the bytes they move that today's do not.

core_v0.6.0's two dispatchers (megatron/core/transformer/moe/token_dispatcher.py; the same file on
Megatron-LM main from 2024-04-02, 06cf6d74, to 2024-05-01, e61c3841) move a MoE layer's tokens with more
copies than the permute / unpermute of the rank's own routed copies that cost_model/moe_time.py
permute_elems charges for today's. Counted op by op from the code, each op reading and writing its
output's size, and autograd's backward of each (gather -> zeros + scatter_add; scatter, scatter_add and
index_copy_ -> gather / index_select; index_select -> zeros + index_add_; a product -> the two products
and a sum over the broadcast dimension; split -> cat; cat -> views). cost_model/moe_time.py
permute_times_s prices them at the profile's copy rate, as it prices every memory-bound op.
"""
from __future__ import annotations

from autoplan.specs import ModelSpec


def gather_scatter_rows(model: ModelSpec, tokens: int, tp: int, ep: int, etp: int, rows_factor: float) -> tuple:
    """(forward, backward) h-wide rows one rank reads and writes moving one micro-batch's tokens through
    the allgather dispatcher (Framework.moe_gather_scatter_permute; MoEAllGatherTokenDispatcher). Every
    rank holds the N = tokens/tp x etp x ep tokens gathered over its tensor x expert group and moves the
    L = N k/ep x `rows_factor` (moe_time.busiest_rows_factor) copies routed to its experts.

    forward (14 L + 3 N): gather of the routed rows (line 135) 2 L, gather into expert order (166) 2 L,
    zeros_like + out-of-place scatter back out of expert order (191-193) L + 2 L + 2 L, times the router's
    probabilities (197) 2 L, zeros(N) + out-of-place scatter_add into the gathered tokens (220-226)
    N + 2 N + 3 L. backward (17 L + N): scatter_add's gather 2 L, the product's two 2 L + 3 L and the sum
    over h L, the scatter's gather 2 L, the expert-order gather's zeros + scatter_add L + 3 L, the routed
    rows' zeros + scatter_add N + 3 L. With tp 1 and ep 1 (lines 137-145, 245-256) the same ops run over
    the rank's own tokens: N = tokens."""
    n = tokens / tp * etp * ep
    local = n * model.num_experts_per_token / ep * rows_factor
    return 14 * local + 3 * n, 17 * local + n


def sp2hp_alltoall_elems(model: ModelSpec, tokens: int, tp: int, ep: int, etp: int, rows_factor: float) -> tuple:
    """(forward, backward) elements one rank reads and writes moving one micro-batch's tokens through
    the alltoall dispatcher (Framework.moe_sp2hp_alltoall; MoEAlltoAllTokenDispatcher lines 394-488,
    moe_utils.py permute and unpermute lines 106-151, tensor_parallel/mappings.py).

    In units of e = t x h, t = tokens/tp the rank's sequence-parallel share, k the top-k, f = `rows_factor`
    and T = etp k f the copies the rank receives, gathered to the full h:
    forward: all_to_all_sp2hp's cat 2 (the rank then holds t x tp tokens of h/tp), permute's index_select
    2k, all_gather_last_dim's list all-gather copied out of NCCL's flat buffer and cat along h 4 T,
    reduce_scatter_last_dim's transposed copies in and out 2 T + 2 T/etp, unpermute's zeros_like +
    index_copy_ + probabilities product + sum over k 6k + 1, all_to_all_hp2sp's cat 2;
    backward: the two cats' split backward 2 + 2, unpermute's product 2k and 4k (the probabilities' grad
    and its sum over h) and index_copy_'s index_select 2k, the last-dim gather and reduce-scatter swapped
    4 T and 2 T + 2 T/etp, permute's zeros + index_add_ 1 + 3k.
    With several local experts the received copies are permuted before the gather and back after the
    reduce-scatter (lines 420-425, 460-465), at h/etp: index_select 2kf forward (zeros + index_add_ 4kf
    backward), zeros_like + index_copy_ + sum 5kf forward (index_select 2kf backward).
    At tp 1 the sp2hp/hp2sp exchanges and the last-dim collectives are skipped (world size 1)."""
    e = tokens / tp * model.hidden_size
    k, f = model.num_experts_per_token, rows_factor
    fwd, bwd = 2 * k + 6 * k + 1, 8 * k + 1 + 3 * k
    if tp > 1:
        t_gathered = etp * k * f
        fwd += 2 + 4 * t_gathered + 2 * t_gathered + 2 * t_gathered / etp + 2
        bwd += 2 + 2 + 4 * t_gathered + 2 * t_gathered + 2 * t_gathered / etp
    if model.num_experts // ep > 1:
        fwd += 7 * k * f
        bwd += 6 * k * f
    return fwd * e, bwd * e


def sp2hp_exchange_bytes(model: ModelSpec, tokens: int, tp: int) -> float:
    """Bytes per rank of one of the alltoall dispatcher's tensor-parallel all-to-alls (all_to_all_sp2hp
    before routing, all_to_all_hp2sp after; each pass runs two): the rank's t x h share, 2 B each;
    0 at tp 1."""
    return 0.0 if tp <= 1 else 2.0 * tokens / tp * model.hidden_size
