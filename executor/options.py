"""RunOptions: how to run a plan (not what the plan is). Filled from `autoplan run` flags."""
from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass

from autoplan.specs import AutoplanError
from autoplan.specs.validation import ascii_float, ascii_int

DEVICES = ("cpu", "cuda")
FP8_RECIPES = ("tensorwise", "rowwise")
"""torchao's float8 scaling recipes an fp8 plan may run with (executor/fp8.py)."""
DATA_DTYPES = ("uint16", "uint32")
SPEEDUPS = {
    "bf16-params": "bf16 compute copies of the fp32 master weights, cast once per step where no ZeRO-3 "
                   "re-gather forces more (FSDP2 mixed precision, at dp=1 too); without it: fp32 weights "
                   "and bf16 autocast re-casting them every micro-batch (GPU only; CPU runs stay fp32)",
    "native-gqa": "grouped-query attention by SDPA's enable_gqa; without it: K/V heads repeated (repeat_interleave)",
    "rope-compute-dtype": "RoPE in the activations' dtype; without it: in fp32 with a cast up and down per layer",
    "chunked-loss": "the head's matmul and the cross-entropy fused over token chunks, no whole fp32 logit "
                    "matrix (vocabulary-parallel under tp > 1); without it: fp32 logits, then cross-entropy",
    "fused-adamw": "AdamW's fused kernel (CUDA); without it: the for-each implementation",
    "grouped-experts": "a MoE layer's local experts as one grouped GEMM per weight (torch._grouped_mm, on CPUs and "
                       "Hopper GPUs); without it: a loop of per-expert matmuls",
    "expandable-segments": "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True unless the user set "
                           "PYTORCH_CUDA_ALLOC_CONF (CUDA)",
}
"""The switchable speed techniques of the torch backend, all on by default; `--without NAME` turns
one off (each gives the same training up to rounding; the off state is the executor before them)."""


MAX_RUN_STEPS = 2**20
"""Upper bound of every step count (--steps, --warmup-steps, --lr-warmup, --checkpoint-every,
--log-every): 1,048,576. A run's record keeps one step time and one loss per step (~40 bytes of JSON),
so its line stays under ~45 MB, far inside the 512 MiB a runs.jsonl may hold, and the per-step lists
every rank keeps stay small; an extra zero typed into --steps is refused instead of training for weeks."""
MAX_LOSS_CHUNK_TOKENS = 2**31
"""--loss-chunk-tokens: a chunk's token count is a 32-bit tensor index; the largest micro-batch
(2^24 sequences of 2^24 tokens) is far above what one chunk may hold anyway."""


