"""`autoplan frameworks`: the frameworks a plan can be made for -- what each stores and what it can run."""
from __future__ import annotations

import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("frameworks", help="list the training frameworks: what each stores and can run",
                              description=__doc__)
    p.add_argument("name", nargs="?", default=None, help="one framework: its facts with their sources")
    p.add_argument("--all", action="store_true",
                   help="also list the historical frameworks (autoplan's executor as of an older commit, kept to "
                        "re-score the records it measured)")
    p.set_defaults(func=run)


def run(args) -> int:
    from autoplan.rendering.render import render_framework, render_frameworks
    from autoplan.specs import FRAMEWORKS, get_framework
    from autoplan.specs.frameworks import HISTORICAL_FRAMEWORKS, base_framework_name

    if args.name is not None:
        from cost_model import load_constants

        constants, name = load_constants(), get_framework(args.name).name
        sys.stdout.write(render_framework(constants.framework(name), constants.frameworks.get(base_framework_name(name), {})))
        return 0
    shown = [f for f in FRAMEWORKS.values() if args.all or f.name not in HISTORICAL_FRAMEWORKS]
    sys.stdout.write(render_frameworks(shown))
    old = "; ".join(f"{name} = {what}" for name, what in HISTORICAL_FRAMEWORKS.items())
    sys.stdout.write(f"\nhistorical (for its records{'' if args.all else '; --all lists it'}): "
                     f"{old}\n")
    sys.stdout.write("`autoplan frameworks NAME` prints one with its sources; plan for one with "
                     "`autoplan search --framework NAME`\n")
    return 0
