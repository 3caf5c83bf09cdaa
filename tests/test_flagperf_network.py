"""FlagPerf's A100 servers' scale-out network, from FlagPerf's own interconnect benchmarks: what the
FLAGPERF A100 row's profile assumes about it (cost_model/source_facts.py FLAGPERF_A100_NICS_PER_NODE).

Worked by hand from the two READMEs (@97012624): the 16-GPU, 2-server all-reduce reports 45.11 GB/s,
computed by its main.py as algbw x 2 (8 - 1) / 8 (node_size, not the 16 ranks); nccl-tests' busbw at 16
ranks is algbw x 2 (16 - 1) / 16, so 45.11 x (30 / 16) / (14 / 8) = 48.33 GB/s. A ring all-reduce across
nodes runs at the node's NIC total, and one NIC there is 25 GB/s (the P2P README): 48.33 / 25 = 1.93,
two NICs per 8-GPU server, 6.25 GB/s per GPU, where a DGX A100 as shipped has eight (25 GB/s per GPU).
"""
from __future__ import annotations

import pytest

from cost_model.profiles import builtin_profile
from cost_model.published_rows import load_published_runs
from cost_model.source_facts import (FLAGPERF_A100_ALLREDUCE_BUSBW, FLAGPERF_A100_NICS_PER_NODE,
                                     nccl_tests_busbw)


def test_the_reported_all_reduce_is_restated_as_nccl_tests_counts_it():
    assert nccl_tests_busbw(45.11e9, reported_ranks=8, ranks=16) == pytest.approx(48.332e9, rel=1e-4)
    assert FLAGPERF_A100_ALLREDUCE_BUSBW == pytest.approx(48.332e9, rel=1e-4)
    assert nccl_tests_busbw(100.0, reported_ranks=16, ranks=16) == 100.0


def test_two_nics_per_server_price_the_flagperf_a100_row():
    assert FLAGPERF_A100_NICS_PER_NODE == 2
    rows = {r.id: r for r in load_published_runs() if r.source == "flagperf"}
    assert rows["FLAGPERF-mixtral8L-01"].nic_bytes_per_s == pytest.approx(2 * 25e9 / 8)
    # No interconnect measurement of FlagPerf's H100 servers: the DGX default stays.
    assert rows["FLAGPERF-mixtral8x7b-01"].nic_bytes_per_s is None


def test_the_rows_profile_reproduces_the_measured_all_reduce_within_its_nic_efficiency():
    """The profile's inter-node all-reduce over 16 ranks, 8 per node, at FlagPerf's 4 GiB buffer: the
    node's NIC total at the profile's achievable fraction (cost_model/profiles.py _NIC_EFF, 0.9):
    2 x 25 x 0.9 = 45 GB/s, within 7 % of the 48.33 measured. The DGX default would price 180."""
    run = next(r for r in load_published_runs() if r.id == "FLAGPERF-mixtral8L-01")
    profile = builtin_profile(run.gpu, run.nic_bytes_per_s)
    sample = next(s for s in profile.collectives if s.op == "all_reduce" and s.scope == "inter_node"
                  and s.group_size == 16 and s.message_bytes == 4 * 1024 ** 3)
    assert sample.bus_bandwidth_bytes_per_s == pytest.approx(FLAGPERF_A100_ALLREDUCE_BUSBW, rel=0.07)
