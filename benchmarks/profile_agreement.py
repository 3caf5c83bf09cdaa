"""Do `autoplan profile --quick` and the full sweep agree on the shapes they share?

    .venv/bin/python benchmarks/profile_agreement.py --device cuda            # on a GPU machine
    .venv/bin/python benchmarks/profile_agreement.py --device cpu --nproc 2
    .venv/bin/python benchmarks/profile_agreement.py --quick-profile q.json --full-profile f.json

Runs the quick profile, then the full one (or reads two given profiles), and prints, for every shape both measured, the quick median over the full median minus one:
matmul and attention TFLOP/s, memory-op GB/s, collective bus GB/s. Then per kind the number of
common shapes, median and max |difference|, and how many are within the tolerance (5%: the
target of issue 10), and each profile's device state (clocks before -> after). Exit status 0 when
every common shape agrees within the tolerance, 1 otherwise.

The two sweeps share their per-shape procedure (profiler/sweeps.py); what can still differ is the
device's state over a long and a short run, which the stamps show.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

from autoplan.specs import HardwareProfile
from profiler.device_state import state_summary


def _measure(device: str, nproc: int, out_dir: Path) -> tuple:
    from autoplan.cli.main import main

    paths = []
    for label, extra in (("quick", ["--quick"]), ("full", [])):
        out = out_dir / f"profile-{label}.json"
        code = main(["profile", "--device", device, "--nproc", str(nproc), "--out", str(out), *extra])
        if code != 0:
            sys.exit(f"autoplan profile ({label}) failed with exit code {code}")
        paths.append(out)
    return tuple(paths)


def _table(profile: HardwareProfile) -> dict:
    """(kind, shape text) -> (median rate in display units, unit) of one profile's tables."""
    rows = {}
    for s in profile.matmul:
        rows[("matmul", f"{s.m}x{s.n}x{s.k} {s.dtype}")] = (s.flops_per_s / 1e12, "TFLOP/s")
    for s in profile.attention:
        rows[("attention", f"b={s.batch} s={s.seq_len} h={s.num_heads} d={s.head_dim} {s.dtype} {s.pass_}")] = \
            (s.flops_per_s / 1e12, "TFLOP/s")
    for s in profile.memory_ops:
        rows[("memory_op", f"{s.op} {s.num_bytes} B")] = (s.bytes_per_s / 1e9, "GB/s")
    for s in profile.collectives:
        rows[("collective", f"{s.op} {s.scope} n={s.group_size} {s.message_bytes} B")] = \
            (s.bus_bandwidth_bytes_per_s / 1e9, "bus GB/s")
    return rows


def compare(quick_path: Path, full_path: Path) -> pd.DataFrame:
    """One row per shape both profiles measured (their median tables): kind, shape, quick and full
    medians, quick / full - 1."""
    quick, full = (_table(HardwareProfile.from_dict(json.loads(p.read_text()))) for p in (quick_path, full_path))
    rows = [{"kind": kind, "shape": shape, "unit": unit, "quick": q, "full": full[(kind, shape)][0],
             "difference": q / full[(kind, shape)][0] - 1.0}
            for (kind, shape), (q, unit) in quick.items() if (kind, shape) in full]
    return pd.DataFrame(rows, columns=["kind", "shape", "unit", "quick", "full", "difference"])


def report(table: pd.DataFrame, tolerance: float, quick_path: Path, full_path: Path) -> bool:
    print(f"quick {quick_path} vs full {full_path}: quick median / full median - 1 per common shape")
    for _, r in table.iterrows():
        flag = "" if abs(r["difference"]) <= tolerance else "  <-- outside"
        print(f"  {r['kind']:10s} {r['shape']:40s} {r['quick']:10.4g} {r['full']:10.4g} {r['unit']:8s} "
              f"{100 * r['difference']:+6.1f}%{flag}")
    print(f"\nper kind (tolerance {100 * tolerance:.0f}%):")
    for kind, part in table.groupby("kind", sort=False):
        diffs = part["difference"].abs()
        print(f"  {kind:10s} {len(part):3d} common shapes, median |diff| {100 * statistics.median(diffs):5.1f}%, "
              f"max {100 * diffs.max():5.1f}%, within {int((diffs <= tolerance).sum())}/{len(part)}")
    for label, path in (("quick", quick_path), ("full", full_path)):
        env = json.loads(path.read_text()).get("environment", {})
        sweep = env.get("sweep", {})
        drift = sweep.get("matmul_drift")
        print(f"{label}: {sweep.get('num_passes', '?')} passes, soak {sweep.get('soak_s', '?')} s, matmul drift "
              f"last vs first pass {'n/a' if drift is None else f'{100 * drift:+.1f}%'}")
        for host, state in sorted((env.get("device_state") or {}).items()):
            print(f"  {host}: {state_summary(state.get('before', {}), state.get('after', {}))}")
    agree = bool(len(table)) and bool((table["difference"].abs() <= tolerance).all())
    print(f"\n{'AGREE' if agree else 'DISAGREE'}: {int((table['difference'].abs() <= tolerance).sum())} of "
          f"{len(table)} common shapes within {100 * tolerance:.0f}%")
    return agree


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--out-dir", type=Path, help="where the two profiles go (default: a temporary folder)")
    parser.add_argument("--quick-profile", type=Path)
    parser.add_argument("--full-profile", type=Path)
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args(argv)
    if (args.quick_profile is None) != (args.full_profile is None):
        parser.error("give both --quick-profile and --full-profile, or neither")
    if args.quick_profile:
        quick, full = args.quick_profile, args.full_profile
    else:
        out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="profile-agreement-"))
        out_dir.mkdir(parents=True, exist_ok=True)
        quick, full = _measure(args.device, args.nproc, out_dir)
    return 0 if report(compare(quick, full), args.tolerance, quick, full) else 1


if __name__ == "__main__":
    sys.exit(main())
