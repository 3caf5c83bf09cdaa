"""Peak memory of the executor's runs on one H100: measured vs predicted, before and after.

    PYTHONPATH=. .venv/bin/python benchmarks/memory_accuracy.py [RUNS.jsonl]

RUNS defaults to cost_model/data/h100_runs/runs.jsonl. Per record: the measured peak
(torch.cuda.max_memory_allocated), the prediction the plan was made with ("before": the record's
own `prediction.peak_memory_bytes`, from the cost model of its `environment.git_revision`), and
this cost model's prediction ("after"): the allocated peak, comparable to the measurement, and the
device need (plus runtime memory and allocator headroom), which decides "fits". Sizes in GiB (2^30).
Then the published rows: how many are predicted not to fit (all of them trained).
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from autoplan.specs import Measurement, PlanDocument
from autoplan.specs.compat import record_framework
from cost_model import Estimator
from cost_model.constants import load_constants
from cost_model.profiles import builtin_profile
from cost_model.published_rows import load_published_runs
from cost_model.validation import predict_runs

GIB = 2 ** 30
RUNS = Path(__file__).resolve().parent.parent / "cost_model" / "data" / "h100_runs" / "runs.jsonl"


def _name(doc: PlanDocument) -> str:
    p, model = doc.parallel, Path(doc.model.name).parent.name or doc.model.name
    return f"{model} s{doc.training.seq_len} mb{p.micro_batch_size}x{p.num_microbatches} {p.recompute}"


def h100_table(path: Path) -> None:
    print(f"{'plan':34s} {'status':6s} {'measured':>8s} {'before':>8s} {'err':>7s} {'after':>8s} {'err':>7s} "
          f"{'need':>7s} {'fits':>5s}")
    before_errs, after_errs, false_fits = [], [], 0
    for line in path.read_text().splitlines():
        record = json.loads(line)
        doc = PlanDocument.from_dict(record["plan"])
        framework = load_constants().framework(record_framework(Measurement.from_dict(record), doc.framework))
        e = Estimator(doc.model, doc.training, doc.cluster, builtin_profile("h100-80gb"),
                      framework=framework).estimate(doc.parallel)
        measured, before = record["peak_memory_bytes"], record["prediction"]["peak_memory_bytes"]
        after = e.details["memory_allocated_peak_bytes"]
        status = record["status"] + ("*" if record.get("notes") else "")
        if measured:
            before_errs.append(before / measured - 1)
            after_errs.append(after / measured - 1)
            cells = f"{measured / GIB:8.2f} {before / GIB:8.2f} {before_errs[-1]:+7.1%} {after / GIB:8.2f} {after_errs[-1]:+7.1%}"
        else:
            false_fits += e.fits
            cells = f"{'-':>8s} {before / GIB:8.2f} {'':7s} {after / GIB:8.2f} {'':7s}"
        print(f"{_name(doc):34s} {status:6s} {cells} {e.peak_memory_bytes / GIB:7.2f} {'yes' if e.fits else 'no':>5s}")
    print(f"* expandable segments. capacity {e.memory_capacity_bytes / GIB:.2f} GiB")
    for label, errs in (("before", before_errs), ("after", after_errs)):
        print(f"{label}: mean {statistics.fmean(errs):+.1%}, worst {max(errs, key=abs):+.1%} over {len(errs)} trained runs")
    print(f"out-of-memory runs predicted to fit (after): {false_fits}")


def published_fits() -> None:
    results = [r for r in predict_runs(load_published_runs()) if not r.skipped]
    misses = [r.run.id for r in results if not r.fits]
    print(f"published rows predicted not to fit: {len(misses)} of {len(results)} {misses if misses else ''}")


if __name__ == "__main__":
    h100_table(Path(sys.argv[1]) if len(sys.argv) > 1 else RUNS)
    published_fits()
