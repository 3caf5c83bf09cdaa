"""A real profile: two gloo processes through `autoplan profile`, then planning from it.

The module measures once (a ~20-30 s quick CPU profile) and every test reads that profile. The GPU
test measures the local GPU and runs only where CUDA is.
"""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from autoplan.cli.main import main
from autoplan.specs import COLLECTIVE_OPS, HardwareProfile
from profiler import bus_bandwidth_factor
from profiler.build import ATTENTION_KEYS, COLLECTIVE_KEYS, MATMUL_KEYS, MEMORY_OP_KEYS
from profiler.sweeps import MEMORY_OPS

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4,
    "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 1024,
    "max_position_embeddings": 1024, "tie_word_embeddings": False,
}


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """(profile path, profile dict, samples frame) of one 2-process quick CPU profile."""
    folder = tmp_path_factory.mktemp("profile")
    out = folder / "cpu.json"
    assert main(["profile", "--device", "cpu", "--nproc", "2", "--quick", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    return out, data, pd.read_csv(folder / data["raw_samples"])


def _positive_finite(values) -> bool:
    values = list(values)
    return bool(values) and all(math.isfinite(v) and v > 0 for v in values)


@pytest.mark.slow
def test_two_process_profile_has_every_table(measured):
    out, data, _ = measured
    profile = HardwareProfile.from_dict(data)
    assert profile.measured and profile.device_kind == "cpu"
    assert (profile.gpus_per_node, profile.num_nodes) == (2, 1)
    assert {s.dtype for s in profile.matmul} == {"bf16", "fp32"}
    assert {(s.dtype, s.pass_) for s in profile.attention} == {(d, p) for d in ("bf16", "fp32") for p in ("fwd", "bwd")}
    assert {s.op for s in profile.memory_ops} == set(MEMORY_OPS)
    assert {(c.op, c.scope, c.group_size) for c in profile.collectives} == {(op, "intra_node", 2) for op in COLLECTIVE_OPS}
    assert _positive_finite(s.flops_per_s for s in profile.matmul + profile.attention)
    assert _positive_finite(s.bytes_per_s for s in profile.memory_ops)
    assert _positive_finite(c.bus_bandwidth_bytes_per_s for c in profile.collectives)
    assert _positive_finite(c.time_s for c in profile.collectives)
    assert _positive_finite([profile.memory_capacity_bytes, profile.memory_bandwidth_bytes_per_s,
                             profile.intra_node_bandwidth_bytes_per_s, profile.intra_node_latency_s])
    # CPU peaks are the best measured matmul, and say so
    assert profile.peak("bf16") == max(s.flops_per_s for s in profile.matmul if s.dtype == "bf16")
    assert profile.sources["peak_flops_per_s"].startswith("measured")
    # the CPU runtime term (modules and buffers the first training step loads) and the contention
    assert profile.runtime_memory_bytes > 0 and profile.sources["runtime_memory_bytes"].startswith("measured")
    assert 0 <= profile.environment["cpu_wait_share"] <= 1
    env = profile.environment
    for key in ("profiler_version", "units", "torch", "python", "hostnames", "git_revision", "created_utc"):
        assert env.get(key), key
    assert (env["world_size"], env["num_nodes"], env["backend"]) == (2, 1, "gloo")
    assert profile.raw_samples == "cpu.json.samples.csv"


@pytest.mark.slow
def test_samples_csv_keeps_every_sample_of_both_ranks(measured):
    _, data, frame = measured
    assert set(frame["rank"]) == {0, 1}
    timed = frame[frame["kind"] != "capacity"]
    assert (timed["time_s"] > 0).all() and len(frame[frame["kind"] == "capacity"]) == 2  # one per process
    # the JSON tables are the medians of the CSV's samples, shape by shape
    tables = [("matmul", MATMUL_KEYS, "flops_per_s", "flops_per_s"),
              ("attention", ATTENTION_KEYS, "flops_per_s", "flops_per_s"),
              ("memory_ops", MEMORY_OP_KEYS, "bytes_per_s", "bytes_per_s"),
              ("collectives", COLLECTIVE_KEYS, "bus_bandwidth_bytes_per_s", "bus_bandwidth_bytes_per_s")]
    kinds = {"matmul": "matmul", "attention": "attention", "memory_ops": "memory_op", "collectives": "collective"}
    for table, keys, csv_value, json_value in tables:
        part = frame[frame["kind"] == kinds[table]]
        expected = part.groupby(keys)[csv_value].median()
        assert len(expected) == len(data[table])
        for row in data[table]:
            assert row[json_value] == pytest.approx(expected[tuple(row[k] for k in keys)], rel=1e-9)
        assert (part.groupby(keys).size() >= 3).all()  # min_samples of the quick policy, per rank
    # bus bandwidth = message_bytes / time x the nccl-tests factor, sample by sample
    coll = frame[frame["kind"] == "collective"]
    factors = [bus_bandwidth_factor(op, int(n)) for op, n in zip(coll["op"], coll["group_size"])]
    assert (coll["message_bytes"] / coll["time_s"] * factors).to_numpy() == pytest.approx(
        coll["bus_bandwidth_bytes_per_s"].to_numpy())


@pytest.mark.slow
def test_compare_with_a_builtin_profile(measured, capsys):
    out, data, _ = measured
    assert main(["profile", "--compare", str(out), "builtin:h100-80gb"]) == 0
    text = capsys.readouterr().out
    capacity_line = next(line for line in text.splitlines() if line.startswith("memory capacity GiB"))
    assert f"{data['memory_capacity_bytes'] / 2 ** 30:.4g}" in capacity_line
    assert "base-2" in text and "base-10" in text


@pytest.mark.slow
def test_search_plans_from_the_measured_profile(measured, tmp_path, capsys):
    out, data, _ = measured
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    shape = ["--model", str(config), "--gpus", "2", "--gpus-per-node", "2", "--global-batch", "8",
             "--seq-len", "512", "--trials", "20", "--json"]
    assert main(["search", *shape, "--profile", str(out)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["cluster"]["profile"] == str(out) and plan["cluster"]["name"] == data["name"]
    assert 0 < plan["prediction"]["peak_memory_bytes"] <= data["memory_capacity_bytes"]
    assert main(["search", *shape, "--gpu", "h100-80gb"]) == 0
    on_h100 = json.loads(capsys.readouterr().out)
    # a CPU core pair is orders of magnitude slower than two H100s: the measured tables were used
    assert plan["prediction"]["step_time_s"] > 20 * on_h100["prediction"]["step_time_s"]


@pytest.mark.gpu
def test_gpu_quick_profile(tmp_path):
    import torch

    out = tmp_path / "gpu.json"
    assert main(["profile", "--device", "cuda", "--nproc", "1", "--quick", "--out", str(out)]) == 0
    profile = HardwareProfile.from_dict(json.loads(out.read_text()))
    assert profile.device_kind == "gpu" and profile.device_name == torch.cuda.get_device_name(0)
    assert "bf16" in {s.dtype for s in profile.matmul}
    if torch.cuda.get_device_capability(0) >= (8, 9):
        assert "fp8" in {s.dtype for s in profile.matmul}
    total_bytes = torch.cuda.mem_get_info(0)[1]
    assert 0.5 * total_bytes < profile.memory_capacity_bytes <= total_bytes
    assert _positive_finite(s.flops_per_s for s in profile.matmul + profile.attention)
    assert profile.environment["driver"] and profile.environment["nccl"]


@pytest.mark.slow
def test_torchrun_across_two_nodes_measures_inter_node_links(tmp_path):
    """Two torchrun agents on this machine rendezvous as two one-process nodes: the multi-node path."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "two_nodes.json"

    def agent(node_rank: int):
        return subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
             "--node-rank", str(node_rank), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
             "--rdzv-id", "test", "-m", "profiler", "--device", "cpu", "--quick", "--out", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    agents = [agent(0), agent(1)]
    results = [a.communicate(timeout=300) for a in agents]
    assert [a.returncode for a in agents] == [0, 0], results
    profile = HardwareProfile.from_dict(json.loads(out.read_text()))
    assert (profile.num_nodes, profile.gpus_per_node, profile.environment["world_size"]) == (2, 1, 2)
    assert {(c.op, c.scope, c.group_size) for c in profile.collectives} == {(op, "inter_node", 2) for op in COLLECTIVE_OPS}
    assert profile.sources["inter_node_bandwidth_bytes_per_s"].startswith("measured")
    assert profile.inter_node_bandwidth_bytes_per_s == max(
        c.bus_bandwidth_bytes_per_s for c in profile.collectives if c.op == "all_reduce")
    assert "wrote" in results[0][0] and "wrote" not in results[1][0]  # rank 0 writes and reports



class _RanksThatWrote:
    """Stands in for torch.multiprocessing's context of spawned ranks (the race needs a Ctrl-C at one
    exact moment, which real ranks give only by chance): rank 0 has replaced the profile, and the
    Ctrl-C lands while the parent waits for the ranks' teardown; or it lands before any write."""

    def __init__(self, out, write: bool):
        if write:
            tmp = out.with_suffix(".tmp")
            tmp.write_text('{"name": "new"}')
            tmp.replace(out)            # atomic, as write_json_atomic does
        self.processes = []

    def join(self, timeout=None):
        raise KeyboardInterrupt


@pytest.mark.parametrize("written", [True, False])
def test_a_ctrl_c_after_the_profile_is_written_ends_as_finished(tmp_path, monkeypatch, capsys, written):
    """An interrupt that comes after rank 0 replaced the output is not an interruption of the work:
    the new profile stays and the command ends as finished (the fuzz test's SIGINT at 12 s hit this on
    a fast machine: exit 130 over a file that had changed). Before the write, it stays an interruption."""
    import torch.multiprocessing as mp

    from profiler.launch import profile_local
    from profiler.runner import ProfileRequest

    out = tmp_path / "profile.json"
    out.write_text('{"name": "old"}')
    monkeypatch.setattr(mp, "start_processes", lambda *a, **k: _RanksThatWrote(out, written))
    request = ProfileRequest(out=out, device_type="cpu", quick=True)
    if written:
        profile_local(request, 2)
        assert json.loads(out.read_text())["name"] == "new"
        assert "written to" in capsys.readouterr().err
    else:
        with pytest.raises(KeyboardInterrupt):
            profile_local(request, 2)
        assert json.loads(out.read_text())["name"] == "old"
