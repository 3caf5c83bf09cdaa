"""`autoplan validate`: the cost model's error on published training runs and on the H100 runs.

Thin: load the runs, predict each one, print per-source and overall MAPE, median and max APE,
and the Spearman rank correlation within each source's sweeps (or the `--json` document, or the
per-row table with `--rows`). It leads with the out-of-sample figures, split the ways a user plans
beyond the evidence (cost_model/splits.py: leave one source, one GPU generation, one scale band out,
and fp8 held out; the MoE rows, which no fit sees, as their own split), each group predicted with the constants refitted without it (the refits take
minutes, so benchmarks/fit_constants.py ships them in constants.json "held_out") and the
constant-MFU guess fitted on the same training rows beside each figure; then the in-sample one, then
the project's own executor on one H100 (cost_model/data/h100_runs) with the built-in and the
measured profiles. Errors are fractions of the measured tokens/s/GPU (step time for the H100 runs).
"""
from __future__ import annotations

import json
import sys

from autoplan.cli.argtypes import framework_name


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "validate", help="compare the cost model with published training runs",
        description="Predict every published run (cost_model/data/published_runs.csv, or --runs) "
                    "and print the errors per source and overall.")
    p.add_argument("--runs", default=None, metavar="CSV",
                   help="a published-runs CSV with the same columns (default: the shipped one)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (errors as fractions)")
    p.add_argument("--rows", action="store_true", help="also print every row: predicted vs measured")
    p.add_argument("--framework", default=None, metavar="NAME", type=framework_name,
                   help="predict every row as if run by this framework (default: each row's own framework, "
                        "the honest comparison); rows it cannot run are listed as skipped")
    p.add_argument("--markdown", action="store_true",
                   help="print the README's accuracy table and baseline sentence (the README quotes this output)")
    p.add_argument("--calibrated", action="store_true",
                   help="also score the learned correction (leave-one-sweep-out on the bf16/fp16 rows; slower)")
    p.set_defaults(func=run)


def _fmt(summary: dict) -> str:
    if not summary.get("num_rows"):
        return "no rows"
    rho = summary.get("spearman_min")
    rho_text = "n/a" if rho is None else f"{rho:+.2f}"
    return (f"{summary['num_rows']:4d} rows  MAPE {summary['mape']:6.1%}  median {summary['median']:6.1%}  "
            f"max {summary['max']:7.1%}  Spearman(min over sweeps) {rho_text}")


# How the README names each source of the published runs (cost_model/data/published_runs.csv).
SOURCE_TITLES = {
    "narayanan2021": "Narayanan et al. 2021 (Megatron-LM, A100)",
    "bigscience": "BigScience BLOOM (Megatron-DeepSpeed, A100)",
    "llm-foundry": "MosaicML llm-foundry (FSDP, A100/H100)",
    "torchtitan": "torchtitan (FSDP2/TP/PP/CP, H100/H200)",
    "mlperf": "MLPerf Training v3.0-v5.1 (NeMo/Megatron, fp8, H100/H200)",
    "nemotron": "Nemotron-4 15B/340B reports (Megatron-Core, H100)",
    "mt-nlg": "MT-NLG 530B (Megatron-DeepSpeed, 2,240-3,360 A100)",
    "fp8-lm": "FP8-LM (Megatron-LM + Transformer Engine, H100)",
    "internevo": "InternEvo (InternLM-7B, A100, 8-1,024 GPUs)",
    "fms-fsdp": "IBM fms-fsdp (FSDP, A100/H100)",
    "kempnerforge": "KempnerForge (FSDP2+TP, H200, 4 GPUs/node)",
    "olmo-core": "OLMo-core (HSDP, bf16/fp8, H100)",
    "torchtitan-docs": "torchtitan docs/performance.md 2024 (A100; 405B fp8)",
    "flash-attention-2": "FlashAttention-2 paper and training README (A100)",
    "megatron-deepspeed-examples": "Megatron-DeepSpeed long-sequence README (TP 32 across nodes)",
    "gpt-neox-20b": "GPT-NeoX-20B (A100 40GB)",
    "bloomberggpt": "BloombergGPT (SageMaker ZeRO-3, A100 40GB)",
}


