"""Which rows each overlap and fp8 term moves: every published run predicted with the term as its
framework has it, and with the term switched off, per source (shipped constants).

    .venv/bin/python benchmarks/term_ablation.py

A term is switched off through the run's framework facts (Framework.with_overrides), or, for a plan
knob ("plan.tp_comm_overlap"), through the run's plan, so the rest of the model is untouched; the
constants are the shipped full fit (cost_model/data/constants.json), so the figures say what each term
does to the prediction, not how well a refit without it would do.
"""
from __future__ import annotations

import math
import statistics
import sys

from cost_model.estimator import Estimator
from cost_model.published_rows import load_published_runs
from autoplan.specs import InfeasiblePlan
from autoplan.specs.frameworks import FRAMEWORK_NAMES

TERMS = {
    "plan.tp_comm_overlap": ("Megatron-Core --tp-comm-overlap, where the run stated it", False),
    "fp8_weight_cast_per_microbatch": ("Transformer Engine's fp8 weight cache (megatron-core): off = cast per micro-batch", True),
    "dp_param_gather_overlap": ("distributed optimizer's weight all-gather under the next forward", False),
    "pp_p2p_overlap": ("interleaved p2p sends under the next virtual stage", False),
    "dp_bucket_params": ("DP collectives per bucket (each paying its latency): off = one per step", math.inf),
    "dp_sync_per_virtual_stage": ("Megatron-Core's per-virtual-stage gradient sync under interleaving", False),
}


def _errors(runs: list, term: str | None) -> dict:
    """Run id -> signed error of tokens/s/GPU, with `term` set to its 'off' value (None: as is)."""
    errors = {}
    for run in runs:
        if run.framework not in FRAMEWORK_NAMES:
            continue
        framework, plan = run.framework_facts(), run.plan
        if term is not None and term.startswith("plan."):
            plan = plan.replace(**{term.removeprefix("plan."): TERMS[term][1]})
        elif term is not None:
            framework = framework.with_overrides(**{term: TERMS[term][1]})
        est = Estimator(run.model, run.training, run.cluster, run.profile(), framework=framework,
                        allow_tp_across_nodes=True)
        try:
            predicted = est.estimate(plan).tokens_per_s_per_gpu
        except InfeasiblePlan:
            continue
        errors[run.id] = predicted / run.measured_tokens_per_s_per_gpu - 1.0
    return errors


def main() -> int:
    runs = load_published_runs()
    source_of = {r.id: f"{r.source} ({r.training.dtype})" for r in runs}
    base = _errors(runs, None)
    print(f"{'term switched off':32s} {'source (precision)':34s} {'rows':>4s} {'MAPE on':>8s} {'MAPE off':>9s} "
          f"{'mean err on':>11s} {'off':>7s}")
    for term, (what, _) in TERMS.items():
        off = _errors(runs, term)
        moved = sorted({source_of[i] for i in base if i in off and abs(off[i] - base[i]) > 1e-9})
        for source in moved:
            ids = [i for i in base if source_of[i] == source and i in off]
            on_mape = statistics.fmean(abs(base[i]) for i in ids)
            off_mape = statistics.fmean(abs(off[i]) for i in ids)
            print(f"{term:32s} {source:34s} {len(ids):4d} {on_mape:8.1%} {off_mape:9.1%} "
                  f"{statistics.fmean(base[i] for i in ids):+11.1%} {statistics.fmean(off[i] for i in ids):+7.1%}")
        if not moved:
            print(f"{term:32s} {'(no published row moves)':34s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
