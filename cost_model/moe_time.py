"""The time terms only a mixture-of-experts layer has, on the busiest rank of its expert-parallel group.

Layer time (cost_model/layer_time.py) prices the expert GEMMs at their per-expert shape from the
profile's GEMM table (grouped-GEMM efficiency at those token counts is the table's: within 10.7 % of
torch._grouped_mm on the H100 records but for narrow experts at <= 256 tokens, cost_model/data/kernels/README.md) for balanced
routing. This module adds what balanced routing leaves out, each a named term:

* routed-token imbalance: a dropless router gives some experts more tokens than the mean, and the
  expert-parallel rank holding them sets the pace of the layer (its expert GEMMs and the all-to-all
  it receives). `expert_load_imbalance` is the max/mean load; forced balanced routing makes it 1.
* token permutation: the dispatcher copies every routed token into expert order before the
  all-to-all and back after it, and with several local experts sorts the received tokens by expert
  and unsorts them before the combine (Megatron-Core core_v0.16.1 megatron/core/transformer/moe/
  token_dispatcher.py: MoEAlltoAllTokenDispatcher.dispatch_preprocess `permute`, dispatch_postprocess
  `sort_chunks_by_idxs` when num_local_experts > 1, combine_preprocess and combine_postprocess the
  reverse; the flex/DeepEP dispatcher permutes the received tokens the same way): memory-bound bytes.
* the dispatch and combine all-to-all, inside or across NVLink domains, and what the framework hides
  of it: Megatron-Core's --overlap-moe-expert-parallel-comm merges the forward of one micro-batch
  with the backward of another, so each pass's all-to-all runs under the other pass's compute
  (megatron/core/transformer/moe/README.md core_v0.16.1, "EP A2A Overlap").
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from autoplan.specs import ModelSpec
from autoplan.specs.framework_facts import MoEFacts
from cost_model.moe_dispatch_v06 import gather_scatter_rows, sp2hp_alltoall_elems, sp2hp_exchange_bytes
from cost_model.tables import ProfileTables

BYTES_ACT = 2

DEFAULT_EXPERT_LOAD_IMBALANCE = 1.25
"""Max/mean routed tokens per expert of a dropless router trained with an auxiliary balance loss.
Switch Transformer (Fedus et al. 2022, JMLR 23, arXiv 2101.03961, sec. 2.2 and Table 1) trains with
expert capacity factors 1.0-1.25 (capacity = factor x mean load) and finds few tokens overflow at
1.25: the busiest expert stays near 1.25x the mean. Applied to the busiest expert-parallel rank
(conservative: it may hold more than one busy expert, or none)."""

FORCED_BALANCE = 1.0
STACKED_WEIGHT_COPY_EFFICIENCY = 0.119
"""Achieved fraction of the profile's HBM copy rate when KempnerForge stacks its unpacked experts'
transposed weights (Framework.moe_stacked_expert_weights): measured with KempnerForge's own model on one
H200 (cost_model/data/kempnerforge_h200/depth-2026-11-28.jsonl, 4 layers, uniform tokens, so packed
and unpacked route alike): unpacked - packed = 16.84 ms per layer with 16 experts, three copies (forward,
recompute, backward) of 1.41 GB each read and written, 502 GB/s against the table's 4,226 GB/s. The
8-expert pair (8.93 ms per layer) is left to check it (tests/test_kempnerforge_h200.py). Our own
kernel record, not a published run's step time: the MoE rows stay unfitted."""
"""Megatron-Core --moe-router-force-load-balancing (benchmark routing: every expert the same count)."""


