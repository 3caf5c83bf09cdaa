#!/usr/bin/env bash
# Regenerates the shipped CPU measurements the notebooks use (real runs, nothing edited by hand):
# a quick 2-process CPU profile, then three tiny Llama-style models, each trained with five plans
# (data parallel with 1 or 4 sequences per micro-batch, ZeRO-3, tensor and pipeline parallel) by
# `autoplan run` on 2 CPU processes.
# Run from this folder: bash make_tiny_runs.sh   (about 2 minutes on 2 cores)
set -euo pipefail
AUTOPLAN=${AUTOPLAN:-../../.venv/bin/autoplan}
rm -f runs.jsonl
plans=$(mktemp -d)
"$AUTOPLAN" profile --device cpu --nproc 2 --quick --name cpu-2proc --out cpu-profile.json
for model in tiny-64x2 tiny-96x4 tiny-128x6; do
  common=(--model "$model" --gpus 2 --profile cpu-profile.json --seq-len 128 --global-batch 8)
  "$AUTOPLAN" search "${common[@]}" --dp 2 --micro-batch 4 --zero 0 --recompute none -o "$plans/plan-$model-dp.json" > /dev/null
  "$AUTOPLAN" search "${common[@]}" --tp 2 --recompute none -o "$plans/plan-$model-tp.json" > /dev/null
  "$AUTOPLAN" search "${common[@]}" --pp 2 --recompute none -o "$plans/plan-$model-pp.json" > /dev/null
  "$AUTOPLAN" search "${common[@]}" --dp 2 --micro-batch 1 --zero 0 --recompute none -o "$plans/plan-$model-dp-mb1.json" > /dev/null
  "$AUTOPLAN" search "${common[@]}" --dp 2 --zero 3 --recompute none -o "$plans/plan-$model-zero3.json" > /dev/null
done
"$AUTOPLAN" run "$plans"/plan-*.json --device cpu --nproc 2 --steps 10 --warmup-steps 3 --out runs.jsonl
rm -rf "$plans"
