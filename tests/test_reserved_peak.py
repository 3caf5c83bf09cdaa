"""Both peaks of a measured run: validate reports the allocated and the reserved error where the
records keep both (records made here from the shipped H100 ones, a reserved peak added)."""
import json

from autoplan.cli.validate_cmd import memory_lines
from cost_model.measured_runs import H100_RUNS_DIR, memory_errors, predict_measurements
from cost_model.profiles import builtin_profile


def test_validate_reports_allocated_and_reserved_errors(tmp_path):
    lines = (H100_RUNS_DIR / "runs.jsonl").read_text().splitlines()
    path = tmp_path / "runs.jsonl"
    with open(path, "w") as f:
        for line in lines:
            rec = json.loads(line)
            rec["peak_memory_reserved_bytes"] = int(rec["peak_memory_bytes"] * 1.10)  # 10% fragmentation
            f.write(json.dumps(rec) + "\n")
    preds = predict_measurements(path, builtin_profile("h100-80gb"))
    errors = memory_errors(preds)
    assert errors["allocated"]["mape"] < 0.01
    assert errors["reserved"]["num_runs"] == errors["allocated"]["num_runs"] == 10
    for p in preds:
        if p.status == "ok":
            assert p.predicted_allocated_bytes <= p.predicted_reserved_bytes <= p.predicted_peak_bytes
    text = memory_lines(errors)
    assert "allocated peak (max_memory_allocated) MAPE" in text and "reserved peak (max_memory_reserved) MAPE" in text
    shipped = memory_errors(predict_measurements(H100_RUNS_DIR / "runs.jsonl", builtin_profile("h100-80gb")))
    assert shipped["reserved"] is None and "not recorded" in memory_lines(shipped)


def test_a_cpu_profile_predicts_no_device_terms():
    from autoplan.specs import ParallelPlan
    from autoplan.inputs.catalog import resolve_model
    from autoplan.inputs.clusters import resolve_cluster
    from autoplan.planning.planner import make_estimator
    from autoplan.planning.training_shape import training_shape
    from dataclasses import replace

    from cost_model.stage_memory import allocated_peak_bytes

    model = resolve_model("llama-2-7b")
    cluster, gpu = resolve_cluster(8)
    training, _ = training_shape(model, cluster, 2048, 32, "bf16")
    plan = ParallelPlan(dp=8, micro_batch_size=1, num_microbatches=4)
    runtime = 62 * 2**20  # a CPU profile's measured runtime term (profiler/runtime_memory.py)
    cpu = replace(gpu, device_kind="cpu", runtime_memory_bytes=runtime)
    on_gpu = make_estimator(model, training, cluster, gpu).estimate(plan).memory_breakdown_bytes
    on_cpu = make_estimator(model, training, cluster, cpu).estimate(plan).memory_breakdown_bytes
    assert on_gpu["cuda_context"] > 0 and on_gpu["allocator_overhead"] > 0
    assert on_cpu["cuda_context"] == on_cpu["allocator_overhead"] == 0
    # the CPU plan holds its tensors plus the measured runtime, which is no allocated tensor; a GPU
    # plan has no such term, whatever its profile says
    assert "cpu_runtime" not in on_gpu and on_cpu["cpu_runtime"] == runtime
    assert sum(on_cpu.values()) == allocated_peak_bytes(on_cpu) + runtime
    # the same states (the executor keeps fp32 weights, grads and moments on either device; its fp32
    # activations on a CPU are counted against the model in tests/test_memory_counting.py)
    assert all(on_cpu[k] == on_gpu[k] for k in ("params", "grads", "optimizer"))
    on_gpu_with_field = make_estimator(model, training, cluster, replace(gpu, runtime_memory_bytes=runtime))
    assert on_gpu_with_field.estimate(plan).memory_breakdown_bytes == on_gpu