@dataclass(frozen=True)
class MoeTimes:
    """Seconds one MoE layer adds per micro-batch on the busiest expert-parallel rank."""
    imbalance_gemm_fwd_s: float
    """Expert GEMMs the busiest rank runs beyond the mean rank's (forward)."""
    imbalance_gemm_bwd_s: float
    permute_fwd_s: float
    """Token permutation into and out of expert order (memory-bound), forward."""
    permute_bwd_s: float
    a2a_fwd_s: float
    """Dispatch + combine all-to-all of the forward, the part compute does not hide."""
    a2a_bwd_s: float
    a2a_hidden_s: float
    """All-to-all seconds hidden under the other pass's compute (overlap on); not in the sum."""
    weight_stack_s: float = 0.0
    """Stacking the unpacked experts' weights (Framework.moe_stacked_expert_weights), one pass: paid in
    the forward and again in the backward (memory-bound)."""
    imbalance_act_s: float = 0.0
    """The routed experts' activation function (SwiGLU's silu x up) on the busiest rank's rows beyond the
    mean's, forward (memory-bound, like the GEMMs it sits between: KempnerForge's padded experts run
    it on every expert's padded rows, moe.py @abbbac33 lines 128-130)."""


def expert_load_imbalance(setting: float, ep: int, capacity_factor: float = 0.0, padded: bool = False) -> float:
    """The busiest expert-parallel rank's routed tokens over the mean rank's (dropless routing's).

    `setting` is the framework's `moe_load_imbalance` (0: DEFAULT_EXPERT_LOAD_IMBALANCE). With ep = 1
    every rank holds every expert and runs all routed tokens of its micro-batch, so the imbalance
    changes which expert gets the rows, not how many the rank runs: 1. A capacity factor c > 0
    (ParallelPlan.moe_capacity_factor) caps every expert at c x the mean and drops the rest
    (Megatron-Core megatron/core/transformer/moe/moe_utils.py core_v0.16.1 lines 193-211 get_capacity,
    ceil(tokens x topk / experts x c), applied by apply_router_token_dropping at line 800): the busiest
    rank runs min(imbalance, c) x the mean. `padded` (Framework.moe_padded_expert_gemm): every local
    expert runs the busiest one's rows, so with ep = 1 too the rank runs the imbalance x the mean (the
    same default: the busiest expert rather than the busiest rank)."""
    load = 1.0 if ep <= 1 and not padded else (setting if setting > 0 else DEFAULT_EXPERT_LOAD_IMBALANCE)
    return min(load, capacity_factor) if capacity_factor > 0 else load


