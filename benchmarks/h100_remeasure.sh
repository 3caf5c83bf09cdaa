#!/usr/bin/env bash
# Re-measure the executor on one GPU (written for the H100 of ../shared/data/h100_runs; not run yet:
# the session that wrote it had no GPU). Run from the repository root on the GPU machine:
#
#   bash benchmarks/h100_remeasure.sh [H100_RUNS_DIR] [OUT_DIR]
#
# H100_RUNS_DIR (default ../shared/data/h100_runs) holds plans/*.json and configs/*/config.json.
# OUT_DIR (default benchmarks/results/h100-<UTC date>) receives:
#   env.txt              environment stamp: nvidia-smi, driver, torch/CUDA/NCCL, git revision, allocator setting
#   runs.jsonl           `autoplan run` records (each with its own environment stamp) of every shipped plan
#                        and of the targets, with every speed-up on (default: per-block compile, expandable segments)
#   runs_eager.jsonl     the same plans with --no-compile (what compilation adds)
#   runs_before.jsonl    the same plans with every speed-up off and --no-compile (the executor of 2026-11-22,
#                        up to its interleaved RoPE layout), on the same machine, for a before/after table
#   runs_fp8.jsonl       fp8 plans (torchao float8 linears, tensorwise) of the Llama-3.2-1B, Qwen2.5 and GPT-2
#   runs_fp8_rowwise.jsonl  medium shapes, searched-and-estimated as fp8 (plans_fp8/), and the same estimated
#                        for framework autoplan+fp8-rowwise (plans_fp8_rowwise/): each record keeps its plan's
#                        fp8 prediction, so predicted and measured fp8 speed-ups over bf16 compare
#   peers.txt/.jsonl     benchmarks/executor_peers.py on the issue's three targets (autoplan vs Hugging Face
#                        transformers, eager and torch.compile + fused AdamW)
#   speedups_*.txt       benchmarks/executor_speedups.py on Llama-3.2-1B 16x4 and GPT-2 medium 32x16
#   table.txt            median step, MFU and peak memory per plan: the shipped 2026-11-22 records and the
#                        three variants above
# Each plan list runs in one launch: an OOM is recorded (status "oom") and the next plans still run.
set -u
RUNS=${1:-../shared/data/h100_runs}
OUT=${2:-benchmarks/results/h100-$(date -u +%Y%m%d-%H%M)}
PY=${PYTHON:-python}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-3}
C=$RUNS/configs
mkdir -p "$OUT/plans"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv
  git rev-parse HEAD
  git status --porcelain --untracked-files=no | head -20
  "$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
"cudnn", torch.backends.cudnn.version(), "nccl", torch.cuda.nccl.version())'
  "$PY" -c 'import transformers; print("transformers", transformers.__version__)' 2>&1 || echo "transformers missing: pip install -e .[peers]"
  echo "PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-<unset: autoplan run sets expandable_segments:True>}"
} > "$OUT/env.txt" 2>&1

# The issue's targets that are not among the shipped plans (same flags as ../shared/data/h100_runs/make_plans.sh).
est() { name=$1; shift; "$PY" -m autoplan estimate --gpus 1 --gpus-per-node 1 --gpu h100-80gb "$@" \
          -o "$OUT/plans/$name.json" > /dev/null || echo "estimate $name failed" >&2; }
