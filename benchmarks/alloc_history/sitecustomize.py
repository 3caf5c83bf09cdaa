"""What was live at a run's allocated peak, and which line of code allocated it (CUDA only).

    PYTHONPATH=$PWD:$PWD/benchmarks/alloc_history MEMHIST_OUT=alloc.json \
        python -m autoplan run PLAN.json --device cuda --steps 4 --warmup-steps 2

Python imports this file at the start of every process on its path. In each worker of `autoplan run`
(RANK set) with MEMHIST_OUT set it turns on the caching allocator's history
(torch.cuda.memory._record_memory_history, Python stacks). At exit it replays the history's allocs and
frees and writes MEMHIST_OUT: the peak, max_memory_allocated beside it, and the blocks live at the
peak, grouped by where they were allocated (the first frame, an inductor-generated file's frame,
and the first frame in executor/ or autoplan/). Records: cost_model/data/h100_runs/2026-11-28.
"""
import atexit
import json
import os


def live_at_peak(trace, segments):
    """Replay alloc / free_completed events; blocks live before the window (freed without an alloc in
    it, or still active at the end) form the baseline. Returns (peak_bytes, baseline_bytes, blocks)."""
    allocated_in_window, freed_without_alloc = set(), 0
    for e in trace:
        if e["action"] == "alloc":
            allocated_in_window.add(e["addr"])
        elif e["action"] == "free_completed" and e["addr"] not in allocated_in_window:
            freed_without_alloc += e["size"]
    active_at_end = 0
    for seg in segments:
        for b in seg.get("blocks", []):
            if b.get("state") == "active_allocated" and b["address"] not in allocated_in_window:
                active_at_end += b["size"]
    baseline = freed_without_alloc + active_at_end
    live, total, peak, at_peak = {}, baseline, baseline, {}
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], e.get("frames", []))
            total += e["size"]
            if total > peak:
                peak, at_peak = total, dict(live)
        elif e["action"] == "free_completed":
            if e["addr"] in live:
                total -= live.pop(e["addr"])[0]
            else:
                total -= e["size"]
    return peak, baseline, at_peak


def key_of(frames):
    keep = [f for f in frames if not f["filename"].endswith(("torch/utils/_contextlib.py",))]
    ours = [f for f in keep if "/executor/" in f["filename"] or "/autoplan/" in f["filename"]]
    inductor = [f for f in keep if "torchinductor" in f["filename"]]
    top = keep[0] if keep else {"filename": "?", "line": 0, "name": "?"}
    parts = [f"{os.path.basename(top['filename'])}:{top['line']}:{top['name']}"]
    if inductor and inductor[0] is not top:
        parts.append(f"inductor {os.path.basename(inductor[0]['filename'])}:{inductor[0]['name']}")
    if ours:
        parts.append(f"{ours[0]['filename'].split('/')[-2]}/{os.path.basename(ours[0]['filename'])}:"
                     f"{ours[0]['line']}:{ours[0]['name']}")
    return " <- ".join(parts)


def summarise(snap, max_allocated):
    out = {"max_memory_allocated": max_allocated, "devices": []}
    for dev, trace in enumerate(snap.get("device_traces", [])):
        if not trace:
            continue
        segs = [s for s in snap.get("segments", []) if s.get("device", dev) == dev]
        peak, baseline, blocks = live_at_peak(trace, segs)
        groups = {}
        for size, frames in blocks.values():
            k = key_of(frames)
            n, b = groups.get(k, (0, 0))
            groups[k] = (n + 1, b + size)
        top = sorted(groups.items(), key=lambda kv: -kv[1][1])[:40]
        out["devices"].append({"device": dev, "events": len(trace), "peak_bytes": peak, "baseline_bytes": baseline,
                               "peak_minus_window_start_bytes": peak - baseline,
                               "groups": [{"where": k, "blocks": n, "bytes": b} for k, (n, b) in top]})
    return out


if os.environ.get("MEMHIST_OUT") and os.environ.get("RANK") is not None:
    import torch

    torch.cuda.memory._record_memory_history(max_entries=400000, stacks="python")

    def _dump():
        try:
            snap = torch.cuda.memory._snapshot()
            with open(os.environ["MEMHIST_OUT"], "w") as f:
                json.dump(summarise(snap, torch.cuda.max_memory_allocated()), f, indent=1)
        except Exception as exc:  # the run's own record must still land
            with open(os.environ["MEMHIST_OUT"], "w") as f:
                json.dump({"error": repr(exc)}, f)

    atexit.register(_dump)