def markdown_table(summary: dict) -> str:
    """The README's accuracy table and constant-MFU sentence, from `validate`'s own summary, so the
    README quotes the tool (tests/test_readme_figures.py compares the two)."""
    def row(name: str, s: dict, bold: bool = False) -> str:
        rho = "n/a" if s.get("spearman_min") is None else f"{s['spearman_min']:+.2f}"
        mape = f"**{s['mape']:.1%}**" if bold else f"{s['mape']:.1%}"
        return f"| {name} | {s['num_rows']} | {mape} | {s['median']:.1%} | {s['max']:.0%} | {rho} |\n"

    text = ""
    if summary.get("out_of_sample"):
        text += split_markdown(summary["out_of_sample"]) + "\nIn sample (constants fitted on every row), per source:\n\n"
    a, base = summary["analytical"], summary["constant_mfu_baseline"]
    order = [k for k in SOURCE_TITLES if k in a["per_source"]] + [k for k in a["per_source"] if k not in SOURCE_TITLES]
    text += ("| source | rows | MAPE | median | max | Spearman (min over sweeps) |\n"
             "|---|---|---|---|---|---|\n")
    text += "".join(row(SOURCE_TITLES.get(k, k), a["per_source"][k]) for k in order)
    text += row("**bf16/fp16 rows**", a["bf16_fp16"], bold=True) + row("all rows (fp8 included)", a)
    text += (f"\nA single constant MFU fitted on these rows ({base['mfu']:.1%}, their median) scores "
             f"{base['bf16_fp16']['mape']:.1%} MAPE on the same bf16/fp16 rows ({base['mape']:.1%} on all rows).\n")
    return text


SPLIT_TITLES = {"source": "leave one source out", "gpu_generation": "leave one GPU generation out",
                "scale": "leave one scale band out", "precision": "fp8 held out (fitted on bf16/fp16)",
                "moe": "MoE runs (no fit ever saw one)"}


def _split_rows(out_of_sample: dict):
    """(split title, precision label, summary, rank text, the figure before withholding, within-problem
    rank text, interval text) of every split and precision with rows."""
    for split, title in SPLIT_TITLES.items():
        for precision, label in (("bf16_fp16", "bf16/fp16"), ("fp8", "fp8")):
            s = out_of_sample.get(split, {}).get(precision, {})
            if s.get("num_rows"):
                before = out_of_sample[split].get("before_withholding", {}).get(precision, {}).get("mape")
                yield (title, label, s, "n/a" if s["mfu_spearman"] is None else f"{s['mfu_spearman']:+.2f}",
                       "same" if before is None else f"{before:.1%}", _problem_text(s.get("within_problem", {})),
                       _interval_text(s.get("interval", {})))


def _problem_text(w: dict) -> str:
    """Within-problem ranking: mean Spearman over problems of 3+ rows / share of pairs in order."""
    if not w.get("num_problems"):
        return "n/a"
    rho = "n/a" if w["spearman_mean"] is None else f"{w['spearman_mean']:+.2f}"
    return f"{rho} / {w['pair_agreement']:.0%}"


def _interval_text(c: dict) -> str:
    """The 80 % interval's coverage and median width (a fraction of the prediction)."""
    if not c.get("num_rows"):
        return "n/a"
    return f"{c['coverage']:.0%} ({c['median_width']:.0%})"


def split_table(out_of_sample: dict) -> str:
    """The out-of-sample table: per split and precision, the honest MAPE (the held-out group's refit,
    and no fact its measurements chose) with the figure before those facts were withheld, the worst row,
    the MFU rank correlation, the rank within problems, the 80 % intervals' coverage and the
    constant-MFU guess's MAPE on the same rows."""
    text = ("tokens/s/GPU vs published runs, OUT OF SAMPLE: each group predicted with the constants refitted without it\n"
            "(refits in cost_model/data/constants.json \"held_out\") and without the facts its measurements chose "
            "(cost_model/source_facts.py ROW_DERIVED_FACTS;\n'was': the figure with them kept on); beside it one "
            "constant MFU fitted on the same training rows. 'in-problem rank': mean Spearman within problems\n"
            "(one model, GPU type and count, training shape; 3+ plans) / share of plan pairs in the measured order. "
            "'80% cover': share of rows inside their\n80 % interval (split-conformal: the 80th percentile, type 6, of the |residuals| of rows held out "
            "the same way outside the row's group), median width in brackets. 'bias': the median signed error (+: predicted too fast)\n"
            f"  {'split':46s} {'rows':>5s} {'MAPE':>7s} {'was':>6s} {'median':>7s} {'bias':>6s} {'worst':>7s}  {'MFU rank':>8s}  "
            f"{'in-problem rank':>15s}  {'80% cover':>10s}  {'const-MFU MAPE':>14s}  worst row\n")
    for title, label, s, rho, before, problem, cover in _split_rows(out_of_sample):
        text += (f"  {title + ', ' + label:46s} {s['num_rows']:5d} {s['mape']:7.1%} {before:>6s} {s['median']:7.1%} "
                 f"{s['median_signed_error']:+6.1%} "
                 f"{s['max']:7.1%}  {rho:>8s}  {problem:>15s}  {cover:>10s}  {s['constant_mfu']['mape']:14.1%}  "
                 f"{s['worst_row']} ({s['worst_error']:+.0%})\n")
    return text


