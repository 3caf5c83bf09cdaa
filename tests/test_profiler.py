"""Profiler pieces that need no process group: formulas, layouts, timing, aggregation, bad input."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path

import pandas as pd
import pytest

from autoplan.cli.main import main
from autoplan.specs import AutoplanError, HardwareProfile
from profiler import (
    algorithm_bandwidth_bytes_per_s, build_profile, bus_bandwidth_factor, group_layouts,
)
from autoplan.specs.compat import check_profile_hosts
from autoplan.specs.gpus import lookup_gpu as lookup_datasheet
from profiler.build import RunFacts, samples_path
from profiler.sweeps import sweep_for
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


def test_inter_node_all_to_all_rows_keep_every_group_with_its_ranks_per_node():
    """Issue 49: an all-to-all's rows are not a ring's. Both groups of a 2 x 8 run stay in the table,
    each saying how many of its ranks shared a node, and the cost model reads the same NIC share from
    either: 45 GB/s, whether all of a GPU's buffer left the node (one rank per node: bus bandwidth 45)
    or half of it did (16 ranks filling 2 nodes: nccl-tests' bus bandwidth 15/16 x 90 = 84.4)."""
    from cost_model.tables import ProfileTables

    nic, size = 45e9, 1 << 30
    extra = []
    for op, scope, group_size, rpn, busbw in (
            ("all_to_all", "inter_node", 2, 1, nic), ("all_to_all", "inter_node", 16, 8, 15 / 16 * 2 * nic),
            ("all_reduce", "inter_node", 2, 1, nic), ("all_reduce", "inter_node", 16, 8, 8 * nic),
            ("all_to_all", "intra_node", 8, 8, 370e9), ("all_reduce", "intra_node", 8, 8, 370e9)):
        extra.append({"rank": 0, "kind": "collective", "op": op, "scope": scope, "group_size": group_size,
                      "ranks_per_node": rpn, "message_bytes": size, "bus_bandwidth_bytes_per_s": busbw,
                      "time_s": size * bus_bandwidth_factor(op, group_size) / busbw})
    frame = pd.concat([_rows().assign(ranks_per_node=2), pd.DataFrame(extra)], ignore_index=True)
    profile = build_profile(frame, dataclasses.replace(_facts(), gpus_per_node=8, num_nodes=2), "x.csv")
    inter = {(c.op, c.group_size, c.ranks_per_node) for c in profile.collectives if c.scope == "inter_node"}
    assert inter == {("all_to_all", 2, 1), ("all_to_all", 16, 8), ("all_reduce", 16, 8)}
    tables = ProfileTables(profile)
    for n in (2, 16):
        assert tables.bus_bandwidth("all_to_all", "inter_node", n, size) == pytest.approx(nic)
    # 32 ranks on 4 nodes: 24/32 of each GPU's gigabyte leaves through its NIC (the 7/32 on NVLink at
    # 370 GB/s meanwhile takes 0.6 ms of the NIC's 17.9).
    assert tables.collective_time_s("all_to_all", size, 32, 8) == pytest.approx(size * 24 / 32 / nic, rel=0.01)


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
        raise KeyboardInterrupt  # as Ctrl-C in the middle of the sweep (compute done, collectives not)

    monkeypatch.setattr(profiler.runner, "measure_collectives", interrupted)
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
    # The CPU's state is stamped before and after; every shape was sampled in each round-robin pass.
    (state,) = profile.environment["device_state"].values()
    assert set(state) == {"before", "after"} and "cpu_mhz" in state["before"]["cpu"]
    assert profile.environment["sweep"]["num_passes"] == small.num_passes == 3
    frame = pd.read_csv(samples_path(out))
    compute = frame[frame["kind"].isin(["matmul", "attention", "memory_op"])]
    assert (compute.groupby(["kind", "m", "n", "k", "dtype", "op", "num_bytes", "pass", "seq_len"], dropna=False)
            ["sweep_pass"].nunique() == 3).all()


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


# -- profiler truth: the device's state, round-robin passes, one procedure for quick and full -----------

FAKE_NVIDIA_SMI = """#!/bin/sh
# A stand-in for nvidia-smi: {refuse_old} refuses the old throttle-reason field name, as a newer driver might.
case "$*" in
  *clocks_throttle_reasons*) [ "{refuse_old}" = yes ] && {{ echo "Field is not a valid field" >&2; exit 2; }} ;;
esac
echo "0, NVIDIA H100 80GB HBM3, 1755, 2619, 1980, 700.00, 689.52, 0x0000000000000004, 61"
echo "1, NVIDIA H100 80GB HBM3, 1980, 2619, 1980, 700.00, [N/A], 0x0000000000000000, 35"
"""


@pytest.mark.parametrize("refuse_old", ["no", "yes"])
def test_gpu_state_from_nvidia_smi(tmp_path, monkeypatch, refuse_old):
    from profiler.device_state import device_state, state_summary

    script = tmp_path / "nvidia-smi"
    script.write_text(FAKE_NVIDIA_SMI.format(refuse_old=refuse_old))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    state = device_state("cuda")
    assert state["source"] == "nvidia-smi"
    first, second = state["gpus"]
    assert (first["sm_clock_mhz"], first["max_sm_clock_mhz"], first["power_limit_w"], first["temperature_c"]) == \
        (1755, 1980, 700.0, 61)
    assert first["throttle_reasons"] == ["sw_power_cap"] and second["throttle_reasons"] == []
    assert "power_draw_w" not in second       # "[N/A]" is left out, not stored as text
    cold = {"gpus": [dict(second, sm_clock_mhz=1980)]}
    assert state_summary(cold, state) == ("SM clock 1980 -> 1755/1980 MHz, 35 -> 61/35 C, power limit 700/700 W, "
                                          "throttled after by sw_power_cap (nvidia-smi)")


def test_gpu_state_without_nvidia_smi_or_nvml_says_so(tmp_path, monkeypatch):
    from profiler.device_state import device_state

    monkeypatch.setenv("PATH", str(tmp_path))      # no nvidia-smi here
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)   # and no pynvml
    state = device_state("cuda")
    assert state["source"].startswith("unavailable") and "gpus" not in state