def busiest_load_bound(model: ModelSpec, ep: int, padded: bool = False) -> float:
    """The most the busiest rank (or, `padded`, expert) can hold over the mean: a token sends its k
    copies to k distinct experts, so an expert receives at most every token, E/k times the mean, and a
    rank of E/ep experts at most min(k, E/ep) copies of every token, ep*min(k, E/ep)/k times the mean.
    A measured load factor above it (a user's, over another ep) is read at the bound."""
    e, k = model.num_experts, model.num_experts_per_token
    if padded or ep <= 1:
        return e / k
    return ep * min(k, e // ep) / k


def permute_elems(model: ModelSpec, tokens: int, tp: int, ep: int, etp: int) -> float:
    """Elements one rank reads and writes permuting one micro-batch's routed tokens (forward).

    Each rank routes its sequence-parallel share t = tokens/tp, k copies each: `permute` reads
    and writes the k copies (2k t h), `unpermute` reads them and writes the summed token
    ((k + 1) t h). With ep > 1 and several local experts the received tokens (t k etp after the
    expert-TP all-gather) are sorted by expert and unsorted again: a read and a write each way
    (4 t k etp h)."""
    h, k = model.hidden_size, model.num_experts_per_token
    t = tokens / tp
    elems = (3 * k + 1) * t * h
    if ep > 1 and model.num_experts // ep > 1:
        elems += 4 * t * k * etp * h
    return elems


def stacked_weight_bytes(model: ModelSpec, ep: int, etp: int) -> tuple:
    """(stacked tensors, bytes of each) of one layer's local expert weights stacked per forward
    (Framework.moe_stacked_expert_weights): one (E/ep, h, ffn/etp) bf16 tensor per expert matrix, 3
    gated, else 2."""
    matrices = 2 if model.mlp == "gelu" else 3
    return matrices, BYTES_ACT * model.num_experts // ep * model.hidden_size * model.expert_ffn_size / etp


def stacked_weights_s(model: ModelSpec, tables: ProfileTables, ep: int, etp: int) -> float:
    """One pass's copy of the local experts' stacked weights (Framework.moe_stacked_expert_weights):
    every stacked tensor (stacked_weight_bytes) read and written once, one copy op each, at
    STACKED_WEIGHT_COPY_EFFICIENCY of the profile's copy rate at that size."""
    matrices, tensor_bytes = stacked_weight_bytes(model, ep, etp)
    rate = tables.memory_bytes_per_s(int(tensor_bytes)) * STACKED_WEIGHT_COPY_EFFICIENCY
    return 2.0 * matrices * tensor_bytes / rate


def busiest_rows_factor(model: ModelSpec, load_imbalance: float, ep: int, capacity_factor: float = 0.0,
                        padded: bool = False) -> float:
    """The busiest rank's (`padded`: every local expert's) routed rows over the mean: the measured or
    default imbalance (expert_load_imbalance), at most what routing allows (busiest_load_bound)."""
    return min(expert_load_imbalance(load_imbalance, ep, capacity_factor, padded),
               busiest_load_bound(model, ep, padded))


def moe_padded_memory(model: ModelSpec, facts: MoEFacts, ep: int, capacity_factor: float = 0.0) -> dict:
    """cost_model.memory.activation_bytes_per_layer's arguments for a framework whose experts run padded
    to the busiest one (`facts`: its MoE facts, moe_padded_expert_gemm): the rows busiest_rows_factor
    gives at its moe_load_imbalance, as the time prices them; empty for the others."""
    if not facts.moe_padded_expert_gemm:
        return {}
    return {"padded_rows": busiest_rows_factor(model, facts.moe_load_imbalance, ep, capacity_factor, padded=True)}


def _p_hit(open_experts: int, node_experts: int, top_k: int) -> float:
    """P(a node holding `node_experts` of the `open_experts` a token picks its k among gets one)."""
    return 1.0 - math.comb(open_experts - node_experts, top_k) / math.comb(open_experts, top_k)


def remote_nodes_per_token(num_experts: int, top_k: int, num_nodes: int, num_groups: int = 0,
                           group_topk: int = 0) -> float:
    """Expected number of other nodes one token's k routed experts sit on, the E experts spread evenly
    and in order over the N nodes of the expert-parallel group, routing balanced: the k experts drawn
    without replacement from those open to the token, a node of E/N of them missed with probability
    C(open - E/N, k) / C(open, k). With group-limited routing (ModelSpec.moe_router_num_groups G,
    moe_router_group_topk M; Megatron-Core group_limited_topk) the token first picks M of the G groups
    of E/G experts: a node holding part of one group (N >= G) is open when its group is picked (M/G),
    a node holding G/N whole groups when one of them is (hypergeometric over the M picks). By symmetry
    the token's own node is any of the N: (N - 1)/N of the nodes it reaches are remote."""
    if num_nodes <= 1:
        return 0.0
    node_experts = num_experts // num_nodes
    if not group_topk or group_topk >= num_groups:
        return (num_nodes - 1) * _p_hit(num_experts, node_experts, top_k)
    open_experts = group_topk * (num_experts // num_groups)
    if num_nodes >= num_groups:
        reached = num_nodes * group_topk / num_groups * _p_hit(open_experts, node_experts, top_k)
    else:
        per_node = num_groups // num_nodes  # whole groups on each node
        reached = num_nodes * sum(
            math.comb(per_node, j) * math.comb(num_groups - per_node, group_topk - j) / math.comb(num_groups, group_topk)
            * _p_hit(open_experts, j * num_experts // num_groups, top_k)
            for j in range(1, min(per_node, group_topk) + 1))
    return reached * (num_nodes - 1) / num_nodes


def flex_dispatch_time_s(model: ModelSpec, tables: ProfileTables, tokens: int, tp: int, ep: int, etp: int,
                         gpus_per_node: int) -> float:
    """One dispatch (or combine) of Megatron-Core's flex dispatcher on DeepEP (--moe-token-dispatcher-type
    flex --moe-flex-dispatcher-backend deepep; token_dispatcher.py core_v0.16.1 MoEFlexTokenDispatcher, one
    group over the etp x ep ranks, every expert copy on its etp ranks).

    Inside a node it is an all-to-all of the routed copies over NVLink, as alltoall's. Across nodes DeepEP
    sends a token once to each node holding one of its experts, to the GPU of the same local index, which
    forwards it over NVLink to the experts' GPUs (deepseek-ai/DeepEP deep_ep/buffer.py get_dispatch_layout:
    num_tokens_per_rdma_rank, "tokens to be sent to each RDMA rank (with the same GPU index)"; the README's
    NVLink-to-RDMA forwarding). So a GPU's NIC carries its tokens x the remote nodes each reaches
    (remote_nodes_per_token), not x the k copies; its NVLink carries the copies bound for the other GPUs of
    the node meanwhile, and the slower share binds (tables.hierarchical_time_s)."""
    group = ep * etp
    rpn = max(1, min(group, gpus_per_node))
    copies = BYTES_ACT * tokens / tp * model.num_experts_per_token * model.hidden_size * etp
    if group <= rpn:
        return tables.collective_time_s("all_to_all", copies, group, rpn)
    num_nodes = group // rpn
    nic_bytes = BYTES_ACT * tokens / tp * model.hidden_size * remote_nodes_per_token(
        model.num_experts, model.num_experts_per_token, num_nodes, model.moe_router_num_groups,
        model.moe_router_group_topk)
    return tables.hierarchical_time_s(nic_bytes, copies * (rpn - 1) / rpn, group, rpn, copies)


def permute_times_s(model: ModelSpec, tables: ProfileTables, tokens: int, tp: int, ep: int, etp: int,
                    memory_scale: float, facts: MoEFacts, rows_factor: float) -> tuple:
    """(forward, backward) seconds of one layer's token permutation, memory-bound at the profile's copy
    rate for the size of one op's output: the framework's dispatcher permutes the rank's routed copies
    (permute_elems, the same each way), or moves them as core_v0.6.0's dispatchers did
    (cost_model/moe_dispatch_v06.py): its allgather dispatcher the gathered tokens
    (Framework.moe_gather_scatter_permute), its alltoall dispatcher through the tensor-parallel exchanges
    (Framework.moe_sp2hp_alltoall)."""
    h, k = model.hidden_size, model.num_experts_per_token
    if facts.moe_gather_scatter_permute:
        fwd_rows, bwd_rows = gather_scatter_rows(model, tokens, tp, ep, etp, rows_factor)
        op_bytes = BYTES_ACT * h * tokens / tp * etp * k * rows_factor
        fwd_elems, bwd_elems = fwd_rows * h, bwd_rows * h
    elif facts.moe_sp2hp_alltoall:
        fwd_elems, bwd_elems = sp2hp_alltoall_elems(model, tokens, tp, ep, etp, rows_factor)
        op_bytes = BYTES_ACT * h * tokens / tp * k
    else:
        op_bytes = BYTES_ACT * tokens / tp * k * h
        fwd_elems = bwd_elems = permute_elems(model, tokens, tp, ep, etp)
    rate = tables.memory_bytes_per_s(int(max(op_bytes, 1)))
    return BYTES_ACT * fwd_elems * memory_scale / rate, BYTES_ACT * bwd_elems * memory_scale / rate


def tp_exchange_time_s(model: ModelSpec, tables: ProfileTables, tokens: int, tp: int, gpus_per_node: int,
                       facts: MoEFacts) -> float:
    """One pass's tensor-parallel all-to-alls of core_v0.6.0's alltoall dispatcher (Framework.moe_sp2hp_alltoall:
    all_to_all_sp2hp and all_to_all_hp2sp, token_dispatcher.py lines 404 and 485), at the profile's
    all-to-all over the tp ranks; 0 for the others."""
    if not facts.moe_sp2hp_alltoall or tp <= 1:
        return 0.0
    return 2 * tables.collective_time_s("all_to_all", sp2hp_exchange_bytes(model, tokens, tp), tp,
                                        min(tp, gpus_per_node))


def moe_layer_times(model: ModelSpec, tables: ProfileTables, expert_gemm_fwd_s: float,
                    expert_gemm_bwd_s: float, a2a_s: float, other_fwd_s: float, other_bwd_s: float,
                    tokens: int, tp: int, ep: int, etp: int, memory_scale: float, facts: MoEFacts,
                    capacity_factor: float = 0.0, routed_act_s: float = 0.0) -> MoeTimes:
    """The MoE terms of one layer.

    `expert_gemm_*_s`: the expert GEMMs at balanced routing; `a2a_s`: one pass's dispatch + combine
    at balanced routing; `other_*_s`: the pass's compute the all-to-all of the opposite pass can run
    under (attention and GEMMs); `facts`: the framework's MoE facts, their moe_load_imbalance the
    measured one (TrainingSpec) where there is one; `capacity_factor`: the plan's moe_capacity_factor
    (0 = dropless); `routed_act_s`: the routed experts' activation function at balanced routing, one
    forward."""
    load_imbalance, padded_gemm = facts.moe_load_imbalance, facts.moe_padded_expert_gemm
    f = busiest_rows_factor(model, load_imbalance, ep, capacity_factor, padded_gemm)
    permute_fwd_s, permute_bwd_s = permute_times_s(model, tables, tokens, tp, ep, etp, memory_scale, facts, f)
    # The busiest rank receives f x the mean rank's tokens, and its link carries them.
    a2a_fwd_s = a2a_bwd_s = f * a2a_s
    hidden = 0.0
    if facts.moe_a2a_overlap and ep > 1:
        # Forward all-to-all under the other micro-batch's backward compute, and the reverse.
        exposed_fwd, exposed_bwd = max(0.0, a2a_fwd_s - other_bwd_s), max(0.0, a2a_bwd_s - other_fwd_s)
        hidden = a2a_fwd_s + a2a_bwd_s - exposed_fwd - exposed_bwd
        a2a_fwd_s, a2a_bwd_s = exposed_fwd, exposed_bwd
    return MoeTimes(imbalance_gemm_fwd_s=(f - 1.0) * expert_gemm_fwd_s,
                    imbalance_gemm_bwd_s=(f - 1.0) * expert_gemm_bwd_s,
                    permute_fwd_s=permute_fwd_s, permute_bwd_s=permute_bwd_s,
                    a2a_fwd_s=a2a_fwd_s, a2a_bwd_s=a2a_bwd_s, a2a_hidden_s=hidden,
                    weight_stack_s=stacked_weights_s(model, tables, ep, etp) if facts.moe_stacked_expert_weights else 0.0,
                    imbalance_act_s=(f - 1.0) * routed_act_s)


_FORCED = re.compile(r"force-load-balancing|force balance assumed")
_A2A_OVERLAP = re.compile(r"--overlap-moe-expert-parallel-comm")
_DEEPEP = re.compile(r"(?<!not )DeepEP|--moe-token-dispatcher-type flex")
_UNPACKED = re.compile(r"moe_packed_experts=false")


def moe_run_facts(notes: str) -> dict:
    """Framework facts a published MoE run states in its notes: forced balanced routing
    (--moe-router-force-load-balancing), the EP all-to-all overlap (--overlap-moe-expert-parallel-comm),
    the flex dispatcher on DeepEP (Framework.moe_dispatch "flex") and KempnerForge's unpacked experts
    (moe_packed_experts=false: Framework.moe_stacked_expert_weights)."""
    facts = {}
    if _DEEPEP.search(notes):
        facts["moe_dispatch"] = "flex"
    if _FORCED.search(notes):
        facts["moe_load_imbalance"] = FORCED_BALANCE
    if _A2A_OVERLAP.search(notes):
        facts["moe_a2a_overlap"] = True
    if _UNPACKED.search(notes):
        facts["moe_stacked_expert_weights"] = True
    return facts
