"""`torchrun --nnodes N --nproc-per-node G ... -m profiler -o cluster.json`: profile a cluster.

Every rank measures its GPU and joins the collectives; rank 0 writes the profile. On one machine
`autoplan profile -o cluster.json` does the same without torchrun.
"""
from __future__ import annotations

import argparse
import sys

from autoplan.specs import AutoplanError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m profiler", description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", "--out", dest="out", required=True, metavar="PATH",
                        help="profile JSON to write (rank 0); samples go to PATH.samples.csv")
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    parser.add_argument("--quick", action="store_true", help="a few shapes and sizes (under a minute)")
    parser.add_argument("--name", default="", help="profile name (default: host, device and process count)")
    args = parser.parse_args(argv)
    from profiler.launch import profile_under_torchrun

    try:
        profile_under_torchrun(args.out, args.device, args.quick, args.name)
    except AutoplanError as exc:
        sys.stderr.write(f"python -m profiler: error: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
