"""The parts of benchmarks/executor_suite.py, one function each, taking the Suite (device, targets,
output folder, summary lines). See that file's docstring for what each part measures."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

import torch

from executor_suite import MOE_TARGET, ROOT, TUNE_TARGET, _release, _stats
from plain_loop import PlainLoop, build_model, transformers_missing
from step_profile import CLASSES, HOST, profile_step, table_lines

GIB = 2**30


def environment_stamp(suite) -> dict:
    from executor.record import environment

    env = environment(suite.args.device, 1, "executor-suite")
    from importlib.metadata import PackageNotFoundError, version

    for package in ("transformers", "torchao"):
        try:
            env[package] = version(package)
        except PackageNotFoundError:
            env[package] = "not installed"
    return {**env, "suite_args": vars(suite.args)}


def _peaks() -> dict:
    if not torch.cuda.is_available():
        from executor.record import cpu_peak_rss_bytes

        return {"peak_memory_bytes": cpu_peak_rss_bytes(), "peak_memory_kind": "cpu_rss_high_water"}
    return {"peak_memory_bytes": torch.cuda.max_memory_allocated(), "peak_memory_kind": "cuda_max_memory_allocated",
            "peak_memory_reserved_bytes": torch.cuda.max_memory_reserved()}


def _batch(suite, name: str, step: int):
    from executor.data import batch, open_tokens

    doc = suite.doc(name)
    source = open_tokens("", "uint16", 0, doc.model.vocab_size)
    inputs, labels = batch(source, step, 0, doc.training.global_batch_size, doc.training.seq_len)
    return inputs.to(suite.device), labels.to(suite.device)


def _peer_loop(suite, name: str, kind: str, compiled: bool) -> PlainLoop:
    doc = suite.doc(name)
    model, logits_fn = build_model(kind, doc, suite.config_dir(name), suite.device)
    return PlainLoop(model, logits_fn, suite.device, compiled, doc.parallel.num_microbatches,
                     suite.args.compile_backend, suite.args.grad_clip)


def run_peer(suite, name: str, kind: str, compiled: bool) -> dict:
    """The plain loop on the executor's data: every step's time, the losses, the peaks."""
    if suite.device.type == "cuda":
        torch._dynamo.reset()
        torch.cuda.reset_peak_memory_stats()
    loop = _peer_loop(suite, name, kind, compiled)
    times, losses = [], []
    for step in range(suite.args.warmup_steps + suite.args.steps):
        inputs, labels = _batch(suite, name, step)
        _sync(suite.device)
        t0 = time.perf_counter()
        losses.append(loop.step(inputs, labels))
        _sync(suite.device)
        times.append(time.perf_counter() - t0)
    result = {"step_times_s": times[suite.args.warmup_steps:], "losses": losses, "params": loop.params(),
              "grad_norms": [float(n) for n in loop.grad_norms], **_peaks()}
    del loop
    _release(suite.device)
    return result


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peers(suite) -> None:
    missing = transformers_missing()
    if missing:
        suite.say(f"**SKIPPED hf-eager, hf-compile: {missing}**")
    for name in suite.chosen("peers"):
        doc = suite.doc(name)
        record = suite.run_executor(name, "autoplan")
        cases = {"autoplan": {**record, "peak_memory_reserved_bytes": record.get("peak_memory_reserved_bytes", 0)}}
        for kind in _peer_kinds(suite, missing):
            for compiled in (False, True):
                cases[f"{kind}-{'compile' if compiled else 'eager'}"] = run_peer(suite, name, kind, compiled)
        if cases["autoplan"].get("losses") and cases.get("torch-eager", {}).get("losses"):
            # Same weights, data and recipe, and at step 0 the same learning rate (the cosine starts at
            # lr): the first two steps must match the plain loop's, or the comparison is not fair.
            suite.say(f"same training as torch-eager: losses {cases['autoplan']['losses'][:2]} vs "
                      f"{cases['torch-eager']['losses'][:2]}, grad norms {cases['autoplan']['grad_norms'][:2]} vs "
                      f"{cases['torch-eager']['grad_norms'][:2]}")
        tokens = doc.training.tokens_per_step
        suite.say(f"{name}: seq {doc.training.seq_len}, {doc.training.global_batch_size} sequences as "
                  f"{doc.parallel.num_microbatches} x {doc.parallel.micro_batch_size}")
        suite.say(f"| case | step (median, min-max) | tokens/s | allocated GiB | reserved GiB | step / autoplan |")
        suite.say("|---|---|---|---|---|---|")
        base = statistics.median(cases["autoplan"]["step_times_s"]) if cases["autoplan"].get("step_times_s") else 0
        for case, res in cases.items():
            if not res.get("step_times_s"):
                suite.say(f"| {case} | {res.get('status', 'failed')}: {res.get('error', '')[:120]} | | | | |")
                continue
            step = statistics.median(res["step_times_s"])
            suite.say(f"| {case} | {_stats(res['step_times_s'])} | {tokens / step:,.0f} | "
                      f"{res['peak_memory_bytes'] / GIB:.2f} | {res.get('peak_memory_reserved_bytes', 0) / GIB:.2f} | "
                      f"{step / base if base else float('nan'):.3f} |")
            if case != "autoplan":
                _append(suite.out / "peers.jsonl", {"schema": "autoplan.peers/v1", "case": case, "target": name,
                                                    "seq_len": doc.training.seq_len, "median_step_s": step,
                                                    "global_batch": doc.training.global_batch_size,
                                                    "micro_batch": doc.parallel.micro_batch_size, **res})


def _peer_kinds(suite, missing: str) -> tuple:
    """The models of the plain loops: on a GPU transformers' (the issue's peer) when installed, else the
    executor's own; on a CPU the executor's own always (the same-training check) and transformers' too."""
    if suite.device.type == "cuda":
        return ("torch",) if missing else ("hf",)
    return ("torch",) if missing else ("torch", "hf")


