"""Profiler pieces that need no process group: formulas, layouts, timing, aggregation, bad input."""
from __future__ import annotations

import dataclasses
import json
import math
import time

import pandas as pd
import pytest

from autoplan.cli.main import main
from autoplan.specs import AutoplanError, HardwareProfile
from profiler import (
    algorithm_bandwidth_bytes_per_s, build_profile, bus_bandwidth_factor, group_layouts,
)
from autoplan.specs.compat import check_profile_hosts
from autoplan.specs.gpus import lookup_gpu as lookup_datasheet
from profiler.build import RunFacts
from profiler.timing import Clock, TimingPolicy, sample_times_s


# -- bus bandwidth (nccl-tests PERFORMANCE.md) -------------------------------------------------

@pytest.mark.parametrize("op, n, factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_reduce", 1, 0.0),
    ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75), ("all_to_all", 2, 0.5),
    ("send_recv", 2, 1.0), ("send_recv", 8, 1.0),
])
def test_bus_bandwidth_factor_matches_nccl_tests(op, n, factor):
    assert bus_bandwidth_factor(op, n) == pytest.approx(factor)


def test_bus_bandwidth_factor_rejects_unknown_op_and_group():
    with pytest.raises(ValueError, match="broadcast"):
        bus_bandwidth_factor("broadcast", 8)
    with pytest.raises(ValueError, match="positive"):
        bus_bandwidth_factor("all_reduce", 0)


def test_algorithm_and_bus_bandwidth_of_a_known_all_reduce():
    # 1 GiB all-reduced over 8 ranks in 5 ms: algbw 214.7 GB/s, busbw x 7/4 = 375.8 GB/s.
    alg = algorithm_bandwidth_bytes_per_s(1 << 30, 5e-3)
    assert alg == pytest.approx(214.748e9, rel=1e-4)
    assert alg * bus_bandwidth_factor("all_reduce", 8) == pytest.approx(375.81e9, rel=1e-4)


# -- process groups ----------------------------------------------------------------------------

def test_group_layouts_two_nodes_of_eight():
    layouts = group_layouts(world_size=16, local_world_size=8)
    described = [(layout.scope, layout.group_size, len(layout.rank_lists)) for layout in layouts]
    assert described == [("intra_node", 2, 8), ("intra_node", 4, 4), ("intra_node", 8, 2),
                         ("inter_node", 2, 8), ("inter_node", 16, 1)]
    for layout in layouts:  # every rank in exactly one group of each layout
        assert sorted(r for ranks in layout.rank_lists for r in ranks) == list(range(16))
    intra8 = layouts[2].rank_lists
    assert intra8 == (tuple(range(8)), tuple(range(8, 16)))
    one_per_node = layouts[3].rank_lists
    assert one_per_node[3] == (3, 11)  # local rank 3 of node 0 and of node 1


def test_group_layouts_odd_node_sizes_and_single_node():
    assert [(lay.scope, lay.group_size) for lay in group_layouts(6, 6)] == [("intra_node", 2), ("intra_node", 6)]
    assert [(lay.scope, lay.group_size) for lay in group_layouts(2, 2)] == [("intra_node", 2)]
    assert [(lay.scope, lay.group_size) for lay in group_layouts(3, 1)] == [("inter_node", 3)]
    with pytest.raises(ValueError, match="multiple"):
        group_layouts(6, 4)


# -- timing --------------------------------------------------------------------------------------

def test_timing_policy_plans_runs_and_samples():
    policy = TimingPolicy(warmup_iterations=1, min_samples=3, max_samples=10, target_sample_s=1e-3, budget_s=0.1)
    assert policy.plan(1e-5) == (100, 10)   # 100 runs make a 1 ms sample; budget allows 100, capped at 10
    assert policy.plan(0.05) == (1, 3)      # slow op: one run per sample, at least 3 samples
    assert policy.plan(0.02) == (1, 5)