est g-s1k-m16 --model "$C/gpt2-medium" --seq-len 1024 --global-batch 32 --micro-batch 16
est g-s1k-m8 --model "$C/gpt2-medium" --seq-len 1024 --global-batch 32 --micro-batch 8
cp "$RUNS"/plans/*.json "$OUT/plans/"
PLANS=("$OUT"/plans/*.json)

# fp8 plans: the bf16 targets' shapes again in fp8, tensorwise (framework autoplan) and rowwise
# (framework autoplan+fp8-rowwise, which the run takes as its --fp8-recipe).
mkdir -p "$OUT/plans_fp8" "$OUT/plans_fp8_rowwise"
est8() { name=$1; shift
  for fw in autoplan autoplan+fp8-rowwise; do
    dir=$OUT/plans_fp8; [ "$fw" = autoplan ] || dir=$OUT/plans_fp8_rowwise
    "$PY" -m autoplan estimate --gpus 1 --gpus-per-node 1 --gpu h100-80gb --dtype fp8 --framework "$fw" "$@" \
      -o "$dir/$name.json" > /dev/null || echo "estimate $name ($fw) failed" >&2
  done; }
est8 l1-s2k-m4 --model "$C/llama-3.2-1b" --seq-len 2048 --global-batch 16 --micro-batch 4
est8 l1-s2k-m8 --model "$C/llama-3.2-1b" --seq-len 2048 --global-batch 16 --micro-batch 8
est8 q15-s2k-m4 --model "$C/qwen2.5-1.5b" --seq-len 2048 --global-batch 16 --micro-batch 4
est8 q3-s2k-m2 --model "$C/qwen2.5-3b" --seq-len 2048 --global-batch 16 --micro-batch 2
est8 g-s1k-m16 --model "$C/gpt2-medium" --seq-len 1024 --global-batch 32 --micro-batch 16

common=(--device cuda --steps "$STEPS" --warmup-steps "$WARMUP" --log-every "$STEPS")
off=(--without bf16-params --without native-gqa --without rope-compute-dtype --without chunked-loss
     --without fused-adamw --without expandable-segments)
"$PY" -m autoplan run "${PLANS[@]}" "${common[@]}" --out "$OUT/runs.jsonl" 2>&1 | tee "$OUT/runs.log"
"$PY" -m autoplan run "${PLANS[@]}" "${common[@]}" --no-compile --out "$OUT/runs_eager.jsonl" 2>&1 | tee "$OUT/runs_eager.log"
"$PY" -m autoplan run "${PLANS[@]}" "${common[@]}" --no-compile "${off[@]}" --out "$OUT/runs_before.jsonl" \
  2>&1 | tee "$OUT/runs_before.log"
"$PY" -m autoplan run "$OUT"/plans_fp8/*.json "${common[@]}" --out "$OUT/runs_fp8.jsonl" 2>&1 | tee "$OUT/runs_fp8.log"
"$PY" -m autoplan run "$OUT"/plans_fp8_rowwise/*.json "${common[@]}" --out "$OUT/runs_fp8_rowwise.jsonl" \
  2>&1 | tee "$OUT/runs_fp8_rowwise.log"

peers() { "$PY" benchmarks/executor_peers.py --device cuda --steps "$STEPS" --warmup-steps "$WARMUP" \
            --cases autoplan,autoplan-eager,autoplan-before,hf-eager,hf-compile --out "$OUT/peers.jsonl" "$@"; }
{
  peers --config "$C/llama-3.2-1b" --seq-len 2048 --global-batch 16 --micro-batch 4   # target: <= 0.58 s, <= 35 GiB
  peers --config "$C/qwen2.5-3b" --seq-len 2048 --global-batch 16 --micro-batch 2     # target: trains
  peers --config "$C/gpt2-medium" --seq-len 1024 --global-batch 32 --micro-batch 16   # target: >= 1.15x hf-compile
} 2>&1 | tee "$OUT/peers.txt"

# What each speed-up is worth on its own (every one on, each one off, all off; step time and peak memory).
for plan in l1-s2k-m4 g-s1k-m16; do
  "$PY" benchmarks/executor_speedups.py "$OUT/plans/$plan.json" --device cuda --steps "$STEPS" \
    --warmup-steps "$WARMUP" 2>&1 | tee "$OUT/speedups_$plan.txt"
done

"$PY" - "$OUT" "$RUNS" > "$OUT/table.txt" <<'PY'
import json, statistics, sys
from pathlib import Path
out, shipped = Path(sys.argv[1]), Path(sys.argv[2]) / "runs.jsonl"
rows = {}
variants = {"shipped": shipped, **{v: out / f"{v}.jsonl" for v in ("runs_before", "runs_eager", "runs", "runs_fp8",
                                                                   "runs_fp8_rowwise")}}
for variant, path in variants.items():
    for line in path.read_text().splitlines() if path.is_file() else []:
        r = json.loads(line)
        if r["status"] != "ok":
            cell = r["status"]
        else:
            # the predicted step time and memory beside the measured ones (fp8 MFU: against the fp8 peak)
            cell = (f"{statistics.median(r['step_times_s']):.3f} s (pred {r['prediction'].get('step_time_s', 0):.3f}), "
                    f"MFU {r.get('mfu', 0):.1%}, {r['peak_memory_bytes'] / 2**30:.1f} GiB "
                    f"(pred {r['prediction'].get('peak_memory_bytes', 0) / 2**30:.1f})")
        rows.setdefault((r["plan"]["model"]["name"], r["plan"]["training"]["seq_len"],
                         r["plan"]["parallel"]["micro_batch_size"], r["plan"]["parallel"]["recompute"]), {})[variant] = cell
print("| model | seq | micro-batch | recompute | 2026-11-22 records | speed-ups off, eager | speed-ups, eager "
      "| speed-ups + compile | fp8 tensorwise + compile | fp8 rowwise + compile |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (model, seq, mbs, rc), cells in sorted(rows.items()):
    print(f"| {Path(model).parent.name or model} | {seq} | {mbs} | {rc} | " +
          " | ".join(cells.get(v, "-") for v in variants) + " |")
PY
cat "$OUT/table.txt"
echo "records in $OUT; commit them with env.txt beside ../shared/data/h100_runs"
