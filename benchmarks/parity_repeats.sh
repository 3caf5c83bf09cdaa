#!/usr/bin/env bash
# Every multi-process parity test, N times in a row (issue 24 item 5: 20 of 20 on a loaded 2-core machine,
# Intel and AMD alike). Prints one line per round and the CPU model, so the figure names its machine.
#   benchmarks/parity_repeats.sh [N]        (default 20; run `make test` once first for the venvs)
set -uo pipefail
cd "$(dirname "$0")/.."
N=${1:-20}
export AUTOPLAN_TORCHTITAN_03_VENV=${AUTOPLAN_TORCHTITAN_03_VENV:-$(cd .. && pwd)/side-venvs/tt03}
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), cores: $(nproc)"
passed=0
for i in $(seq "$N"); do
  start=$(date +%s)
  if .venv/bin/python -m pytest -q -p no:cacheprovider \
      tests/test_executor_recent.py::test_new_family_blocks_reproduce_single_device_losses \
      tests/test_torch_backend.py::test_parallel_plans_reproduce_single_device_losses \
      tests/test_memory_counting.py::test_cost_model_counts_what_each_rank_saves \
      tests/test_chunked_loss.py::test_vocabulary_parallel_chunked_loss_equals_the_whole_logit_loss \
      tests/test_export_engines.py \
      tests/test_fp8.py \
      tests/test_xla.py::test_spmd_plans_match_the_single_device_run > /tmp/parity_round.log 2>&1; then
    passed=$((passed + 1))
  else
    cp /tmp/parity_round.log "/tmp/parity_round_$i.failed.log"
  fi
  echo "round $i: $(tail -1 /tmp/parity_round.log) ($(( $(date +%s) - start )) s)"
done
echo "$passed of $N rounds passed"
[ "$passed" -eq "$N" ]