def test_sample_times_measure_real_elapsed_time():
    policy = TimingPolicy(warmup_iterations=1, min_samples=3, max_samples=3, target_sample_s=0.0, budget_s=0.0)
    samples, inner = sample_times_s(lambda: time.sleep(0.002), Clock("cpu"), policy)
    assert inner == 1 and len(samples) == 3
    assert all(0.002 <= s < 0.2 for s in samples)


# -- datasheets ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, key", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H200", "h200-sxm"), ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA H200 NVL", None), ("NVIDIA A100 80GB PCIe", None),
    ("Intel(R) Xeon(R) Processor", None),
])
def test_datasheet_lookup_knows_only_the_parts_it_has_figures_for(name, key):
    sheet = lookup_datasheet(name)
    assert (sheet.key if sheet else None) == key
    if sheet:
        assert sheet.peak_flops_per_s["bf16"] in (312e12, 756.5e12, 989.5e12) and sheet.source


# -- aggregation -----------------------------------------------------------------------------------

def _rows():
    rows = [{"rank": 0, "kind": "capacity", "num_bytes": 8 << 30}, {"rank": 1, "kind": "capacity", "num_bytes": 6 << 30}]
    for t in (1.0, 2.0, 4.0):  # 2*64^3 FLOPs in t seconds
        rows.append({"rank": 0, "kind": "matmul", "m": 64, "n": 64, "k": 64, "dtype": "bf16", "time_s": t,
                     "flops_per_s": 2 * 64 ** 3 / t})
    for t in (0.5, 1.0):
        rows.append({"rank": 0, "kind": "memory_op", "op": "copy", "num_bytes": 1 << 20, "time_s": t,
                     "bytes_per_s": 2 * (1 << 20) / t})
    for op, size, t in (("all_reduce", 1 << 10, 1e-4), ("all_reduce", 1 << 20, 1e-3), ("send_recv", 1 << 10, 3e-5)):
        rows.append({"rank": 0, "kind": "collective", "op": op, "scope": "intra_node", "group_size": 2,
                     "message_bytes": size, "time_s": t,
                     "bus_bandwidth_bytes_per_s": size / t * bus_bandwidth_factor(op, 2)})
    return pd.DataFrame(rows)


def _facts(datasheet=None):
    return RunFacts(name="t", device_name="test device", device_kind="cpu", gpus_per_node=2, num_nodes=1,
                    capacity_source="test", datasheet=datasheet, environment={"k": "v"})


def test_build_profile_takes_medians_and_names_its_sources():
    profile = build_profile(_rows(), _facts(), "t.json.samples.csv")
    (matmul,) = profile.matmul
    assert matmul.flops_per_s == pytest.approx(2 * 64 ** 3 / 2.0)  # median of the three samples
    assert profile.memory_capacity_bytes == 6 << 30                 # the tightest process
    assert profile.memory_bandwidth_bytes_per_s == pytest.approx((2 * (1 << 20) / 0.5 + 2 * (1 << 20) / 1.0) / 2)
    assert profile.peak_flops_per_s == {"bf16": matmul.flops_per_s}
    assert profile.sources["peak_flops_per_s"].startswith("measured")
    assert profile.intra_node_bandwidth_bytes_per_s == pytest.approx((1 << 20) / 1e-3)
    assert profile.intra_node_latency_s == pytest.approx(3e-5)
    assert profile.inter_node_bandwidth_bytes_per_s == profile.intra_node_bandwidth_bytes_per_s
    assert "not measured" in profile.sources["inter_node_bandwidth_bytes_per_s"]
    assert HardwareProfile.from_dict(json.loads(json.dumps(profile.to_dict()))) == profile


def test_build_profile_uses_datasheet_peaks_for_a_known_gpu():
    sheet = lookup_datasheet("NVIDIA H100 80GB HBM3")
    profile = build_profile(_rows(), _facts(sheet), "t.json.samples.csv")
    assert profile.peak_flops_per_s["bf16"] == 989.5e12
    assert profile.inter_node_bandwidth_bytes_per_s == 50e9  # one node: the DGX NIC share, said so
    assert "datasheet" in profile.sources["inter_node_bandwidth_bytes_per_s"]