@dataclass(frozen=True)
class RunOptions:
    steps: int = 10
    """Optimizer steps to run (in total, counting the steps a resumed checkpoint already did)."""
    warmup_steps: int = 2
    """Leading steps left out of `step_times_s` (compilation, allocator and cache warm-up)."""
    seed: int = 0
    """Seeds the weights and the synthetic data; same seed, same losses."""
    lr: float = 3e-4
    """Peak learning rate of AdamW."""
    min_lr: float = 3e-5
    """Learning rate at the end of the cosine decay."""
    warmup: int = 0
    """Learning-rate warm-up steps (linear from 0 to lr), before the cosine decay."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value; 0 disables clipping."""
    data: str = ""
    """Token-id file (flat binary, read as a numpy memmap); "" = synthetic tokens."""
    data_dtype: str = "uint16"
    """Element type of the `data` file: uint16 (nanoGPT's .bin, vocab <= 65536) or uint32."""
    out: str = "runs.jsonl"
    """JSONL file the Measurement record is appended to; "" = do not write one."""
    checkpoint_dir: str = ""
    """Folder for distributed checkpoints; "" = no checkpoints."""
    checkpoint_every: int = 0
    """Save a checkpoint every this many steps (0 = never)."""
    resume: bool = False
    """Continue from the latest checkpoint in checkpoint_dir."""
    device: str = "cpu"
    """"cpu" (gloo, fp32) or "cuda" (nccl, bf16 autocast where the plan says bf16)."""
    nproc: int = 0
    """Local processes to spawn; 0 = the plan's GPU count. Must equal the plan's GPU count."""
    log_every: int = 1
    """Print a progress line every this many steps (rank 0)."""
    backend: str = "torch"
    """"torch" (torch.distributed) or "xla" (torch_xla SPMD)."""
    compile: bool | None = None
    """torch.compile each transformer block; None = on for cuda, off (eager) for cpu."""
    without: tuple = ()
    """Names from SPEEDUPS to turn off."""
    loss_chunk_tokens: int = 0
    """Tokens per chunk of the fused head + cross-entropy; 0 = as many as keep a chunk's fp32
    logits within executor.loss.CHUNK_LOGIT_BYTES."""
    fsdp_one_replica_on_cpu: bool = False
    """Wrap FSDP2 over the one-rank mesh at dp*cp = 1 on a CPU too. It is there for the bf16 compute copies
    of `bf16-params`, which a CPU run (fp32) does not make, so it is off on a CPU by default: there it only
    added host work (its per-block hooks every micro-batch, the gradients' copy-out): 1.84x and 2.25x the
    plain loop's CPU time per step against 1.13x without it (docs/executor.md, Host time). The tests turn
    it on to run the GPU's code path on a CPU."""
    fp8_recipe: str = ""
    """fp8 plans: torchao's scaling, "tensorwise" or "rowwise"; "" = the plan's framework's
    (rowwise for `autoplan+fp8-rowwise`, else tensorwise). Recorded in the run's `runtime`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "without", tuple(self.without))  # a JSON round trip gives a list
        unknown = sorted(set(self.without) - set(SPEEDUPS))
        if unknown:
            raise AutoplanError(f"--without: unknown speed-up(s) {unknown}; choose from {sorted(SPEEDUPS)}")
        for key in ("steps", "log_every"):
            if getattr(self, key) < 1:
                raise AutoplanError(f"--{key.replace('_', '-')} must be at least 1, got {getattr(self, key)}")
        flags = {"warmup_steps": "--warmup-steps", "warmup": "--lr-warmup", "checkpoint_every": "--checkpoint-every",
                 "nproc": "--nproc", "seed": "--seed", "loss_chunk_tokens": "--loss-chunk-tokens"}
        for key, flag in flags.items():
            if getattr(self, key) < 0:
                raise AutoplanError(f"{flag} must not be negative, got {getattr(self, key)}")
        steps_rule = "steps (the record keeps a time and a loss per step)"
        for key, flag, high, rule in (
                ("steps", "--steps", MAX_RUN_STEPS, steps_rule), ("warmup_steps", "--warmup-steps", MAX_RUN_STEPS, steps_rule),
                ("warmup", "--lr-warmup", MAX_RUN_STEPS, steps_rule),
                ("checkpoint_every", "--checkpoint-every", MAX_RUN_STEPS, steps_rule),
                ("log_every", "--log-every", MAX_RUN_STEPS, steps_rule),
                ("loss_chunk_tokens", "--loss-chunk-tokens", MAX_LOSS_CHUNK_TOKENS, "tokens (a 32-bit index)"),
                ("seed", "--seed", 2**32 - 1, "(what NumPy's and torch's generators take)")):
            if getattr(self, key) > high:
                raise AutoplanError(f"{flag} must be at most {high:,} {rule}, got {getattr(self, key):,}")
        if self.warmup_steps >= self.steps:
            raise AutoplanError(
                f"--warmup-steps must be smaller than --steps so some steps are measured, got "
                f"warmup_steps={self.warmup_steps}, steps={self.steps}")
        if not (0 < self.lr < math.inf and 0 <= self.min_lr <= self.lr):
            raise AutoplanError(f"need 0 < lr (finite) and 0 <= min_lr <= lr, got lr={self.lr}, min_lr={self.min_lr}")
        if not 0 <= self.grad_clip < math.inf:
            raise AutoplanError(f"--grad-clip must be a finite number, at least 0 (0 = off), got {self.grad_clip}")
        if self.device not in DEVICES:
            raise AutoplanError(f"--device must be one of {DEVICES}, got {self.device!r}")
        if self.fp8_recipe not in ("", *FP8_RECIPES):
            raise AutoplanError(f"--fp8-recipe must be one of {FP8_RECIPES}, got {self.fp8_recipe!r}")
        if self.data_dtype not in DATA_DTYPES:
            raise AutoplanError(f"--data-dtype must be one of {DATA_DTYPES}, got {self.data_dtype!r}")
        if (self.checkpoint_every or self.resume) and not self.checkpoint_dir:
            raise AutoplanError("--checkpoint-every and --resume need --checkpoint-dir DIR")
        if self.checkpoint_dir and not (self.checkpoint_every or self.resume):
            raise AutoplanError(f"--checkpoint-dir {self.checkpoint_dir} saves nothing without --checkpoint-every N "
                                f"(how often to save) or --resume (to continue from it)")

    def to_dict(self) -> dict:
        return asdict(self)

    def uses(self, speedup: str) -> bool:
        """Whether speed-up `speedup` (a SPEEDUPS name) is on."""
        assert speedup in SPEEDUPS, speedup
        return speedup not in self.without

    @property
    def compiles(self) -> bool:
        return self.device == "cuda" if self.compile is None else self.compile

    def replace(self, **changes) -> "RunOptions":
        return RunOptions(**{**asdict(self), **changes})


def add_run_arguments(parser, output: bool = True, checkpoints: bool = True) -> None:
    """The flags of `autoplan run` and of `python -m executor` (torchrun), defined once. `autoplan tune`
    leaves out -o/--output (its -o is the winning plan) and the checkpoint flags (its runs are short)."""
    d = RunOptions()
    parser.add_argument("--backend", default=d.backend, help="torch (torch.distributed) or xla (torch_xla SPMD)")
    parser.add_argument("--nproc", type=ascii_int, default=d.nproc,
                        help="local processes to start (default: the plan's GPU count; must equal it)")
    parser.add_argument("--device", default=d.device, choices=DEVICES, help="cpu (gloo, fp32) or cuda")
    parser.add_argument("--steps", type=ascii_int, default=d.steps, help="optimizer steps (default %(default)s)")
    parser.add_argument("--warmup-steps", type=ascii_int, default=None,
                        help=f"leading steps left out of the step-time statistics (default {d.warmup_steps}, "
                             f"fewer when --steps leaves no step to measure)")
    parser.add_argument("--seed", type=ascii_int, default=d.seed,
                        help="seed of the weights and the synthetic data order (default %(default)s)")
    parser.add_argument("--lr", type=ascii_float, default=d.lr, help="peak learning rate (default %(default)s)")
    parser.add_argument("--min-lr", type=ascii_float, default=d.min_lr, help="final learning rate of the cosine decay (default %(default)s)")
    parser.add_argument("--lr-warmup", type=ascii_int, default=d.warmup, help="linear learning-rate warm-up steps (default %(default)s)")
    parser.add_argument("--grad-clip", type=ascii_float, default=d.grad_clip, help="global-norm clip (0 = off)")
    parser.add_argument("--data", default=d.data, help="flat token-id file (numpy memmap); default synthetic")
    parser.add_argument("--data-dtype", default=d.data_dtype, choices=DATA_DTYPES,
                        help="integer type of the token ids in --data (default %(default)s)")
    if output:
        parser.add_argument("-o", "--output", dest="out", default=d.out, metavar="PATH",
                            help="JSONL file the measurement is appended to (default %(default)s; '' = none)")
        # The old spelling, kept working but out of --help: every command writes with -o/--output.
        parser.add_argument("--out", dest="out", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    if checkpoints:
        parser.add_argument("--checkpoint-dir", default=d.checkpoint_dir, metavar="DIR",
                            help="folder of torch.distributed.checkpoint saves (default: no checkpoints)")
        parser.add_argument("--checkpoint-every", type=ascii_int, default=d.checkpoint_every, metavar="N",
                            help="save every N steps into --checkpoint-dir (default %(default)s = never)")
        parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint")
    parser.add_argument("--log-every", type=ascii_int, default=d.log_every, metavar="N",
                        help="print a progress line every N steps (default %(default)s)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile each transformer block (default: on with --device cuda, off on cpu)")
    parser.add_argument("--without", action="append", default=[], choices=sorted(SPEEDUPS), metavar="NAME",
                        help="turn one speed-up off (repeatable): " + "; ".join(
                            f"{name}: {text}" for name, text in SPEEDUPS.items()))
    parser.add_argument("--loss-chunk-tokens", type=ascii_int, default=d.loss_chunk_tokens, metavar="N",
                        help="tokens per chunk of the fused head + loss (default: a chunk's fp32 logits "
                             "within 256 MiB)")
    parser.add_argument("--fp8-recipe", default=d.fp8_recipe, choices=FP8_RECIPES,
                        help="fp8 plans: torchao float8 scaling, tensorwise or rowwise (default: the plan "
                             "framework's: rowwise for autoplan+fp8-rowwise, else tensorwise)")


def options_from_args(args) -> RunOptions:
    return RunOptions(
        # Unset, the warm-up shrinks so that --steps 1 or 2 still measures a step.
        steps=args.steps, warmup_steps=(args.warmup_steps if args.warmup_steps is not None
                                        else max(0, min(RunOptions.warmup_steps, args.steps - 1))), seed=args.seed, lr=args.lr, min_lr=args.min_lr,
        warmup=args.lr_warmup, grad_clip=args.grad_clip, data=args.data, data_dtype=args.data_dtype,
        out=args.out, checkpoint_dir=getattr(args, "checkpoint_dir", RunOptions.checkpoint_dir),
        checkpoint_every=getattr(args, "checkpoint_every", RunOptions.checkpoint_every),
        resume=getattr(args, "resume", RunOptions.resume), device=args.device, nproc=args.nproc, log_every=args.log_every,
        backend=args.backend, compile=args.compile, without=tuple(args.without),
        loss_chunk_tokens=args.loss_chunk_tokens, fp8_recipe=args.fp8_recipe)
