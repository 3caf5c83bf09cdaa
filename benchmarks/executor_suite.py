"""Issue 51's GPU check in one call: `autoplan run` against the plain loop a user writes, in one
process, on one device, with the records committed beside the other GPU runs.

    python benchmarks/executor_suite.py --device cuda --gpu h100-80gb --parts peers,profile   # items 1-2
    python benchmarks/executor_suite.py --device cuda --parts peers,profile --targets llama-3.2-1b   # the first
    python benchmarks/executor_suite.py --device cuda --gpu h100-80gb --parts speedups,fp8,moe,tune,accuracy
    python benchmarks/executor_suite.py --device cpu --tiny                # the smoke test: tiny shapes

How long on a GPU is not measured yet. An estimate from the 2026-11-27 H100 step times (0.8 s per
Llama-3.2-1B step) and a first per-block compile of ~1 min: peers ~5 min (autoplan, hf-eager, hf-compile:
25 steps each on two targets), profile ~3 min, speedups ~8 min (seven variants each, compiled afresh
from inductor's cache), fp8 ~4 min, moe ~2 min, tune ~5 min. That is more than one device session's
15 minutes: run the first command first; every part prints its wall time for the next split.

Parts (`--parts`, comma-separated, all by default), each on the issue's targets (Llama-3.2-1B s2048
16 x 4, GPT-2 medium s1024 32 x 16; built from the config.json under cost_model/data/h100_runs/configs,
never downloaded):
  peers     `autoplan run`'s code path (executor.torch_backend.train.train, the record `autoplan run`
            writes) and the plain loops of benchmarks/plain_loop.py: the executor's model and Hugging
            Face transformers' (skipped, and said, without transformers), eager and compiled with fused
            AdamW; --steps timed steps after --warmup-steps, median and min-max;
  profile   one steady step of the executor and of the compiled peer under torch.profiler, by kernel
            class (benchmarks/step_profile.py), the Chrome traces gzipped beside the summary; on a CPU
            --profile-steps steps each, stepped in turn, with the process CPU time per step;
  speedups  every `--without` switch of the executor on and off (benchmarks/executor_speedups.py);
  fp8       fp8 (torchao float8, tensorwise) against bf16 on Qwen2.5-3B and Llama-3.2-1B;
  moe       a MoE plan's grouped GEMM against the per-expert loop (`--without grouped-experts`);
  tune      `autoplan search` then `autoplan tune --top 5` for Llama-3.2-1B (subprocesses);
  accuracy  benchmarks/memory_accuracy.py and the predicted step times against the records (CUDA).
Writes into --out-dir (default cost_model/data/h100_runs/<UTC date>-suite): env.json (environment
stamp), runs.jsonl (executor records, each with allocated and reserved peaks), peers.jsonl,
profile-<target>.json + traces, speedups.txt, tune.jsonl, summary.md (every table printed).
Each part is timed and says so, so a device session can split the parts over its calls.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
CONFIGS = ROOT / "cost_model" / "data" / "h100_runs" / "configs"
PARTS = ("peers", "profile", "speedups", "fp8", "moe", "tune", "accuracy")
MOE_CONFIG = {"model_type": "mixtral", "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 16,
              "num_attention_heads": 16, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
              "num_experts_per_tok": 2, "max_position_embeddings": 4096, "tie_word_embeddings": False}
"""A Mixtral-shaped MoE of 1.22B parameters (8 experts, top-2): 31 GiB predicted on one H100."""
GPU_TARGETS = {  # name -> (config, seq_len, global batch, micro-batch)
    "llama-3.2-1b": (CONFIGS / "llama-3.2-1b", 2048, 16, 4),
    "gpt2-medium": (CONFIGS / "gpt2-medium", 1024, 32, 16),
    "qwen2.5-3b": (CONFIGS / "qwen2.5-3b", 2048, 16, 2),
    "moe-1.2b": (MOE_CONFIG, 2048, 16, 4),
}
TINY_TARGETS = {  # the same roles at a size a CPU test steps in a second (16-divisible for fp8)
    "llama-3.2-1b": ({"model_type": "llama", "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
                      "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
                      "max_position_embeddings": 128, "tie_word_embeddings": False}, 32, 8, 2),
    "gpt2-medium": ({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 512,
                     "n_positions": 128, "tie_word_embeddings": True}, 32, 8, 4),
    "qwen2.5-3b": ({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
                    "max_position_embeddings": 128, "tie_word_embeddings": True}, 32, 8, 2),
    "moe-1.2b": ({**MOE_CONFIG, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "num_local_experts": 4,
                  "max_position_embeddings": 128}, 32, 8, 2),
}
PEER_TARGETS, FP8_TARGETS, MOE_TARGET, TUNE_TARGET = ("llama-3.2-1b", "gpt2-medium"), ("qwen2.5-3b", "llama-3.2-1b"), \
    "moe-1.2b", "llama-3.2-1b"


class Suite:
    """The run's device, targets, output folder and the lines of its summary."""

    def __init__(self, args):
        from executor.options import RunOptions
        from executor.torch_backend.launch import allocator_env

        # Before CUDA starts, as `autoplan run` sets it for its workers (expandable segments, unless set).
        os.environ.update(allocator_env(RunOptions(device=args.device), os.environ))
        import torch

        from executor.torch_backend.worker import init_distributed

        self.args, self.out = args, Path(args.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        if args.device == "cpu":
            torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", WORLD_SIZE="1",
                          LOCAL_RANK="0")
        self.device = init_distributed(args.device)
        self.targets = TINY_TARGETS if args.tiny else GPU_TARGETS
        self.docs: dict = {}
        self.lines: list[str] = []

    def chosen(self, role: str) -> tuple:
        """The targets of the peer parts (peers, profile, speedups) or of the fp8 part, less those
        --targets leaves out."""
        names = FP8_TARGETS if role == "fp8" else PEER_TARGETS
        return tuple(n for n in names if not self.args.targets or n in self.args.targets.split(","))

    def say(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)

    def config_dir(self, name: str) -> str:
        config = self.targets[name][0]
        if isinstance(config, dict):  # written out, so that transformers and autoplan read the same file
            folder = self.out / "configs" / name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "config.json").write_text(json.dumps(config))
            return str(folder)
        return str(config)

    def doc(self, name: str, dtype: str = "bf16"):
        """The target's one-GPU plan, scored by today's cost model for --gpu (its prediction rides along
        into the record, as `autoplan estimate -o` would put it there)."""
        key = (name, dtype)
        if key not in self.docs:
            from autoplan.inputs.hf_config import load_hf_config
            from autoplan.planning.planner import estimate_document
            from autoplan.specs import ClusterSpec, ParallelPlan, PlanDocument, TrainingSpec

            _, seq, batch, micro = self.targets[name]
            doc = PlanDocument(model=load_hf_config(self.config_dir(name)), training=TrainingSpec(batch, seq, dtype),
                               cluster=ClusterSpec(self.args.gpu, 1, gpus_per_node=1),
                               parallel=ParallelPlan(micro_batch_size=micro, num_microbatches=batch // micro))
            self.docs[key] = estimate_document(doc, gpu=self.args.gpu)[0]
        return self.docs[key]

    def run_executor(self, name: str, label: str, dtype: str = "bf16", **option_changes) -> dict:
        """One `autoplan run` of the target in this process; the record is appended to runs.jsonl."""
        from autoplan.specs import append_measurement
        from executor.options import RunOptions
        from executor.torch_backend.train import train

        options = RunOptions(out="", device=self.args.device, steps=self.args.steps + self.args.warmup_steps,
                             warmup_steps=self.args.warmup_steps, log_every=10**6,
                             grad_clip=self.args.grad_clip).replace(**option_changes)
        try:
            record = train(self.doc(name, dtype), options, self.device)
        except Exception as exc:  # an OOM is a result of the suite, not its end
            from executor.torch_backend.worker import failure_record

            record = failure_record(self.doc(name, dtype), exc, options)
        record.extra["suite_case"] = f"{name} {label}"
        append_measurement(str(self.out / "runs.jsonl"), record)
        _release(self.device)
        return record.to_dict()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _release(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _stats(times: list[float]) -> str:
    return f"{statistics.median(times):9.4f} s ({min(times):.3f}-{max(times):.3f}, n={len(times)})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--gpu", default="h100-80gb", help="built-in GPU type the predictions are made for")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (the CPU smoke test)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {PARTS}")
    parser.add_argument("--targets", default="", help=f"comma-separated subset of {tuple(GPU_TARGETS)} "
                                                      "(default: each part's own)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per case (after the warm-up)")
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--speedup-steps", type=int, default=8, help="steps per speed-up variant, warm-up included")
    parser.add_argument("--profile-steps", type=int, default=1, help="profiled steps per case (CPU: take 5+)")
    parser.add_argument("--profile-without", action="append", default=[], metavar="NAME",
                        help="speed-up(s) the profiled executor runs without (repeatable; `autoplan run --without`)")
    parser.add_argument("--grad-clip", type=float, default=1.0, help="global-norm clip of every case (0 = off)")
    parser.add_argument("--tune-top", type=int, default=5)
    parser.add_argument("--compile-backend", default="",
                        help="the compiled peers' torch.compile backend (default inductor; with --tiny on a CPU "
                             "aot_eager: dynamo and AOT autograd without inductor's C++ build, minutes on 2 cores)")
    parser.add_argument("--out-dir", default="")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS)) + sorted(set(filter(None, args.targets.split(","))) - set(GPU_TARGETS))
    if unknown or args.steps < 1 or args.warmup_steps < 1:
        sys.stderr.write(f"executor_suite: unknown part(s) or target(s) {unknown} (choose from {PARTS} and "
                         f"{tuple(GPU_TARGETS)}) or --steps/--warmup-steps "
                         f"below 1 (got {args.steps}/{args.warmup_steps})\n")
        return 2
    args.compile_backend = args.compile_backend or ("aot_eager" if args.tiny and args.device == "cpu" else "inductor")
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    args.out_dir = args.out_dir or str(ROOT / "cost_model" / "data" / "h100_runs" / f"{date}-suite")
    from executor_suite_parts import PART_FUNCTIONS, environment_stamp

    suite = Suite(args)
    env = environment_stamp(suite)
    (suite.out / "env.json").write_text(json.dumps(env, indent=1) + "\n")
    suite.say(f"# executor suite, {env['device_name']}, {date}; {args.steps} timed steps after {args.warmup_steps}")
    failed = []
    for part in parts:
        t0 = time.perf_counter()
        suite.say(f"\n## {part}\n")
        try:
            PART_FUNCTIONS[part](suite)
        except Exception as exc:  # one broken part must not cost the device time of the others
            import traceback

            traceback.print_exc()
            suite.say(f"part {part} FAILED: {type(exc).__name__}: {exc}")
            failed.append(part)
        suite.say(f"\n({part}: {time.perf_counter() - t0:.0f} s)")
        (suite.out / "summary.md").write_text("\n".join(suite.lines) + "\n")
    import torch.distributed as dist

    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