def test_inter_node_table_keeps_groups_that_fill_their_nodes():
    """One-rank-per-node groups give the per-GPU NIC share; the table keeps the node-filling groups."""
    rows = _rows()
    extra = []
    for group_size, ranks_per_node, time_s in ((2, 1, 0.1), (16, 8, 0.01)):
        for size in (1 << 20, 1 << 30):
            extra.append({"rank": 0, "kind": "collective", "op": "all_reduce", "scope": "inter_node",
                          "group_size": group_size, "ranks_per_node": ranks_per_node, "message_bytes": size,
                          "time_s": time_s * size / (1 << 30),
                          "bus_bandwidth_bytes_per_s": (1 << 30) / time_s * bus_bandwidth_factor("all_reduce", group_size)})
    frame = pd.concat([rows.assign(ranks_per_node=2), pd.DataFrame(extra)], ignore_index=True)
    facts = dataclasses.replace(_facts(), gpus_per_node=8, num_nodes=2)
    profile = build_profile(frame, facts, "x.csv")
    assert {c.group_size for c in profile.collectives if c.scope == "inter_node"} == {16}
    assert profile.inter_node_bandwidth_bytes_per_s == pytest.approx((1 << 30) / 0.1)  # 2(n-1)/n = 1 at n=2
    assert profile.sources["inter_node_bandwidth_bytes_per_s"].startswith("measured")


def test_build_profile_refuses_a_run_where_no_memory_op_fit():
    frame = _rows()
    facts = dataclasses.replace(_facts(), environment={"skipped_shapes": ["memory op copy 1 B (out of memory)"]})
    with pytest.raises(AutoplanError, match="no memory-bound op shape could run.*1 skipped"):
        build_profile(frame[frame["kind"] != "memory_op"], facts, "x.csv")


# -- hosting check for the planner ------------------------------------------------------------------

def test_check_profile_hosts():
    measured = build_profile(_rows(), _facts(), "x.csv")
    check_profile_hosts(measured, num_gpus=2, gpus_per_node=2)
    check_profile_hosts(measured, num_gpus=1, gpus_per_node=1)
    with pytest.raises(AutoplanError, match="nodes of 2 device.*asks for 8 per node"):
        check_profile_hosts(measured, num_gpus=8, gpus_per_node=8)
    check_profile_hosts(measured, num_gpus=4, gpus_per_node=2)  # more nodes than measured: links carry over
    no_network = dataclasses.replace(measured, inter_node_bandwidth_bytes_per_s=0.0)
    with pytest.raises(AutoplanError, match="no cross-node bandwidth.*asks for 4 devices"):
        check_profile_hosts(no_network, num_gpus=4, gpus_per_node=2)
    from cost_model import builtin_profile

    check_profile_hosts(builtin_profile("h100-80gb"), num_gpus=4096, gpus_per_node=8)  # a GPU type hosts any count


# -- bad input: one line, exit 2 ----------------------------------------------------------------------

def _bad_inputs(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"schema": "autoplan.plan/v1"}))
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema": "autoplan.profile/v0", "name": "x"}))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    return {
        "no output": (["profile", "--device", "cpu"], "--out"),
        "missing folder": (["profile", "--device", "cpu", "--out", str(tmp_path / "nope" / "p.json")], "does not exist"),
        "parent is a file": (["profile", "--device", "cpu", "--out", str(a_file / "p.json")], "does not exist"),
        "out is a folder": (["profile", "--device", "cpu", "--out", str(tmp_path)], "is a folder"),
        "too many processes": (["profile", "--device", "cpu", "--nproc", "100000", "--out", str(tmp_path / "p.json")],
                               "--nproc must be between 1 and"),
        "no processes": (["profile", "--device", "cpu", "--nproc", "0", "--out", str(tmp_path / "p.json")], "--nproc"),
        "missing profile": (["profile", "--compare", str(tmp_path / "none.json"), "builtin:h100-80gb"], "does not exist"),
        "plan, not profile": (["profile", "--compare", str(plan), "builtin:h100-80gb"], "autoplan.plan/v1"),
        "other version": (["profile", "--compare", str(old), "builtin:h100-80gb"], "autoplan.profile/v0"),
        "not json": (["profile", "--compare", str(garbage), "builtin:h100-80gb"], "not valid JSON"),
        "unknown builtin": (["profile", "--compare", "builtin:tpu-v9", "builtin:h100-80gb"], "tpu-v9"),
    }


