"""What each speed-up of the torch backend is worth: every speed-up on, each one off, all off, for a
plan for one GPU, in one process.

    python benchmarks/executor_speedups.py PLAN.json [--device cuda] [--steps 8] [--warmup-steps 2]

On CPU the variants are measured paired: all are built first and stepped in turn, so a busy
machine slows them alike (a shared machine's load swamps separate runs). On CUDA one variant at a
time is built, run and freed (a GPU holds one model's states; its timings are steady), and each
variant's peak memory (torch.cuda.max_memory_allocated) is printed too. Prints the median step
time over the steps after the warm-up, the spread, and the ratio to "all on". Compilation
(`--compile`, default on CUDA) applies to every variant.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

from autoplan.specs.frameworks.autoplan import AUTOPLAN_SPEEDUPS

ROOT = Path(__file__).resolve().parent.parent
MODEL_SPEEDUPS = AUTOPLAN_SPEEDUPS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29517"), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0")
    import torch
    import torch.distributed as dist

    from autoplan.specs import PlanDocument
    from executor.torch_backend.worker import init_distributed

    if args.device == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    doc = PlanDocument.load(args.plan)
    if doc.parallel.num_gpus != 1:
        sys.stderr.write(f"executor_speedups: plan {args.plan} is for {doc.parallel.num_gpus} GPUs; give a 1-GPU plan\n")
        return 2
    device = init_distributed(args.device)
    times, peaks = measure(doc, device, args.steps, args.compile)
    dist.destroy_process_group()
    print(f"{doc.model.name}, seq {doc.training.seq_len}, {doc.training.global_batch_size} sequences in micro-batches "
          f"of {doc.parallel.micro_batch_size}, {args.device}; median of {args.steps - args.warmup_steps} steps after "
          f"{args.warmup_steps}" + (", variants stepped in turn" if args.device == "cpu" else ""))
    for line in report_lines(times, peaks, args.warmup_steps):
        print(line)
    return 0


def variants_of(speedups=MODEL_SPEEDUPS) -> dict:
    """Every speed-up on, each one off, all off: name -> the --without tuple."""
    return {"all on": ()} | {f"without {name}": (name,) for name in speedups} | {"all off": tuple(speedups)}


def measure(doc, device, steps: int, compile_blocks, variants: dict | None = None) -> tuple[dict, dict]:
    """Step times (every step, warm-up included) and, on CUDA, allocated peaks per variant, in a
    process whose (one-rank) process group is up. CPU: paired, CUDA: one variant at a time."""
    import torch

    from executor.data import open_tokens
    from executor.options import RunOptions
    from executor.torch_backend.train import PlanRunner

    variants = variants or variants_of()
    source = open_tokens("", "uint16", 0, doc.model.vocab_size)
    times: dict = {name: [] for name in variants}
    peaks: dict = {}

    def build(name):
        return PlanRunner(doc, RunOptions(out="", device=device.type, compile=compile_blocks, without=variants[name]),
                          device)

    def step(runner, name, index):
        inputs, labels = runner.load_batch(source, index)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        runner.step(inputs, labels, index)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times[name].append(time.perf_counter() - t0)

    if device.type == "cpu":
        runners = {name: build(name) for name in variants}
        for index in range(steps):
            for name, runner in runners.items():
                step(runner, name, index)
        return times, peaks
    for name in variants:
        torch._dynamo.reset()
        torch.cuda.reset_peak_memory_stats()
        runner = build(name)
        for index in range(steps):
            step(runner, name, index)
        peaks[name] = torch.cuda.max_memory_allocated()
        del runner
        gc.collect()
        torch.cuda.empty_cache()
    return times, peaks


def report_lines(times: dict, peaks: dict, warmup_steps: int) -> list[str]:
    base = statistics.median(times["all on"][warmup_steps:])
    lines = []
    for name, samples in times.items():
        kept = samples[warmup_steps:]
        median = statistics.median(kept)
        peak = f"  peak {peaks[name] / 2**30:.2f} GiB" if name in peaks else ""
        lines.append(f"  {name:<30} {median:8.4f} s  ({min(kept):.3f}-{max(kept):.3f})  {median / base:5.2f}x all on{peak}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
