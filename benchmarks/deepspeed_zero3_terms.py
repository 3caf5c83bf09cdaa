"""Which of DeepSpeed v0.3.13's ZeRO-3 terms Narayanan et al. 2021's six ZeRO-3 baseline rows support.

Prints, for each way of pricing those rows' data-parallel collectives, their MAPE at DeepSpeed's
collective bandwidth scale of 1 (what a refit that sees none of them predicts) and at the single
scale, tried from 0.10 to 1.00, that suits them best (what a fit on them alone could reach):

    .venv/bin/python benchmarks/deepspeed_zero3_terms.py

The terms (autoplan/specs/framework.py): `zero3_gather_blocking` (the gathers hide under no compute:
stage3.py fetch_sub_module waits on every gather in flight and synchronizes the device),
`collective_list_copies` (torch's one copy per rank around list collectives) and
`zero3_recompute_reuse_params` (what it releases between a layer's recompute and its backward it
gathers a third time: 2/3 of these models' layers). Per-tensor collectives
(`zero3_gather_per_tensor`) stay on in every line: they are how that code issues its collectives.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cost_model.constants import load_constants  # noqa: E402
from cost_model.estimator import Estimator  # noqa: E402
from cost_model.published_rows import load_published_runs  # noqa: E402

ONE_GATHER = dict(zero3_recompute_reuse_params=math.inf)
"""The recompute and the backward share one gather (nothing re-gathered)."""
VARIANTS = (
    ("overlapped, no copies", dict(zero3_gather_blocking=False, collective_list_copies=False, **ONE_GATHER)),
    ("overlapped, copies", dict(zero3_gather_blocking=False, **ONE_GATHER)),
    ("blocking, no copies", dict(collective_list_copies=False, **ONE_GATHER)),
    ("blocking, copies", dict(ONE_GATHER)),
    ("+ re-gathers (shipped)", dict()),
)
SCALES = tuple(round(0.05 * i, 2) for i in range(2, 21))


def errors(runs, constants, **changes) -> list:
    """Predicted / measured - 1 for each run, its framework facts changed as given."""
    out = []
    for run in runs:
        framework = run.framework_facts(constants).with_overrides(**changes)
        est = Estimator(run.model, run.training, run.cluster, run.profile(), framework=framework,
                        constants=constants, allow_tp_across_nodes=True)
        out.append(est.estimate(run.plan).tokens_per_s_per_gpu / run.measured_tokens_per_s_per_gpu - 1)
    return out


def mape(errs: list) -> float:
    return sum(abs(e) for e in errs) / len(errs)


def main() -> None:
    constants = load_constants()
    runs = [r for r in load_published_runs() if r.id.startswith("N21-") and r.plan.zero_stage == 3]
    print(f"Narayanan et al. 2021 Table 2, ZeRO-3 baseline: {len(runs)} rows ({', '.join(r.id for r in runs)})")
    print(f"{'pricing':28s} {'MAPE at scale 1':>16s} {'best scale':>11s} {'its MAPE':>9s}   errors at scale 1")
    for label, changes in VARIANTS:
        at_one = errors(runs, constants, dp_bandwidth_scale=1.0, **changes)
        best_mape, best_scale = min((mape(errors(runs, constants, dp_bandwidth_scale=s, **changes)), s) for s in SCALES)
        print(f"{label:28s} {100 * mape(at_one):15.1f}% {best_scale:11.2f} {100 * best_mape:8.1f}%   "
              + " ".join(f"{e:+.2f}" for e in at_one))


if __name__ == "__main__":
    main()