def test_cpu_state_reads_this_host_and_a_sysfs_tree(tmp_path):
    from profiler.device_state import cpu_state, device_state

    here = device_state("cpu")
    assert here["source"] == "procfs/sysfs"
    if Path("/proc/cpuinfo").read_text().count("cpu MHz"):
        assert here["cpu"]["cpu_mhz"]["min"] > 0
    assert len(here["cpu"]["load_average"]) == 3
    # A host with cpufreq and thermal zones (written here, as Linux lays them out).
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text("processor : 0\ncpu MHz : 3000.5\nprocessor : 1\ncpu MHz : 1200.0\n")
    for cpu, governor, khz in ((0, "performance", "3000000"), (1, "powersave", "1200000")):
        d = tmp_path / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text(governor + "\n")
        (d / "scaling_cur_freq").write_text(khz + "\n")
    zone = tmp_path / "sys/class/thermal/thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "temp").write_text("54000\n")
    (zone / "type").write_text("x86_pkg_temp\n")
    state = cpu_state(str(tmp_path))
    assert state["cpu_mhz"] == {"min": 1200.0, "median": 2100.25, "max": 3000.5}
    assert state["governors"] == ["performance", "powersave"] and state["scaling_cur_mhz"]["max"] == 3000.0
    assert state["temperatures_c"] == {"thermal_zone0:x86_pkg_temp": 54.0}


def test_passes_visit_every_shape_in_every_pass():
    from profiler.compute import Bench
    from profiler.passes import Probe, Timed, run_passes, share
    from profiler.timing import Recorder

    visits = []

    def probe(name):
        def build():
            visits.append(name)
            return [Timed("matmul", lambda: sum(range(200)), {"flops": 1.0}, {"m": name, "n": 1, "k": 1, "dtype": "fp32"})]
        return Probe(name, 1, build)

    recorder = Recorder(0, "host")
    bench = Bench(device=__import__("torch").device("cpu"), clock=Clock("cpu"), recorder=recorder, tick=lambda: None,
                  memory_limit_bytes=10)
    probes = [probe(0), probe(1), probe(2), Probe("too big", 11, lambda: visits.append("too big") or [])]
    policy = TimingPolicy(warmup_iterations=1, min_samples=7, max_samples=7, target_sample_s=1e-4, budget_s=1e-3)
    run_passes(bench, probes, policy, num_passes=3)
    assert visits == [0, 1, 2] * 3            # round robin; the shape over the limit is never built
    assert bench.skipped == ["too big (over 10 B)"]
    frame = pd.DataFrame(recorder.rows)
    for name, rows in frame.groupby("m"):
        assert list(rows["sweep_pass"]) == [0, 0, 0, 1, 1, 2, 2]      # 7 samples: 3 + 2 + 2
        assert list(rows["sample_index"]) == list(range(7))
    assert [share(7, 3, p) for p in range(3)] == [3, 2, 2]


@pytest.mark.parametrize("device_type", ["cuda", "cpu"])
def test_quick_and_full_sweeps_share_their_procedure_and_quick_shapes(device_type):
    quick, full = sweep_for(device_type, True), sweep_for(device_type, False)
    for field in ("compute_policy", "collective_policy", "num_passes", "soak_s", "memory_op_dtype", "collective_dtype"):
        assert getattr(quick, field) == getattr(full, field), field
    assert set(quick.matmul_shapes) <= set(full.matmul_shapes)
    assert set(quick.attention_shapes) <= set(full.attention_shapes)
    assert set(quick.memory_op_bytes) <= set(full.memory_op_bytes)
    assert set(quick.message_bytes) <= set(full.message_bytes)
    assert (quick.soak_s > 0) == (device_type == "cuda")


_WRITER = """
import sys
from profiler.launch import exit_on_sigterm
from autoplan.specs import write_text_atomic
if sys.argv[2] == "rank":
    exit_on_sigterm()
text = "x" * (32 * 2**20)  # a write long enough for the signal to land inside it
print("ready", flush=True)
while True:
    write_text_atomic(sys.argv[1], text)
"""


@pytest.mark.parametrize("delay_s", [0.0, 0.15])
def test_a_rank_stopped_by_sigterm_leaves_no_temporary_file(tmp_path, delay_s):
    """What a profiling rank does on SIGTERM (the launcher's stop after a Ctrl-C, torchrun's teardown,
    a `kill`): exit 143 through write_text_atomic's cleanup, so the output folder holds no `.tmp`,
    and the file that was there is whole."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "cpu.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(out), "rank"], stdout=subprocess.PIPE, env=env)
    assert proc.stdout.readline() == b"ready\n"
    time.sleep(0.3 + delay_s)  # writes under way
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["cpu.json"])
    assert not out.exists() or out.stat().st_size == 32 * 2**20
