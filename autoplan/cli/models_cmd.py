"""`autoplan models`: the model catalog as a table (architecture, parameter count, source)."""
from __future__ import annotations

import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("models", help="list the catalog models with their parameter counts",
                              description=__doc__)
    p.add_argument("--json", action="store_true", help="print the ModelSpecs as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from autoplan.inputs.catalog import CATALOG_PATH, catalog_model, model_names, model_source
    from autoplan.rendering.render import render_models
    from autoplan.specs.jsonio import dumps

    specs = [(name, catalog_model(name), model_source(name)) for name in model_names()]
    if args.json:
        sys.stdout.write(dumps({name: m.to_dict() for name, m, _ in specs}))
        return 0
    sys.stdout.write(render_models(specs))
    sys.stdout.write(f"\n{len(specs)} models (autoplan/{CATALOG_PATH.name}); --model also takes a Hugging Face "
                     f"config.json or a folder holding one\n")
    return 0
