"""The Kempner H200 cluster's scale-out network, bounded by the bytes KempnerForge's own dense runs
moved: what the KEMPNER and KEMPNERMOE rows' profile may assume about it.

The MoE rows (KEMPNERMOE-packed-01..04, 2 nodes x 4 H200) are predicted 2-2.8x too fast, and a slow
network would close them: about one NDR 400 Gb/s link per 4-GPU node (9-12 GB/s per GPU in the
profile's units). The counted bytes of a dense run on the same cluster, a week earlier, rule that out.
Expected values are worked by hand from KempnerForge's code and the published row, not from the model.
"""
from __future__ import annotations

import pytest

from cost_model.published_rows import load_published_runs

ONE_LINK_PER_NODE_BYTES_PER_S = 400e9 / 8 / 4
"""One NDR 400 Gb/s link shared by a node's 4 GPUs."""


def _step_s(run) -> float:
    return run.training.global_batch_size * run.training.seq_len / (
        run.measured_tokens_per_s_per_gpu * run.cluster.num_gpus)


def _fsdp_bytes_per_gpu(run) -> float:
    """What one GPU's FSDP2 collectives move per step in a TP-within-node, FSDP-across-nodes KempnerForge
    run (the blocks' linears only; norms and the replicated embedding left out, so a lower bound).
    reshard_after_forward=True (kempnerforge/distributed/parallel.py apply_fsdp2's default, which
    scripts/train.py keeps) gathers a block's bf16 weights for every micro-batch's forward and again for
    its backward; maybe_no_sync (kempnerforge/training/grad.py) reduce-scatters the fp32 gradients
    (default_mp_policy reduce_dtype float32) once, after the last micro-batch."""
    m = run.model
    head_dim = m.hidden_size // m.num_heads
    attention = 2 * m.hidden_size * m.hidden_size + 2 * m.hidden_size * m.num_kv_heads * head_dim
    linears_per_gpu = m.num_layers * (attention + 3 * m.hidden_size * m.ffn_hidden_size) / run.plan.tp
    micro_batches = run.training.global_batch_size // (run.plan.dp * run.plan.micro_batch_size)
    per_param = 2 * micro_batches * 2 + 4          # bf16 gathers, forward and backward, + fp32 reduce
    return per_param * linears_per_gpu * (run.plan.dp - 1) / run.plan.dp


def test_the_8_node_70b_run_moved_more_than_one_link_per_node_carries():
    # Worked example, KEMPNER-cv-70b-32gpu-tp4 (config_validation.md @dbf29da, 8 nodes x 4 H200):
    # 80 layers of q, o 8192^2 + k, v 8192x1024 + SwiGLU 3 x 8192 x 28672 = 855,638,016 linear weights,
    # over tp 4: 17.11e9 per GPU. Batch 2, global 64 over dp 8: 4 micro-batches, so 8 bf16 gathers and
    # one fp32 reduce-scatter: 20 B x 17.11e9 x 7/8 = 299.5 GB per GPU per step. Each dp group holds one
    # GPU per node (tp 4 fills the node), so all of it crosses the network, in 14.75 s: at least
    # 20.3 GB/s per GPU even if none of it waited, 81 GB/s per node, more than one 400 Gb/s link.
    run = {r.id: r for r in load_published_runs()}["KEMPNER-cv-70b-32gpu-tp4"]
    assert (run.plan.tp, run.plan.dp, run.cluster.gpus_per_node) == (4, 8, 4)
    assert _fsdp_bytes_per_gpu(run) == pytest.approx(20 * 80 * 855_638_016 / 4 * 7 / 8, rel=1e-9)
    bound = _fsdp_bytes_per_gpu(run) / _step_s(run)
    assert bound == pytest.approx(20.3e9, rel=0.01)
    assert bound > 1.6 * ONE_LINK_PER_NODE_BYTES_PER_S


def test_every_kempner_row_is_priced_on_a_network_that_carries_what_its_cluster_moved():
    runs = {r.id: r for r in load_published_runs()}
    dense = runs["KEMPNER-cv-70b-32gpu-tp4"]
    bound = _fsdp_bytes_per_gpu(dense) / _step_s(dense)
    kempner = [r for r in runs.values() if r.source in ("kempnerforge", "kempnerforge-moe")]
    assert len([r for r in kempner if r.source == "kempnerforge-moe"]) == 4
    for run in kempner:
        assert run.profile().inter_node_bandwidth_bytes_per_s >= bound, run.id