@pytest.mark.parametrize("case", ["no output", "missing folder", "parent is a file", "out is a folder",
                                  "too many processes", "no processes", "missing profile", "plan, not profile",
                                  "other version", "not json", "unknown builtin"])
def test_bad_input_is_one_line_and_exit_2(case, tmp_path, capsys):
    argv, expected = _bad_inputs(tmp_path)[case]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err
    assert not (tmp_path / "p.json").exists()


def test_cuda_without_a_gpu_is_bad_input(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["profile", "--device", "cuda", "--out", str(tmp_path / "p.json")]) == 2
    assert "no CUDA device" in capsys.readouterr().err


# -- an interrupted run leaves nothing behind ------------------------------------------------------------

def test_interrupted_profile_writes_nothing(tmp_path, monkeypatch):
    import profiler.runner

    out = tmp_path / "p.json"
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        raise KeyboardInterrupt  # as Ctrl-C in the middle of the sweep (matmuls done, attention not)

    monkeypatch.setattr(profiler.runner, "measure_attention", interrupted)
    assert main(["profile", "--device", "cpu", "--nproc", "1", "--quick", "--out", str(out)]) == 130
    assert calls == [1]
    assert list(tmp_path.iterdir()) == []  # no profile, no samples CSV, no temporary file


def test_single_process_profile_is_complete_but_has_no_collectives(tmp_path, monkeypatch):
    """nproc 1 runs in this process; shrink the sweep so it takes a second, not the quick grid."""
    import profiler.runner
    from profiler.sweeps import MiB, sweep_for

    small = dataclasses.replace(sweep_for("cpu", quick=True), matmul_shapes=((64, 64, 64), (128, 128, 128)),
                                attention_shapes=((1, 128, 2, 32),), memory_op_bytes=(1 * MiB,))
    monkeypatch.setattr(profiler.runner, "sweep_for", lambda device_type, quick: small)
    out = tmp_path / "one.json"
    assert main(["profile", "--device", "cpu", "--nproc", "1", "--quick", "--out", str(out)]) == 0
    profile = HardwareProfile.from_dict(json.loads(out.read_text()))
    assert len(profile.matmul) == 2 * len(profile.peak_flops_per_s) and not profile.collectives
    assert {s.pass_ for s in profile.attention} == {"fwd", "bwd"}
    assert all(math.isfinite(s.flops_per_s) and s.flops_per_s > 0 for s in profile.matmul + profile.attention)
    assert "no link measured" in profile.sources["intra_node_bandwidth_bytes_per_s"]


def test_shipped_cpu_profile_loads_and_compares(capsys):
    """profiler/data holds a real 2-process quick CPU profile (see docs/profiler.md) with its samples."""
    from pathlib import Path

    import profiler

    path = Path(profiler.__file__).parent / "data" / "cpu2-quick.json"
    profile = HardwareProfile.from_dict(json.loads(path.read_text()))
    frame = pd.read_csv(path.parent / profile.raw_samples)
    assert len(frame[frame["kind"] == "matmul"]) >= 3 * len(profile.matmul)
    assert main(["profile", "--compare", str(path), "builtin:h100-80gb"]) == 0
    rows = {line[:40].strip(): line.split() for line in capsys.readouterr().out.splitlines()}
    ratio = float(rows["memory bandwidth GB/s"][-1])
    from cost_model import builtin_profile

    h100 = builtin_profile("h100-80gb")
    assert ratio == pytest.approx(h100.memory_bandwidth_bytes_per_s / profile.memory_bandwidth_bytes_per_s, rel=0.01)


def test_module_entry_outside_torchrun_is_bad_input(tmp_path, monkeypatch, capsys):
    from profiler.__main__ import main as module_main

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert module_main(["--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "torchrun" in err and "autoplan profile -o" in err
