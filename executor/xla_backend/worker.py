"""The process that runs plans under torch_xla SPMD: `python -m executor.xla_backend.worker REQ RES`.

A process of its own because PJRT reads PJRT_DEVICE / CPU_NUM_DEVICES when torch_xla starts, and
SPMD mode cannot be switched off again; the parent (launch.py) sets them. REQ holds
{"runs": [{"plan": ..., "options": ...}, ...]}: several plans share one process and so one start of
the runtime. RES receives {"measurements": [...]} or {"error": "<one line>"} for bad input (exit 2).
"""
from __future__ import annotations

import os
import sys
from functools import partial

import torch

from autoplan.specs import AutoplanError, Measurement, PlanDocument, read_json, write_json_atomic
from executor.model import build_model, canonical_name, model_notes
from executor.options import RunOptions
from executor.record import (
    build_measurement, cpu_peak_rss_bytes, cpu_rss_baseline, cpu_rss_growth_bytes, environment, reset_cpu_peak_rss,
    run_extra,
)
from executor.xla_backend.compiled import DUMP_DIR_ENV, CompiledStep
from executor.xla_backend.mesh import AXES, MeshShape
from executor.xla_backend.sharding import activation_specs, init_optimizer_state, parallelize, shard_gradients
from executor.xla_backend.train import Placement, make_optimizer, train
from executor.parent_link import die_with_launcher


def _log(message: str) -> None:
    sys.stderr.write(f"[xla] {message}\n")
    sys.stderr.flush()


def _num_compilations() -> int:
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


def _sharding_of(tensor: torch.Tensor) -> str:
    import torch_xla

    return torch_xla._XLAC._get_xla_sharding_spec(tensor) or "replicated"


def _layout_report(model: torch.nn.Module, optimizer: torch.optim.Optimizer, marked: dict) -> dict:
    """What was asked and what XLA made of it, for layer 0 and the parameters outside the layers
    (every layer has layer 0's layout), and for one weight's moment and gradient. The last step's
    gradients are still held, so theirs is the sharding the update consumed."""
    named = {canonical_name(n): p for n, p in model.named_parameters()}
    shown = [n for n in named if not n.startswith("layers.") or n.startswith("layers.0.")]
    probe = named["layers.0.attention.wq.weight"]
    return {
        "param_partition_specs": {n: list(marked[n]) for n in shown},
        "param_sharding": {n: _sharding_of(named[n]) for n in shown},
        "wq_layout": {"param": _sharding_of(probe), "exp_avg": _sharding_of(optimizer.state[probe]["exp_avg"]),
                      "grad": _sharding_of(probe.grad) if probe.grad is not None else "none"},
    }


