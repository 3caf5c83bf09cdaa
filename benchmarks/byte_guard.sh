#!/usr/bin/env bash
# A refactoring guard: capture what the user sees from `validate` and a dozen searches (dense, MoE, fp8,
# every framework of `autoplan frameworks`) into OUT_DIR, so a behaviour-preserving change can be shown
# byte-identical with `diff -r BEFORE AFTER`. The searches' wall time is the only field blanked (it is
# a clock reading, not a result). Run from the repository root:
#
#   PYTHONPATH=$PWD bash benchmarks/byte_guard.sh OUT_DIR
set -eu
OUT=${1:?usage: byte_guard.sh OUT_DIR}
PY=${PYTHON:-python}
mkdir -p "$OUT"
$PY -m autoplan validate --json > "$OUT/validate.json"
$PY -m autoplan validate --rows > "$OUT/validate_rows.txt"
$PY -m autoplan frameworks > "$OUT/frameworks.txt"
search() {  # NAME ARGS...: the plan file and the printed report of one search
  local name=$1; shift
  $PY -m autoplan search "$@" -o "$OUT/$name.plan.json" > "$OUT/$name.txt" 2>&1 || echo "exit $?" >> "$OUT/$name.txt"
  [ -f "$OUT/$name.plan.json" ] && sed -i -E 's/"wall_time_s": [0-9.e+-]+/"wall_time_s": 0/' "$OUT/$name.plan.json"
  sed -i -E -e 's/, [0-9.]+ s$/, <wall> s/' -e "s|$OUT/|<OUT>/|g" "$OUT/$name.txt"
}
search dense-llama3-8b --model llama-3-8b --gpus 16
search dense-qwen-72b --model qwen-72b --gpus 128
search dense-llama3-70b-a100 --model llama-3-70b --gpus 64 --gpu a100-80gb
search fp8-llama3-70b --model llama-3-70b --gpus 64 --dtype fp8
search fp8-mixtral --model mixtral-8x7b --gpus 32 --dtype fp8
search moe-mixtral --model mixtral-8x7b --gpus 32
search moe-qwen3-235b --model qwen3-235b-a22b --gpus 256
search moe-deepseek-v3 --model deepseek-v3 --gpus 512
search gemma3-27b --model gemma-3-27b --gpus 32
search tpe-llama3-405b --model llama-3-405b --gpus 1024 --sampler tpe --trials 300 --seed 7
for fw in $($PY -m autoplan frameworks | awk 'NR>1 && $1 ~ /^[a-z]/ && $2 ~ /^[0-9]+\+[0-9]+$/ {print $1}'); do
  $PY -m autoplan frameworks "$fw" > "$OUT/fw-$fw.txt"
  search fw-$fw-llama2-7b --model llama-2-7b --gpus 16 --framework "$fw"
  search fw-$fw-mixtral --model mixtral-8x7b --gpus 32 --framework "$fw"
done
ls "$OUT" | wc -l