def _append(path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def _executor_stepper(suite, name: str):
    from executor.options import RunOptions
    from executor.torch_backend.train import PlanRunner

    runner = PlanRunner(suite.doc(name), RunOptions(out="", device=suite.args.device, grad_clip=suite.args.grad_clip,
                                                    without=tuple(suite.args.profile_without)), suite.device)
    inputs, labels = _batch(suite, name, 0)
    return lambda: runner.step(inputs, labels, 0)


def _peer_stepper(suite, name: str, kind: str, compiled: bool):
    loop = _peer_loop(suite, name, kind, compiled)
    inputs, labels = _batch(suite, name, 0)
    return lambda: loop.step(inputs, labels)


def profile(suite) -> None:
    """Kernel classes of one steady step, the executor against the compiled peer. On a CPU every case
    is built first and they are stepped in turn (a shared machine's load slows them alike), with the
    process CPU time per step beside the profiler's wall time; on CUDA one case at a time."""
    kind = "torch" if transformers_missing() else "hf"
    for name in suite.chosen("peers"):
        factories = {"autoplan": lambda: _executor_stepper(suite, name),
                     f"{kind}-eager": lambda: _peer_stepper(suite, name, kind, False),
                     f"{kind}-compile": lambda: _peer_stepper(suite, name, kind, True)}
        samples: dict = {case: [] for case in factories}
        cpu_s: dict = {case: [] for case in factories}
        if suite.device.type == "cpu":
            steppers = {case: make() for case, make in factories.items()}
            for _ in range(suite.args.warmup_steps + suite.args.steps):
                for case, step in steppers.items():
                    c0 = time.process_time()
                    step()
                    cpu_s[case].append(time.process_time() - c0)
            for i in range(suite.args.profile_steps):
                for case, step in steppers.items():
                    trace = str(suite.out / f"trace-{name}-{case}.json.gz") if i == 0 else ""
                    samples[case].append(profile_step(step, suite.device, trace))
            del steppers
        else:
            for case, make in factories.items():
                torch._dynamo.reset()
                step = make()
                for _ in range(suite.args.warmup_steps):
                    step()
                for i in range(suite.args.profile_steps):
                    trace = str(suite.out / f"trace-{name}-{case}.json.gz") if i == 0 else ""
                    samples[case].append(profile_step(step, suite.device, trace))
                del step
                _release(suite.device)
        summary = {case: _median_summary(runs) for case, runs in samples.items()}
        for case in summary:
            if cpu_s[case]:
                summary[case]["process_cpu_s_per_step"] = statistics.median(cpu_s[case][suite.args.warmup_steps:])
        (suite.out / f"profile-{name}.json").write_text(json.dumps(summary, indent=1) + "\n")
        suite.say(f"{name}: one steady step by kernel class, median of {suite.args.profile_steps} profiled step(s)")
        suite.lines.extend(["```", *table_lines(summary), "```"])
        print("\n".join(table_lines(summary)))
        if all("process_cpu_s_per_step" in s for s in summary.values()):
            base = summary["autoplan"]["process_cpu_s_per_step"]
            suite.say(f"process CPU time per step (median of {suite.args.steps}, unprofiled): " + ", ".join(
                f"{case} {s['process_cpu_s_per_step'] * 1e3:.2f} ms" for case, s in summary.items())
                + f"; autoplan over {kind}-eager {base / summary[f'{kind}-eager']['process_cpu_s_per_step']:.2f}x")
            host = {case: s["seconds"][HOST] for case, s in summary.items()}
            suite.say(f"host time per step outside kernels (profiled): " + ", ".join(
                f"{case} {h * 1e3:.2f} ms" for case, h in host.items())
                + f"; autoplan over {kind}-eager {host['autoplan'] / host[f'{kind}-eager']:.2f}x")


def _median_summary(runs: list[dict]) -> dict:
    seconds = {cls: statistics.median(r["seconds"][cls] for r in runs) for cls in (*CLASSES, HOST)}
    return {"wall_s": statistics.median(r["wall_s"] for r in runs), "seconds": seconds,
            "kernel_counts": runs[0]["kernel_counts"], "num_profiled_steps": len(runs),
            **({"trace": runs[0]["trace"]} if "trace" in runs[0] else {})}


def speedups(suite) -> None:
    from executor_speedups import measure, report_lines

    steps = max(suite.args.speedup_steps, 3)
    warmup = min(suite.args.warmup_steps, steps - 2)
    suite.say("`--without` expandable-segments is a process setting (PYTORCH_CUDA_ALLOC_CONF): measured by "
              "`autoplan run --without expandable-segments`, not in this process")
    for name in suite.chosen("peers"):
        times, peaks = measure(suite.doc(name), suite.device, steps, None)
        suite.say(f"{name}: median of {steps - warmup} steps after {warmup}")
        suite.lines.extend(["```", *report_lines(times, peaks, warmup), "```"])
        _release(suite.device)


def fp8(suite) -> None:
    try:
        import torchao  # noqa: F401
    except ImportError:
        suite.say("**SKIPPED fp8: torchao is not installed (pip install -e .[torch]): no fp8 run**")
        return
    suite.say("| target | bf16 step | fp8 step | fp8 / bf16 | bf16 GiB | fp8 GiB |")
    suite.say("|---|---|---|---|---|---|")
    for name in suite.chosen("fp8"):
        rows = [suite.run_executor(name, dtype, dtype=dtype) for dtype in ("bf16", "fp8")]
        suite.say(f"| {name} | " + " | ".join(_cell(r) for r in rows) + f" | {_ratio(rows[1], rows[0])} | "
                  + " | ".join(f"{r.get('peak_memory_bytes', 0) / GIB:.2f}" for r in rows) + " |")


def moe(suite) -> None:
    rows = [suite.run_executor(MOE_TARGET, "grouped-experts"),
            suite.run_executor(MOE_TARGET, "per-expert loop", without=("grouped-experts",))]
    suite.say("| target | grouped GEMM step | per-expert loop step | loop / grouped |")
    suite.say("|---|---|---|---|")
    suite.say(f"| {MOE_TARGET} | {_cell(rows[0])} | {_cell(rows[1])} | {_ratio(rows[1], rows[0])} |")


def _cell(record: dict) -> str:
    if record.get("status") != "ok":
        return f"{record.get('status')}: {str(record.get('error', ''))[:80]}"
    return _stats(record["step_times_s"])


def _ratio(a: dict, b: dict) -> str:
    if a.get("status") != "ok" or b.get("status") != "ok":
        return "-"
    return f"{statistics.median(a['step_times_s']) / statistics.median(b['step_times_s']):.3f}"


def tune(suite) -> None:
    """`autoplan search` for the target on --gpu, then `autoplan tune --top K` of its plan file."""
    _, seq, batch, _ = suite.targets[TUNE_TARGET]
    plans, best = suite.out / "tune-plans.json", suite.out / "tune-best.json"
    steps = suite.args.steps + suite.args.warmup_steps if suite.device.type == "cuda" else 2
    commands = [
        ["search", "--model", suite.config_dir(TUNE_TARGET), "--gpus", "1", "--gpus-per-node", "1", "--gpu",
         suite.args.gpu, "--seq-len", str(seq), "--global-batch", str(batch), "-o", str(plans)],
        ["tune", str(plans), "--top", str(suite.args.tune_top), "--device", suite.args.device, "--steps", str(steps),
         "--warmup-steps", str(min(suite.args.warmup_steps, steps - 1)), "--records", str(suite.out / "tune.jsonl"),
         "-o", str(best)]]
    for command in commands:
        done = subprocess.run([sys.executable, "-m", "autoplan", *command], capture_output=True, text=True,
                              cwd=ROOT, env=_env())
        suite.lines.extend(["```", f"$ autoplan {' '.join(command)}", *done.stdout.splitlines()[-30:],
                            *done.stderr.splitlines()[-5:], "```"])
        print(done.stdout[-3000:], done.stderr[-2000:], flush=True)
        if done.returncode != 0:
            raise RuntimeError(f"autoplan {command[0]} exited {done.returncode}: {done.stderr.strip()[-300:]}")


def _env() -> dict:
    import os

    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def accuracy(suite) -> None:
    """Predicted against measured for the executor records: step time here, peak memory by
    benchmarks/memory_accuracy.py (framework `autoplan`, allocated peak against max_memory_allocated)."""
    runs = suite.out / "runs.jsonl"
    if suite.device.type != "cuda" or not runs.is_file():
        suite.say(f"skipped: the predictions are for {suite.args.gpu}; the records are {suite.device.type} runs")
        return
    suite.say("| case | measured s | predicted s | error |")
    suite.say("|---|---|---|---|")
    for line in runs.read_text().splitlines():
        r = json.loads(line)
        if r["status"] == "ok":
            measured, predicted = statistics.median(r["step_times_s"]), r["prediction"].get("step_time_s", 0.0)
            suite.say(f"| {r.get('suite_case', r['plan_id'])} | "
                      f"{measured:.4f} | {predicted:.4f} | {predicted / measured - 1:+.1%} |")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "memory_accuracy.py"), str(runs)],
                          capture_output=True, text=True, cwd=ROOT, env=_env())
    suite.lines.extend(["```", *done.stdout.splitlines()[:40], *done.stderr.splitlines()[-5:], "```"])


PART_FUNCTIONS = {"peers": peers, "profile": profile, "speedups": speedups, "fp8": fp8, "moe": moe, "tune": tune,
                  "accuracy": accuracy}
