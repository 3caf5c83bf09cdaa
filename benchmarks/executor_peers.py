"""`autoplan run` against the training loop a user would write by hand (benchmarks/plain_loop.py): a
Hugging Face transformers model from the same config.json, or the executor's own model, in a plain loop
with the same recipe and data, eager and torch.compile'd. One case per process;
benchmarks/executor_suite.py runs the same loops in one process, with profiles.

    python benchmarks/executor_peers.py                                     # CPU, a tiny Llama
    python benchmarks/executor_peers.py --config CONFIG_DIR --seq-len 2048 --global-batch 16 \\
        --micro-batch 4 --device cuda --out peers.jsonl                     # one GPU

The recipe of both sides is plain_loop.py's (autoplan run's defaults), one process, one device; the
compiled peer is `torch.compile(model)` with fused AdamW on CUDA. Each case runs in its own process
(clean peak memory).

Printed per case: median step time over the steps after --warmup-steps, tokens/s, MFU (executor's
convention: executor/record.py; n/a on CPU), peak memory (CUDA: max allocated; CPU: the process's
RSS high-water, interpreter and torch included), and the peer's step time over autoplan's (> 1:
autoplan is faster). Timings on a CPU say nothing about a GPU. Needs `pip install autoplan[peers]`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autoplan.specs.frameworks.autoplan import AUTOPLAN_SPEEDUPS

ROOT = Path(__file__).resolve().parent.parent
TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
              "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
              "vocab_size": 8192, "max_position_embeddings": 1024, "tie_word_embeddings": False,
              "hidden_act": "silu", "attention_bias": False, "rms_norm_eps": 1e-6}
"""The CPU default: a 4-layer Llama with grouped-query attention (8 query heads, 2 K/V heads)."""
SPEEDUPS_OFF = [*AUTOPLAN_SPEEDUPS, "expandable-segments"]


def hf_peer(config_dir: str, seq_len: int, global_batch: int, micro_batch: int, device: str, steps: int,
            warmup: int, compiled: bool, kind: str = "hf") -> dict:
    """The plain loop of benchmarks/plain_loop.py (run inside its own process) on `autoplan run`'s data."""
    import torch

    from autoplan.inputs.hf_config import load_hf_config
    from autoplan.specs import ClusterSpec, ParallelPlan, PlanDocument, TrainingSpec
    from executor.data import batch, open_tokens
    from executor.record import cpu_peak_rss_bytes
    from plain_loop import PlainLoop, build_model

    if device == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    doc = PlanDocument(model=load_hf_config(config_dir), training=TrainingSpec(global_batch, seq_len, "bf16"),
                       cluster=ClusterSpec("h100-80gb", 1, gpus_per_node=1),
                       parallel=ParallelPlan(micro_batch_size=micro_batch, num_microbatches=global_batch // micro_batch))
    model, logits_fn = build_model(kind, doc, config_dir, torch.device(device))
    loop = PlainLoop(model, logits_fn, torch.device(device), compiled, global_batch // micro_batch)
    source = open_tokens("", "uint16", 0, doc.model.vocab_size)
    times, losses = [], []
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for step in range(steps):
        inputs, labels = (t.to(device) for t in batch(source, step, 0, global_batch, seq_len))
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        losses.append(loop.step(inputs, labels))
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else cpu_peak_rss_bytes()
    return {"step_times_s": times[warmup:], "losses": losses, "peak_memory_bytes": peak, "params": loop.params()}


def autoplan_case(plan_path: str, device: str, steps: int, warmup: int, extra: list[str], tmp: str) -> dict:
    out = Path(tmp) / f"autoplan-{len(list(Path(tmp).glob('autoplan-*')))}.jsonl"
    cmd = [sys.executable, "-m", "autoplan", "run", plan_path, "--device", device, "--steps", str(steps),
           "--warmup-steps", str(warmup), "--nproc", "1", "--log-every", str(steps), "--out", str(out), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    if done.returncode != 0 or not out.is_file():
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]}
    record = json.loads(out.read_text().splitlines()[-1])
    if record["status"] != "ok":
        return {"error": [f"{record['status']}: {record['error']}"]}
    return {"step_times_s": record["step_times_s"], "losses": record["losses"],
            "peak_memory_bytes": record["peak_memory_bytes"], "environment": record["environment"]}


def _env() -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.setdefault("OMP_NUM_THREADS", "1")  # what `autoplan run` gives each CPU worker
    return env


def peer_case(args, config_dir: str, compiled: bool, kind: str = "hf") -> dict:
    cmd = [sys.executable, __file__, "--peer", kind, "--config", config_dir, "--seq-len", str(args.seq_len),
           "--global-batch", str(args.global_batch), "--micro-batch", str(args.micro_batch), "--device", args.device,
           "--steps", str(args.steps), "--warmup-steps", str(args.warmup_steps)] + (["--compiled"] if compiled else [])
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]}
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="", help="Hugging Face config.json or its folder (default: a tiny Llama)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--cases", default="autoplan,autoplan-before,hf-eager,hf-compile",
                        help="comma-separated subset of: autoplan, autoplan-eager (--no-compile), autoplan-before "
                             "(every speed-up off, eager), hf-eager, hf-compile, torch-eager, torch-compile (the plain "
                             "loop around the executor's own model, benchmarks/plain_loop.py)")
    parser.add_argument("--out", default="", help="JSONL file to append one record per case to")
    parser.add_argument("--gpu", default="h100-80gb", help="built-in GPU type the plan file names (`autoplan run` "
                                                           "refuses a plan without a known one)")
    parser.add_argument("--peer", default="", help=argparse.SUPPRESS)
    parser.add_argument("--compiled", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    if args.peer:
        print(json.dumps(hf_peer(args.config, args.seq_len, args.global_batch, args.micro_batch, args.device,
                                 args.steps, args.warmup_steps, args.compiled, args.peer)), flush=True)
        return 0
    return compare(args)


def compare(args) -> int:
    from autoplan.inputs.hf_config import load_hf_config
    from autoplan.specs import ClusterSpec, ParallelPlan, PlanDocument, TrainingSpec
    from autoplan.specs.flops import mfu
    from autoplan.specs.gpus import datasheet_peak_flops_per_s as peak_flops_per_s
    from executor.record import environment
    from plain_loop import transformers_missing

    with tempfile.TemporaryDirectory(prefix="executor-peers-") as tmp:
        config = args.config
        if not config:
            config = str(Path(tmp) / "tiny-llama")
            Path(config).mkdir()
            (Path(config) / "config.json").write_text(json.dumps(TINY_LLAMA))
        config_dir = str(Path(config).parent if config.endswith(".json") else config)
        spec = load_hf_config(config)
        doc = PlanDocument(model=spec, training=TrainingSpec(args.global_batch, args.seq_len, "bf16"),
                           cluster=ClusterSpec(args.gpu, 1, gpus_per_node=1),
                           parallel=ParallelPlan(micro_batch_size=args.micro_batch,
                                                 num_microbatches=args.global_batch // args.micro_batch))
        plan_path = str(Path(tmp) / "plan.json")
        doc.save(plan_path)
        runs = {
            "autoplan": lambda: autoplan_case(plan_path, args.device, args.steps, args.warmup_steps, [], tmp),
            "autoplan-eager": lambda: autoplan_case(plan_path, args.device, args.steps, args.warmup_steps,
                                                    ["--no-compile"], tmp),
            "autoplan-before": lambda: autoplan_case(plan_path, args.device, args.steps, args.warmup_steps,
                                                     ["--no-compile"] + [f"--without={s}" for s in SPEEDUPS_OFF], tmp),
            "hf-eager": lambda: peer_case(args, config_dir, compiled=False),
            "hf-compile": lambda: peer_case(args, config_dir, compiled=True),
            "torch-eager": lambda: peer_case(args, config_dir, compiled=False, kind="torch"),
            "torch-compile": lambda: peer_case(args, config_dir, compiled=True, kind="torch"),
        }
        cases = [c.strip() for c in args.cases.split(",") if c.strip()]
        unknown = sorted(set(cases) - set(runs))
        if unknown:
            sys.stderr.write(f"executor_peers: unknown case(s) {unknown}; choose from {sorted(runs)}\n")
            return 2
        missing = transformers_missing()
        results = {case: {"error": [f"skipped: {missing}"], "skipped": True} if case.startswith("hf-") and missing
                   else runs[case]() for case in cases}
    env = environment(args.device, 1, "peers")
    peak = peak_flops_per_s(env["device_name"], "bf16") if args.device == "cuda" else 0.0
    tokens = args.global_batch * args.seq_len
    name = config if args.config else "tiny-llama (built in: 4 layers, hidden 256, 8 heads / 2 K/V heads, vocab 8192)"
    print(f"{name}: {spec.num_params / 1e6:.1f}M parameters, seq {args.seq_len}, global batch "
          f"{args.global_batch} in micro-batches of {args.micro_batch}, {args.device} ({env['device_name']}), "
          f"median of {args.steps - args.warmup_steps} steps after {args.warmup_steps} warm-up")
    base = statistics.median(results["autoplan"]["step_times_s"]) if "step_times_s" in results.get("autoplan", {}) \
        else None
    print(f"{'case':<16} {'step s':>9} {'min-max s':>13} {'tokens/s':>10} {'MFU':>7} {'peak GiB':>9} "
          f"{'step / autoplan':>16}")
    for case, res in results.items():
        if "error" in res:
            print(f"{case:<16} failed: {res['error'][-1]}")
            continue
        step = statistics.median(res["step_times_s"])
        util = f"{mfu(spec, args.seq_len, tokens / step, 1, peak):.1%}" if peak else "n/a"
        ratio = f"{step / base:.2f}x" if base else "-"
        spread = f"{min(res['step_times_s']):.3f}-{max(res['step_times_s']):.3f}"
        print(f"{case:<16} {step:>9.4f} {spread:>13} {tokens / step:>10,.0f} {util:>7} "
              f"{res['peak_memory_bytes'] / 2**30:>9.2f} {ratio:>16}")
        if args.out:
            from autoplan.specs import write_text_atomic

            record = {"schema": "autoplan.peers/v1", "case": case, "config": config if args.config else "tiny-llama",
                      "seq_len": args.seq_len, "global_batch": args.global_batch, "micro_batch": args.micro_batch,
                      "device": args.device, "median_step_s": step, "tokens_per_s": tokens / step,
                      "mfu": mfu(spec, args.seq_len, tokens / step, 1, peak), **res, "environment": env}
            previous = Path(args.out).read_text() if Path(args.out).is_file() else ""
            write_text_atomic(args.out, previous + json.dumps(record) + "\n")
    return 0 if all("error" not in r or r.get("skipped") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