def split_markdown(out_of_sample: dict) -> str:
    """The README's out-of-sample table: per split and precision, the model beside the constant-MFU
    guess fitted on the same training rows."""
    text = ("| held out in turn | precision | rows | MAPE | before withholding | median | median signed | worst row | "
            "MFU rank corr. | in-problem rank / pairs | 80 % interval coverage (width) | constant-MFU MAPE |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    for title, label, s, rho, before, problem, cover in _split_rows(out_of_sample):
        text += (f"| {title} | {label} | {s['num_rows']} | **{s['mape']:.1%}** | {before} | {s['median']:.1%} | "
                 f"{s['median_signed_error']:+.1%} | "
                 f"{s['max']:.0%} ({s['worst_row']}) | {rho} | {problem} | {cover} | {s['constant_mfu']['mape']:.1%} |\n")
    return text


def misorder_lines(out_of_sample: dict, split: str = "source") -> str:
    """The plan pairs held out along `split` whose predicted order is not the measured one, counted per
    document and per the predicted term that most makes the measured-faster plan look slower."""
    text = ""
    for precision, label in (("bf16_fp16", "bf16/fp16"), ("fp8", "fp8")):
        w = out_of_sample.get(split, {}).get(precision, {}).get("within_problem", {})
        pairs = w.get("misordered", [])
        if not pairs:
            continue
        docs, terms = {}, {}
        for m in pairs:
            doc = "-".join(m["faster"].split("-")[:2])
            docs[doc] = docs.get(doc, 0) + 1
            term = next(iter(m["terms_against_s"]), "none")
            terms[term] = terms.get(term, 0) + 1
        count = lambda d: ", ".join(f"{k} {v}" for k, v in sorted(d.items(), key=lambda kv: -kv[1]))
        text += (f"  plan pairs in the wrong order, held out by {split}, {label}: {len(pairs)} of {w['num_pairs']} "
                 f"({count(docs)}); the term that most makes the faster plan look slower: {count(terms)}\n")
    return text


def provenance_lines(facts: list) -> str:
    """Which facts came from a source's measured rows and where the splits withhold them."""
    text = ("  facts from measured rows, withheld where their measurements are held out: the fitted constants "
            "(refitted without each group), and\n")
    for f in facts:
        where = "; ".join(f"{split} {', '.join(groups)}" for split, groups in f["withheld_in"].items() if groups)
        text += f"    {f['source']}: {f['field']} = {f['value']:g}, {f['how']} (withheld: {where})\n"
    return text


def load_runs(path: str) -> list:
    """The published runs of a user's CSV; a folder, a binary file or a row with a bad cell is one
    AutoplanError line naming the row (the shipped loader trusts its own file)."""
    from pathlib import Path

    from autoplan.specs import AutoplanError
    from autoplan.specs.jsonio import check_input_file
    from cost_model.published_rows import load_published_runs

    if Path(path).is_dir():
        raise AutoplanError(f"--runs {path!r} is a folder; give a published-runs CSV file")
    check_input_file(path, "--runs")
    row = None
    try:
        runs = load_published_runs(path)
        for row in runs:  # blank cells become None and would fail inside the cost model
            row.model.check(), row.training.check(), row.cluster.check()
            blank = [k for k, v in row.plan.to_dict().items() if v is None]
            if blank:
                raise AutoplanError(f"plan cell(s) {', '.join(blank)} are blank; fill them in")
    except AutoplanError as exc:
        if row is None:  # the loader's message already names the file
            raise
        raise AutoplanError(f"--runs {path!r} (row {row.id!r}): {exc}") from None
    except UnicodeDecodeError:
        raise AutoplanError(f"--runs {path!r} is not a text CSV; give a CSV with the columns of "
                            f"cost_model/data/published_runs.csv") from None
    except (ValueError, TypeError, KeyError) as exc:
        raise AutoplanError(f"--runs {path!r} has a malformed row ({type(exc).__name__}: {exc}); every row needs the "
                            f"columns of cost_model/data/published_runs.csv, with numbers where it has numbers") from None
    return runs


def memory_lines(memory: dict) -> str:
    """The allocated and reserved peak errors of measured runs; 'not recorded' where the records
    predate the reserved peak."""
    parts = []
    for name, what in (("allocated", "max_memory_allocated"), ("reserved", "max_memory_reserved")):
        m = memory.get(name)
        parts.append(f"{name} peak ({what}) MAPE {m['mape']:.1%} over {m['num_runs']} runs, worst under "
                     f"{m['worst_under']:+.1%}" if m else f"{name} peak ({what}) not recorded")
        if not m:
            break
    return "; ".join(parts)


def write_rows(out, results: list) -> None:
    """`validate --rows`: every published run, measured against predicted tokens/s/GPU."""
    out.write(f"{'id':48s} {'dtype':5s} {'measured':>10s} {'predicted':>10s} {'error':>8s}\n")
    for r in results:
        if r.skipped:
            out.write(f"{r.run.id:48s} {r.run.training.dtype:5s} {r.run.measured_tokens_per_s_per_gpu:10.1f} "
                      f"{'skipped':>10s}\n")
            continue
        err = (r.predicted_tokens_per_s_per_gpu - r.run.measured_tokens_per_s_per_gpu) / r.run.measured_tokens_per_s_per_gpu
        out.write(f"{r.run.id:48s} {r.run.training.dtype:5s} {r.run.measured_tokens_per_s_per_gpu:10.1f} "
                  f"{r.predicted_tokens_per_s_per_gpu:10.1f} {err:+8.1%}{'' if r.fits else '  (predicted OOM)'}"
                  f"{'  [assumed: ' + '; '.join(r.run.assumptions) + ']' if r.run.assumptions else ''}\n")
    out.write("\n")


def run(args) -> int:
    if args.calibrated and args.runs:
        from autoplan.specs import AutoplanError
        raise AutoplanError(f"--calibrated scores the learned correction on the shipped published runs only, "
                            f"not on --runs {args.runs!r}; drop one of the two")
    summary, results = _validate(args)
    if args.markdown:
        sys.stdout.write(markdown_table(summary))
        return 0
    if args.json:
        json.dump(summary, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    if args.rows:
        write_rows(sys.stdout, results)
    write_text(sys.stdout, summary)
    return 0


def _validate(args) -> tuple:
    """(the summary validate prints, the in-sample row results), predicted with a progress line."""
    from autoplan.cli.progress import Progress
    from cost_model.published_rows import PUBLISHED_RUNS_PATH, load_published_runs
    from cost_model.measured_runs import h100_summary
    from cost_model.splits import validation_only
    from cost_model.validation import held_out_results, out_of_sample, predict_runs, row_derived_provenance, summarize

    runs = load_runs(args.runs) if args.runs else load_published_runs(PUBLISHED_RUNS_PATH)
    with Progress("validate") as progress:  # several seconds: say which part is being predicted
        progress.stage(f"predicting {len(runs)} published runs")
        results = predict_runs(runs, framework=args.framework)
        # In sample means the rows the constants were fitted on; the MoE rows are validation-only
        # (out_of_sample's split "moe").
        summary = summarize([r for r in results if not validation_only(r.run)])
        progress.stage("predicting each held-out group with the constants refitted without it")
        summary["held_out"] = summarize(held_out_results(runs, framework=args.framework))["analytical"]
        summary["out_of_sample"] = out_of_sample(runs, framework=args.framework)
        summary["row_derived_facts"] = row_derived_provenance()
        progress.stage("predicting the H100 runs of the project's executor")
        summary["h100_runs"] = h100_summary()
        if args.calibrated:
            from cost_model.learned import calibrated_validation
            progress.stage("cross-validating the learned correction")
            summary["calibrated"] = calibrated_validation()
    return summary, results


def write_text(out, summary: dict) -> None:
    """validate's text: the out-of-sample splits first, then per source, in sample, the H100 runs, the skips."""
    from autoplan.specs.frameworks import HISTORICAL_FRAMEWORKS

    out.write(split_table(summary["out_of_sample"]))
    out.write(misorder_lines(summary["out_of_sample"]))
    out.write(provenance_lines(summary["row_derived_facts"]))
    moe = summary["out_of_sample"]["moe"]
    for axis, title in (("per_source", "source"), ("per_gpu_generation", "GPU")):
        for name, m in moe.get(axis, {}).items():
            out.write(f"  {'MoE time by ' + title + ', ' + name + ':':46s} {m['num_rows']:3d} rows  MAPE {m['mape']:6.1%}  "
                      f"const-MFU MAPE {m['constant_mfu_mape']:6.1%}\n")
    for name, m in moe.get("peak_memory", {}).items():
        out.write(f"  MoE peak memory, {name}: {m['num_rows']} rows  MAPE {m['mape']:.1%}  predicted/reported median "
                  f"{m['median_ratio']:.2f} (range {m['min_ratio']:.2f}-{m['max_ratio']:.2f})\n")
    held = summary["held_out"]
    out.write("\nleave-one-source-out, per source (each predicted with the constants refitted without it)\n")
    if held.get("num_rows"):
        for name, s in held["per_source"].items():
            out.write(f"  {name:16s} {_fmt(s)}\n")
    else:
        out.write("  no refit for these rows' sources: only the in-sample figure below\n")
    a = summary["analytical"]
    out.write("\ntokens/s/GPU, IN SAMPLE: constants fitted on these same rows (errors as % of measured)\n")
    for name, s in a["per_source"].items():
        out.write(f"  {name:16s} {_fmt(s)}\n")
    out.write(f"  {'all':16s} {_fmt(a)}\n")
    out.write(f"  {'bf16/fp16 only':16s} {_fmt(a['bf16_fp16'])}\n")
    out.write(f"  {'fp8 only':16s} {_fmt(a['fp8'])}\n")
    for name, m in a["peak_memory"].items():
        out.write(f"  {name + ' memory':16s} {m['num_rows']:4d} rows  MAPE {m['mape']:6.1%}  predicted/reported "
                  f"median {m['median_ratio']:.2f} (range {m['min_ratio']:.2f}-{m['max_ratio']:.2f})\n")
    misses = a["not_fitting_memory"]
    out.write(f"  {'memory fits':16s} {a['num_rows'] - len(misses):4d} of {a['num_rows']} rows (all of them trained) "
              f"predicted to fit; not: {', '.join(misses) or 'none'}\n")
    base = summary["constant_mfu_baseline"]
    out.write(f"  {'constant MFU':16s} {_fmt(base)}  (MFU {base['mfu']:.1%} for every run)\n")
    out.write(f"  {'  bf16/fp16 only':16s} {_fmt(base['bf16_fp16'])}\n")
    if "calibrated" in summary:
        c = summary["calibrated"]
        out.write(f"  {'learned (CV)':16s} {_fmt(c)}  ({c['estimator']}, {c['rows']})\n")
    out.write(f"\nstep time, {HISTORICAL_FRAMEWORKS['autoplan-91ee867']} (framework autoplan-91ee867, the "
              f"project's executor before its speed-ups), on one H100 SXM (cost_model/data/h100_runs; no step time "
              f"fitted)\n")
    for ref, h in summary["h100_runs"].items():
        out.write(f"  {ref:28s} {h['num_runs']:3d} runs  MAPE {h['mape']:6.1%}  mean {h['mean_error']:+6.1%}  "
                  f"max {h['max']:6.1%}  out-of-memory runs predicted to fit: {h['oom_predicted_to_fit']}\n")
        out.write(f"  {'':28s} {memory_lines(h.get('memory', {}))}\n")
    out.write(skipped_lines(summary["skipped"]))


def skipped_lines(skipped: list) -> str:
    """The rows left out, one line per reason (most rows first) with its count; `--rows` lists every
    row, `--json` every id with its reason."""
    if not skipped:
        return ""
    by_reason: dict = {}
    for s in skipped:
        by_reason.setdefault(s["reason"], []).append(s["id"])
    text = (f"skipped {len(skipped)} rows: no built-in framework, a plan that breaks a rule of ours, or a "
            f"measurement its sibling contradicts; by reason (--rows or --json lists each):\n")
    for reason, ids in sorted(by_reason.items(), key=lambda item: -len(item[1])):
        text += f"  {len(ids):3d} row{'' if len(ids) == 1 else 's'}: {reason}\n"
    return text
