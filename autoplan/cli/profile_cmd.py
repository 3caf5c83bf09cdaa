"""`autoplan profile`: measure this machine into a HardwareProfile, or compare two profiles.

    autoplan profile -o cluster.json                         # every local GPU, one process each
    autoplan profile --device cpu --nproc 2 --quick -o cpu.json
    autoplan profile --compare cluster.json builtin:h100-80gb

Across nodes, run `torchrun --nnodes N --nproc-per-node G ... -m profiler -o cluster.json`.
torch is imported only inside the command.
"""
from __future__ import annotations

import argparse

from autoplan.cli.argtypes import ascii_int, one_line_name
from autoplan.specs import AutoplanError, HardwareProfile

BUILTIN_PREFIX = "builtin:"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "profile", help="measure this machine (matmul, attention, memory, collectives) into a profile JSON",
        description="Measure this machine into a HardwareProfile JSON (plus OUT.samples.csv with every "
                    "sample), or compare two profiles. Sizes base-2 (GiB), bandwidths base-10 (GB/s).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  autoplan profile -o cluster.json\n"
               "  autoplan profile --device cpu --nproc 2 --quick -o cpu.json\n"
               "  autoplan profile --compare cluster.json builtin:h100-80gb\n"
               "across nodes: torchrun --nnodes N --nproc-per-node G ... -m profiler -o cluster.json")
    p.add_argument("-o", "--output", dest="out", metavar="PATH",
                   help="profile JSON to write (written only when every measurement is done)")
    p.add_argument("--out", dest="out", default=argparse.SUPPRESS, help=argparse.SUPPRESS)  # the old spelling
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"),
                   help="what to measure (default: cuda when a GPU is visible, else cpu)")
    p.add_argument("--nproc", type=ascii_int, default=None,
                   help="processes to start, one per device (default: every GPU; 2 on the CPU)")
    p.add_argument("--quick", action="store_true", help="a few shapes and sizes: under a minute")
    p.add_argument("--name", default="", type=one_line_name,
                   help="profile name (default: host, device and process count)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"),
                   help="print two profiles side by side (a JSON path or builtin:NAME each) instead of measuring")
    p.set_defaults(func=run)


def load_profile_ref(ref: str) -> HardwareProfile:
    """A profile from a JSON path, or a built-in one named `builtin:<name>`."""
    if ref.startswith(BUILTIN_PREFIX):
        from cost_model import builtin_profile

        return builtin_profile(ref[len(BUILTIN_PREFIX):])
    return HardwareProfile.load(ref)


def run(args) -> int:
    if args.compare:
        if args.out:
            raise AutoplanError("pass either --compare A B or -o/--output PATH, not both")
        from profiler.compare import format_comparison

        a, b = (load_profile_ref(ref) for ref in args.compare)
        print(format_comparison(a, b, *args.compare))
        return 0
    if not args.out:
        raise AutoplanError("say where to write the profile with -o/--output PATH (or compare two with --compare A B)")
    from profiler.launch import check_output_path, profile_local, resolve_device, resolve_nproc
    from profiler.runner import ProfileRequest

    out = check_output_path(args.out)
    device_type = resolve_device(args.device)
    nproc = resolve_nproc(device_type, args.nproc)
    profile_local(ProfileRequest(out=out, device_type=device_type, quick=args.quick, name=args.name), nproc)
    return 0