def run_plan(doc: PlanDocument, options: RunOptions) -> Measurement:
    """Build, annotate and train one plan on the SPMD mesh; the record of what it measured."""
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr
    from torch_xla.utils.checkpoint import checkpoint as xla_checkpoint

    par = doc.parallel
    num_devices = xr.global_runtime_device_count()
    mesh = MeshShape.from_plan(par).build(num_devices)
    device = torch_xla.device()
    compilations_before = _num_compilations()
    reset_cpu_peak_rss()  # a new high water, and the process before the model, as the torch backend takes them
    rss_baseline = cpu_rss_baseline()
    compiled_step = CompiledStep(os.environ.get(DUMP_DIR_ENV))
    compiled_step.start()

    # Weights depend on the seed and the parameter name only: the eager reference gets the same.
    model = build_model(doc.model, "cpu")
    model.init_weights(options.seed)
    model.to(device)
    if doc.model.tied_embeddings:
        # Module.to() cannot swap a CPU tensor's storage for an XLA one in place, so it wraps each
        # module's parameter in a new Parameter: the head and the embedding come out as two
        # separate weights (measured: grad norms 0.9% off the eager run). Tie them again.
        model.output.weight = model.tok_embeddings.weight
    marked, recomputed = parallelize(model, mesh, par, partial(xla_checkpoint, use_reentrant=True,
                                                               preserve_rng_state=False))  # no dropout
    optimizer = make_optimizer(model, options)
    init_optimizer_state(optimizer, model, mesh, par.zero_stage)
    torch_xla.sync()  # materialize weights and moments now, so step 1 compiles the same graph as step 2
    token_spec = activation_specs(par.sequence_parallel)["tokens"]

    def place_tokens(tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(device)
        xs.mark_sharding(tokens, mesh, token_spec)
        return tokens

    def end_step() -> None:
        torch_xla.sync()
        xm.wait_device_ops()

    placement = Placement(place_tokens=place_tokens, end_step=end_step)
    if par.zero_stage == 2:
        placement.before_update = lambda: shard_gradients(model, mesh)
    _log(f"plan {doc.plan_id}: mesh {dict(zip(AXES, (par.dp, par.cp, par.tp)))} on {num_devices} "
         f"{xr.device_type()} devices, zero={par.zero_stage} sp={par.sequence_parallel} recompute={par.recompute}")
    # step lines on stdout, as the torch backend's rank 0 prints them (one format: executor.record.step_line)
    result = train(model, optimizer, doc, options, placement, log=partial(print, flush=True))
    env = environment("cpu" if xr.device_type() == "CPU" else xr.device_type().lower(), num_devices, "xla",
                      device_name=f"XLA {xr.device_type()} x{num_devices}")
    extra = {
        "mesh": {"axes": list(AXES), "shape": [par.dp, par.cp, par.tp]},
        **_layout_report(model, optimizer, marked),
        "recomputed_modules": recomputed,
        "num_xla_compilations": _num_compilations() - compilations_before,
        "compute_dtype": "float32",
        "cpu_rss_high_water_bytes": cpu_peak_rss_bytes(),  # the whole process: all virtual devices
        "cpu_rss_growth_bytes": cpu_rss_growth_bytes(rss_baseline),  # likewise, over the process before the model
    }
    program_bytes = compiled_step.program_bytes_per_device()
    extra["num_matmuls_in_step"] = compiled_step.program_num_matmuls()
    if program_bytes is None:  # XLA's cache served the step: fall back to the process RSS
        peak_memory_kind, peak_memory_bytes = "cpu_rss_high_water", extra["cpu_rss_high_water_bytes"]
    else:
        peak_memory_kind, peak_memory_bytes = "xla_compiled_bytes_per_device", program_bytes
    extra.update(run_extra(options, result.grad_norms, result.learning_rates, 0, peak_memory_kind,
                           model_notes(doc.model)))
    return build_measurement(doc, "xla", "ok", step_times_s=result.step_times_s[options.warmup_steps:],
                             losses=result.losses, peak_memory_bytes=peak_memory_bytes, env=env,
                             num_warmup_steps=options.warmup_steps, peak=0.0, extra=extra)


def _failed(doc: PlanDocument, options: RunOptions, exc: Exception) -> Measurement:
    """An error is a record too: out-of-memory or a runtime failure, with its one-line reason."""
    text = " ".join(str(exc).split())[:500]
    status = "oom" if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower() else "error"
    return build_measurement(doc, "xla", status, step_times_s=[], losses=[], peak_memory_bytes=cpu_peak_rss_bytes(),
                             env={"backend": "xla"}, num_warmup_steps=options.warmup_steps, peak=0.0,
                             error=f"{type(exc).__name__}: {text}")


def main(argv: list) -> int:
    request_path, result_path = argv
    die_with_launcher()
    try:
        runs = [(PlanDocument.from_dict(r["plan"]), RunOptions(**r["options"]))
                for r in read_json(request_path, "xla run request")["runs"]]
        import torch_xla.runtime as xr

        xr.use_spmd()  # before any XLA tensor exists
        measurements = []
        for doc, options in runs:
            try:
                measurements.append(run_plan(doc, options))
            except AutoplanError:
                raise
            except Exception as exc:  # noqa: BLE001 - a failed run is data, not a crash
                _log(f"plan {doc.plan_id} failed: {type(exc).__name__}: {exc}")
                measurements.append(_failed(doc, options, exc))
    except AutoplanError as exc:
        write_json_atomic(result_path, {"error": str(exc)})
        return 2
    write_json_atomic(result_path, {"measurements": [m.to_dict() for m in measurements]})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
