"""A second, independent hostile census (issue 27): hand-written inputs, made without reading the
generated census's list (benchmarks/bad_input_census.py), to every command. Each case is classified:

  clean       bad input refused with exit 2, one stderr line naming the cause (its `words`), or edge
              input accepted (and any generated file parses, and printed figures are finite)
  traceback   a traceback, or an exit code other than 0/2 (1 is estimate's "does not fit" answer)
  damaged     an input, an existing output, a FIFO, a folder or /dev/null changed
  silent      bad input accepted (exit 0), or accepted input printing nan/inf
  messy       refused, but not one line
  wrong_cause refused in one line that does not name the cause (none of the case's words)
  unsafe      a generated script/module/JSON/TOML that does not parse, or a name that ran
  hang        still running at the timeout
  inconsistent  the same file accepted by one command and refused by another (per group)

    PYTHONPATH=<tree> python benchmarks/hostile_census.py [--json out.json] [--only CLASS]

It runs every case in a forked child of a parent that imported the heavy libraries once (the runner
of bad_input_census.py). As root, chmod cannot make a folder unwritable, so "unwritable" is covered
by a path whose parent is a regular file and by a folder that does not exist.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bad_input_census as runner  # noqa: E402  the forked runner and the base documents

SMALL = ["--model", "llama-2-7b", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048"]
MOE = ["--model", "mixtral-8x7b", "--gpus", "16", "--global-batch", "32", "--seq-len", "2048"]
NOT_FINITE = re.compile(r"(?<![\w.])[-+]?(nan|inf|infinity)(?![\w])", re.IGNORECASE)


LAUNCH_ENV = {"PATH": "/usr/bin:/bin", "DATA": "synthetic", "MEGATRON_LM": "/nonexistent", "MEGATRON_DEEPSPEED":
              "/nonexistent", "DATA_PATH": "d", "TOKENIZER_MODEL": "t", "TRAIN_ITERS": "1", "LR": "1e-4",
              "MASTER_ADDR": "localhost"}
"""The placeholders the generated launch scripts stop on while unset (export --launch, run --print-launch)."""


class H(runner.Case):
    """A hostile case: `expected` is bad / edge / either (accepted or refused, but cleanly); `words`
    are what a refusal must name (any one, case-insensitive); `group` ties cases that read one file."""

    def __init__(self, cls, label, argv, expected="bad", words=(), group=None, check=None, **kw):
        super().__init__(cls, label, argv, expected, **kw)
        self.words, self.group, self.check = tuple(words), group, check  # check: (language, file name)


def _j(doc) -> str:
    return json.dumps(doc, allow_nan=True)


def _edit(doc: dict, path: str, value, drop=False) -> dict:
    doc = json.loads(json.dumps(doc))
    keys = path.split(".")
    d = doc
    for k in keys[:-1]:
        d = d[k]
    if drop:
        d.pop(keys[-1], None)
    else:
        d[keys[-1]] = value
    return doc


# -- the readers: one malformed file, every command that reads its kind -----------------------------
def _plan_readers():
    """(label, argv, accepts the base plan) for every command that reads a plan file `p.json`."""
    return [("estimate", ["estimate", "{d}/p.json"], True),
            ("export-megatron", ["export", "{d}/p.json", "--to", "megatron"], True),
            ("export-deepspeed", ["export", "{d}/p.json", "--to", "deepspeed"], True),
            ("export-torchtitan", ["export", "{d}/p.json", "--to", "torchtitan"], True),
            ("compare", ["compare", "{d}/p.json", "{d}/p.json"], True),
            ("run-launch", ["run", "{d}/p.json", "--print-launch", "torchrun"], True),
            ("report-plan", ["report", "--plan", "{d}/p.json", "-o", "{d}/rep"], True),
            ("tune", ["tune", "{d}/p.json", "--top", "1", "-o", "{d}/best.json"], False)]


def _malformed_json(valid: str) -> list:
    """(label, bytes or str, expected, words) of one JSON file gone wrong, any kind."""
    return [("empty", "", "bad", ("empty", "json", "no data", "expecting")),
            ("whitespace", "  \n\t\n", "bad", ("empty", "json", "expecting")),
            ("truncated", valid[: len(valid) // 2], "bad", ("json", "line")),
            ("two_documents", valid + valid, "bad", ("json", "extra")),
            ("top_array", "[" + valid + "]", "bad", ("list", "array", "object")),
            ("top_number", "42", "bad", ("number", "int", "object")),
            ("top_string", '"plan"', "bad", ("str", "object")),
            ("top_null", "null", "bad", ("null", "none", "object")),
            ("utf16", valid.encode("utf-16"), "bad", ("utf", "json", "decode", "text")),
            ("latin1_junk", b"\xff\xfe\x00{" + b"\x99" * 40, "bad", ("utf", "json", "decode", "text")),
            ("nul_bytes", valid[:20] + "\x00" * 8 + valid[20:], "bad", ("json", "nul", "control")),
            ("deep_nesting", "[" * 200000 + "]" * 200000, "bad", ("json", "nested", "deep", "list", "object")),
            ("big_int", valid[:-1] + ', "zz": ' + "9" * 5000 + "}", "bad", ("json", "digit", "integer", "number")),
            ("bom", "\ufeff" + valid, "either", ("json", "bom", "utf")),
            ("big_padding", " " * 3_000_000 + valid, "either", ("json", "large")),
            ]


def reader_cases(base: dict) -> list:
    cases = []
    plan_text = json.dumps(base["plan"], indent=1)
    for label, body, expected, words in _malformed_json(plan_text):
        for cmd, argv, accepts in _plan_readers():
            cases.append(H("readers", f"plan:{label}:{cmd}", argv, expected, words,
                           group=f"plan:{label}" if accepts else None, files={"p.json": body}, keep=("p.json",)))
    # the wrong kind of file where a plan belongs
    for other in ("profile", "calibration", "record"):
        for cmd, argv, accepts in _plan_readers():
            cases.append(H("readers", f"plan-is-{other}:{cmd}", argv, "bad", ("schema", "plan"),
                           group=f"plan-is-{other}" if accepts else None, files={"p.json": _j(base[other])},
                           keep=("p.json",)))
    rec_text = _j(base["record"])
    rec_readers = [("calibrate", ["calibrate", "{d}/r.jsonl", "-o", "{d}/cal.json"]),
                   ("report", ["report", "{d}/r.jsonl", "-o", "{d}/rep"])]
    rec_bodies = [("empty", "", ("usable", "empty")),
                  ("truncated_line", rec_text[: len(rec_text) // 3] + "\n", ("json", "line", "malformed")),
                  ("plan_line", _j(base["plan"]) + "\n", ("measurement", "schema", "no")),
                  ("array_line", "[1,2,3]\n", ("measurement", "line", "object", "no")),
                  ("nan_times", _j({**base["record"], "step_times_s": [float("nan")] * 3}) + "\n",
                   ("step_times", "nan", "finite")),
                  ("negative_times", _j({**base["record"], "step_times_s": [-1.0, -1.0, -1.0]}) + "\n",
                   ("step_times", "negative", "positive")),
                  ("zero_tokens", _j({**base["record"], "tokens_per_step": 0}) + "\n", ("tokens_per_step",)),
                  ("huge_peak", _j({**base["record"], "peak_memory_bytes": 1e300}) + "\n", ("peak_memory",)),
                  ("status_weird", _j({**base["record"], "status": "exploded"}) + "\n", ("status",)),
                  ("plan_id_control", _j({**base["record"], "plan_id": "a\x1b[31mb"}) + "\n",
                   ("plan_id", "control")),
                  ("binary", b"\x00\x01\x02\xff\xfe" * 100, ("utf", "text", "json", "binary", "decode")),
                  ("nested_plan_bad", _j({**base["record"], "plan": _edit(base["plan"], "parallel.tp", 0)}) + "\n",
                   ("tp",))]
    for label, body, words in rec_bodies:
        for cmd, argv in rec_readers:
            cases.append(H("readers", f"record:{label}:{cmd}", argv, "bad", words, group=f"record:{label}",
                           files={"r.jsonl": body}, keep=("r.jsonl",)))
    prof_text = _j(base["profile"])
    prof_readers = [("search", ["search", *SMALL, "--profile", "{d}/prof.json"]),
                    ("estimate", ["estimate", *SMALL, "--tp", "2", "--profile", "{d}/prof.json"]),
                    ("memory", ["memory", *SMALL, "--profile", "{d}/prof.json", "--zero", "1"]),
                    ("calibrate", ["calibrate", "--profile", "{d}/prof.json", "-o", "{d}/cal.json"]),
                    ("compare", ["profile", "--compare", "{d}/prof.json", "builtin:h100-80gb"])]
    prof = base["profile"]
    prof_bodies = [("truncated", prof_text[:100], ("json",)),
                   ("zero_capacity", _j({**prof, "memory_capacity_bytes": 0}), ("memory_capacity",)),
                   ("nan_bandwidth", _j({**prof, "memory_bandwidth_bytes_per_s": float("nan")}), ("bandwidth",)),
                   ("inf_flops", _j({**prof, "peak_flops_per_s": {**prof["peak_flops_per_s"], "bf16": float("inf")}}),
                    ("peak_flops", "bf16")),
                   ("string_flops", _j({**prof, "peak_flops_per_s": "fast"}), ("peak_flops",)),
                   ("gpn_zero", _j({**prof, "gpus_per_node": 0}), ("gpus_per_node",)),
                   ("gpn_float", _j({**prof, "gpus_per_node": 7.5}), ("gpus_per_node",)),
                   ("schema_plan", _j({**prof, "schema": "autoplan.plan/v2"}), ("schema",)),
                   ("name_control", _j({**prof, "name": "evil\nname"}), ("name", "control")),
                   ("matmul_junk", _j({**prof, "matmul": [{"m": "x"}]}), ("matmul",)),
                   ("negative_latency", _j({**prof, "inter_node_latency_s": -1e-6}), ("latency",)),
                   ("absurd_capacity", _j({**prof, "memory_capacity_bytes": 10**40}), ("memory_capacity",))]
    for label, body, words in prof_bodies:
        for cmd, argv in prof_readers:
            cases.append(H("readers", f"profile:{label}:{cmd}", argv, "bad", words, group=f"profile:{label}",
                           files={"prof.json": body}, keep=("prof.json",)))
    cal = base["calibration"]
    cal_readers = [("search", ["search", *SMALL, "--trials", "8", "--calibration", "{d}/c.json"]),
                   ("estimate", ["estimate", *SMALL, "--tp", "2", "--calibration", "{d}/c.json"]),
                   ("report", ["report", "--published", "--calibration", "{d}/c.json", "-o", "{d}/rep"])]
    cal_bodies = [("truncated", _j(cal)[:200], ("json",)),
                  ("schema_profile", _j({**cal, "schema": "autoplan.profile/v1"}), ("schema",)),
                  ("correction_string", _j({**cal, "correction": "boost"}), ("correction",)),
                  ("features_wrong", _j({**cal, "feature_schema": {"name": "other/9", "features": []}}),
                   ("feature",)),
                  ("op_models_junk", _j({**cal, "op_models": [1, 2]}), ("op_models",)),
                  ("profile_number", _j({**cal, "profile": 5}), ("profile",)),
                  ("plan_instead", _j(base["plan"]), ("schema", "calibration")),
                  ("empty_object", "{}", ("schema", "calibration"))]
    for label, body, words in cal_bodies:
        for cmd, argv in cal_readers:
            cases.append(H("readers", f"calibration:{label}:{cmd}", argv, "bad", words,
                           group=f"calibration:{label}", files={"c.json": body}, keep=("c.json",)))
    return cases


# -- plan fields: values a plan file can hold, read by estimate / export / run --print-launch ------------
def field_cases(base: dict) -> list:
    plan = base["plan"]
    edits = [  # (label, path, value, expected, words)
        ("tp_not_dividing_heads", "parallel.tp", 3, "bad", ("tp",)),
        ("degrees_not_gpus", "parallel.dp", 3, "bad", ("dp", "gpus")),
        ("pp_over_layers", "parallel.pp", 64, "bad", ("pp", "layers", "dp")),
        ("zero_5", "parallel.zero_stage", 5, "bad", ("zero",)),
        ("recompute_partial", "parallel.recompute", "partial", "bad", ("recompute",)),
        ("sp_string", "parallel.sequence_parallel", "yes", "bad", ("sequence_parallel",)),
        ("sp_tp1", "parallel.sequence_parallel", True, "bad", ("sequence", "tp")),
        ("ep_dense", "parallel.ep", 2, "bad", ("ep", "expert", "moe", "dp")),
        ("micro_batch_neg", "parallel.micro_batch_size", -4, "bad", ("micro_batch",)),
        ("microbatches_float", "parallel.num_microbatches", 1.5, "bad", ("num_microbatches",)),
        ("recompute_layers_big", "parallel.recompute_num_layers", 10**6, "bad", ("recompute",)),
        ("heads_zero", "model.num_heads", 0, "bad", ("num_heads",)),
        ("kv_over_heads", "model.num_kv_heads", 64, "bad", ("num_kv_heads",)),
        ("hidden_absurd", "model.hidden_size", 10**12, "bad", ("hidden_size",)),
        ("layers_absurd", "model.num_layers", 10**9, "bad", ("num_layers",)),
        ("vocab_zero", "model.vocab_size", 0, "bad", ("vocab_size",)),
        ("mlp_unknown", "model.mlp", "relu9", "bad", ("mlp",)),
        ("experts_top_over", "model.num_experts_per_token", 4, "bad", ("experts",)),
        ("num_params_neg", "model.num_params", -5, "bad", ("num_params",)),
        ("seq_beyond_context", "training.seq_len", 65536, "bad", ("seq_len", "max_seq_len", "context")),
        ("seq_absurd", "training.seq_len", 10**13, "bad", ("seq_len",)),
        ("dtype_int4", "training.dtype", "int4", "bad", ("dtype",)),
        ("optimizer_unknown", "training.optimizer", "lion9", "bad", ("optimizer",)),
        ("gbs_zero", "training.global_batch_size", 0, "bad", ("global_batch",)),
        ("gbs_inf", "training.global_batch_size", float("inf"), "bad", ("global_batch",)),
        ("gpus_mismatch", "cluster.num_gpus", 24, "bad", ("num_gpus", "gpus")),
        ("gpn_zero", "cluster.gpus_per_node", 0, "bad", ("gpus_per_node",)),
        # cluster.name is a label (a measured profile names itself); the profile field says the hardware
        ("cluster_label_unknown_gpu", "cluster.name", "z100-1tb", "either", ("z100", "gpu", "cluster")),
        ("profile_missing_file", "cluster.profile", "/nonexistent/prof.json", "bad", ("profile", "nonexistent")),
        ("profile_builtin_unknown", "cluster.profile", "builtin:zzz", "bad", ("zzz", "profile")),
        ("profile_is_folder", "cluster.profile", "/tmp", "bad", ("profile", "folder", "/tmp")),
        ("framework_unknown", "framework", "nanotron9", "bad", ("framework", "nanotron9")),
        ("schema_future", "schema", "autoplan.plan/v9", "bad", ("schema", "v9")),
        ("pred_nan_step", "prediction.step_time_s", float("nan"), "bad", ("step_time", "prediction")),
        ("pred_neg_step", "prediction.step_time_s", -1.0, "bad", ("step_time", "prediction")),
        ("pred_fits_string", "prediction.fits", "maybe", "bad", ("fits", "prediction")),
        ("pred_peak_inf", "prediction.peak_memory_bytes", float("inf"), "bad", ("peak_memory", "prediction")),
        ("alternatives_string", "alternatives", "none", "bad", ("alternatives",)),
        ("alternative_bad_parallel", "alternatives", [{"parallel": {"tp": "x"}}], "bad", ("alternative", "tp")),
        ("plan_id_control", "plan_id", "ab\x07cd", "bad", ("plan_id", "control")),
        ("model_name_newline", "model.name", "llama\nrm -rf ~", "bad", ("name", "control")),
        ("model_name_empty", "model.name", "", "bad", ("name", "empty")),
        # hand edits that leave the prediction contradicting itself, and typos of a section's fields
        # (a third census, session 3: compare, export and run took each silently)
        ("pred_breakdown_not_summing", "prediction.time_breakdown_s.compute", 1e6, "bad",
         ("time_breakdown_s", "sum")),
        ("pred_fits_contradicting_peak", "prediction.fits", False, "bad", ("fits", "peak_memory")),
        ("model_typo_field", "model.num_layer", 80, "bad", ("num_layer", "unknown")),
        ("training_typo_field", "training.global_batch", 64, "bad", ("global_batch", "unknown")),
        ("cluster_typo_field", "cluster.gpus", 16, "bad", ("gpus", "unknown")),
    ]
    drops = [("no_prediction", "prediction", "either", ("prediction",)),
             ("no_parallel", "parallel", "bad", ("parallel",)),
             ("no_model", "model", "bad", ("model",)),
             ("no_schema", "schema", "bad", ("schema",)),
             ("no_alternatives", "alternatives", "either", ("alternatives",))]
    readers = [(c, a) for c, a, accepts in _plan_readers() if accepts and c != "report-plan"]
    cases = []
    for label, extra in (("extra_nan", {"notes": float("nan")}), ("extra_inf_nested", {"zz": {"a": [float("inf")]}}),
                         ("search_inf", {"search": {**plan["search"], "wall_time_s": float("inf")}})):
        body = _j({**plan, **extra})
        for cmd, argv in (("estimate-o", ["estimate", "{d}/p.json", "-o", "{d}/out.json"]),
                          ("export-deepspeed", ["export", "{d}/p.json", "--to", "deepspeed", "-o", "{d}/out.json"]),
                          ("compare", ["compare", "{d}/p.json", "{d}/p.json"])):
            cases.append(H("fields", f"{label}:{cmd}", argv, "bad", ("finite", "nan", "infinity"),
                           group=f"fields:{label}", files={"p.json": body}, keep=("p.json",), check=("json", "out.json")))
    for label, path, value, expected, words in edits:
        body = _j(_edit(plan, path, value))
        for cmd, argv in readers:
            cases.append(H("fields", f"{label}:{cmd}", argv, expected, words, group=f"fields:{label}",
                           files={"p.json": body}, keep=("p.json",)))
    for label, path, expected, words in drops:
        body = _j(_edit(plan, path, None, drop=True))
        for cmd, argv in readers:
            cases.append(H("fields", f"{label}:{cmd}", argv, expected, words, group=f"fields:{label}",
                           files={"p.json": body}, keep=("p.json",)))
    return cases


# -- outputs ----------------------------------------------------------------------------------------
def output_cases(base: dict) -> list:
    plan = _j(base["plan"])
    rec = _j(base["record"]) + "\n"
    cases = []
    writers = [("search", ["search", *SMALL, "-o"]), ("estimate", ["estimate", "{d}/p.json", "-o"]),
               ("export", ["export", "{d}/p.json", "--to", "megatron", "-o"]),
               ("memory", ["memory", *SMALL, "--zero", "1", "-o"]),
               ("calibrate", ["calibrate", "{d}/r.jsonl", "--kind", "ridge", "-o"]),
               ("tune", ["tune", "{d}/p.json", "-o"]), ("run", ["run", "{d}/p.json", "-o"]),
               ("profile", ["profile", "--device", "cpu", "--quick", "-o"]),
               ("cluster", ["cluster", "--model", "llama-2-7b", "--train-tokens", "1T", "--gpus-max", "16",
                            "--gpu", "h100-80gb", "--trials", "4", "-o"])]
    targets = [  # (label, target, nodes, expected, words)
        ("fifo", "{d}/out.fifo", {"out.fifo": "fifo"}, "bad", ("fifo",)),
        ("folder", "{d}/sub", {"sub": "folder"}, "bad", ("folder",)),
        ("dev_full", "/dev/full", {}, "bad", ("device",)),
        ("dev_zero", "/dev/zero", {}, "bad", ("device",)),
        ("missing_folder", "{d}/no/such/out.json", {}, "bad", ("does not exist", "folder")),
        ("parent_is_file", "{d}/p.json/out.json", {}, "bad", ("folder", "not a directory", "p.json")),
        ("trailing_slash", "{d}/newdir/", {}, "bad", ("folder", "does not exist", "newdir")),
        ("name_too_long", "{d}/" + "x" * 300 + ".json", {}, "bad", ("too long", "name")),
        ("symlink_loop", "{d}/loop", {"loop": "symlink:loop"}, "bad", ("loop", "symbolic", "link")),
        ("dangling_symlink_to_missing_folder", "{d}/dl", {"dl": "symlink:/nonexistent_i27/x.json"}, "bad",
         ("does not exist", "nonexistent")),
        ("empty", "", {}, "bad", ("empty", "output")),
        ("space_only", "   ", {}, "bad", ("empty", "output")),
    ]
    for wname, argv in writers:
        for label, target, nodes, expected, words in targets:
            if wname == "run" and label == "empty":
                continue  # run -o '': no record, its documented meaning
            cases.append(H("outputs", f"{wname}:{label}", [*argv, target], expected, words,
                           files={"p.json": plan, "r.jsonl": rec}, nodes=dict(nodes), keep=("p.json", "r.jsonl")))
    # the output is an input: same path, ./ spelling, symlink, hard link, .. spelling
    same = [("same", "{d}/p.json", {}), ("dotted", "{d}/./sub/../p.json", {"sub": "folder"}),
            ("symlink", "{d}/ln.json", {"ln.json": "symlink:p.json"}), ("relative", "p.json", {})]
    for label, target, nodes in same:
        for wname, argv in (("estimate", ["estimate", "{d}/p.json", "-o", target]),
                            ("export", ["export", "{d}/p.json", "--to", "deepspeed", "-o", target]),
                            ("tune-o", ["tune", "{d}/p.json", "-o", target]),
                            ("tune-records", ["tune", "{d}/p.json", "--records", target]),
                            ("tune-calout", ["tune", "{d}/p.json", "--calibration-out", target]),
                            ("run", ["run", "{d}/p.json", "-o", target]),
                            ("report", ["report", "--plan", "{d}/p.json", "-o", target])):
            cases.append(H("outputs", f"input-as-output:{label}:{wname}", argv, "bad", ("input", "folder"),
                           files={"p.json": plan}, nodes=dict(nodes), keep=("p.json",)))
    for wname, argv in (("calibrate-rec", ["calibrate", "{d}/r.jsonl", "-o", "{d}/r.jsonl"]),
                        ("calibrate-prof", ["calibrate", "--profile", "{d}/prof.json", "-o", "{d}/prof.json"]),
                        ("search-prof", ["search", *SMALL, "--profile", "{d}/prof.json", "-o", "{d}/prof.json"]),
                        ("estimate-cal", ["estimate", *SMALL, "--tp", "2", "--calibration", "{d}/c.json",
                                          "-o", "{d}/c.json"]),
                        ("report-holds-input", ["report", "{d}/sub/r.jsonl", "-o", "{d}/sub"]),
                        ("profile-compare", ["profile", "--compare", "{d}/prof.json", "builtin:h100-80gb",
                                             "-o", "{d}/prof.json"]),
                        ("hardlink", ["estimate", "{d}/p.json", "-o", "{d}/hard.json"])):
        files = {"p.json": plan, "r.jsonl": rec, "prof.json": _j(base["profile"]),
                 "c.json": _j(base["calibration"]), "sub/r.jsonl": rec}
        cases.append(H("outputs", f"input-as-output:{wname}", argv, "bad", ("input", "compare"), files=files,
                       keep=("p.json", "r.jsonl", "prof.json", "c.json", "sub/r.jsonl")))
    # edge: writing through a symlink to a new file in its target's folder; stdout spellings
    cases += [H("outputs", "stdout-dash:export", ["export", "{d}/p.json", "--to", "deepspeed", "-o", "-"], "edge",
                files={"p.json": plan}),
              H("outputs", "stdout-dev:memory", ["memory", *SMALL, "--zero", "1", "-o", "/dev/stdout"], "edge"),
              H("outputs", "symlink-to-new:estimate", ["estimate", "{d}/p.json", "-o", "{d}/link.json"], "edge",
                files={"p.json": plan}, nodes={"link.json": "symlink:target.json"}),
              H("outputs", "unicode-name:export", ["export", "{d}/p.json", "--to", "megatron", "-o",
                                                    "{d}/пла́н 計画.sh"], "edge", files={"p.json": plan}),
              H("outputs", "memory-unknown-ext", ["memory", *SMALL, "--zero", "1", "-o", "{d}/t.xlsx"], "bad",
                ("xlsx", "csv", ".md"))]
    # an output that is a file an input names (a third census, session 3: each was overwritten)
    named = {"p.json": _j(_edit(base["plan"], "cluster.profile", "prof.json")), "samples.csv": "op,time_s\n",
             "prof.json": _j(base["profile"]), "m/config.json": _j(runner.TINY)}
    for label, argv in (("plan-profile:estimate", ["estimate", "{d}/p.json", "-o", "{d}/prof.json"]),
                        ("plan-profile:tune-records", ["tune", "{d}/p.json", "--records", "{d}/prof.json"]),
                        ("plan-profile-samples:run", ["run", "{d}/p.json", "-o", "{d}/samples.csv"]),
                        ("profile-samples:search", ["search", *SMALL, "--profile", "{d}/prof.json",
                                                    "-o", "{d}/samples.csv"]),
                        ("model-folder-config:search", ["search", "--model", "{d}/m", "--gpus", "8",
                                                        "-o", "{d}/m/config.json"])):
        cases.append(H("outputs", f"named-input:{label}", argv, "bad", ("input",), files=dict(named),
                       keep=tuple(named)))
    return cases


# -- numbers ------------------------------------------------------------------------------------------
def number_cases(base: dict) -> list:
    cluster = ["cluster", "--model", "llama-2-7b", "--gpu", "h100-80gb", "--gpus-max", "16", "--trials", "4"]
    bad = [  # (label, argv, words)
        ("tokens_comma", [*cluster, "--train-tokens", "1,5M"], ("1,5M",)),
        ("tokens_double_suffix", [*cluster, "--train-tokens", "2TT"], ("2TT",)),
        ("tokens_negative", [*cluster, "--train-tokens=-2T"], ("-2T",)),
        ("tokens_zero", [*cluster, "--train-tokens", "0"], ("train-tokens", "0")),
        ("tokens_nan", [*cluster, "--train-tokens", "nan"], ("nan",)),
        ("tokens_inf", [*cluster, "--train-tokens", "inf"], ("inf",)),
        ("tokens_1e400", [*cluster, "--train-tokens", "1e400"], ("1e400",)),
        ("tokens_hex", [*cluster, "--train-tokens", "0x10"], ("0x10",)),
        ("tokens_arabic", [*cluster, "--deadline-days", "30", "--train-tokens", "٣T"], ("٣T", "train-tokens")),
        ("tokens_superscript", [*cluster, "--train-tokens", "2²T"], ("train-tokens",)),
        ("tokens_absurd", [*cluster, "--train-tokens", "1e40"], ("train-tokens", "1e40")),
        ("deadline_zero", [*cluster, "--train-tokens", "1T", "--deadline-days", "0"], ("deadline",)),
        ("deadline_nan", [*cluster, "--train-tokens", "1T", "--deadline-days", "nan"], ("deadline",)),
        ("deadline_tiny", [*cluster, "--train-tokens", "1T", "--deadline-days", "1e-300"], ("deadline",)),
        ("budget_comma", [*cluster, "--train-tokens", "1T", "--budget", "1,5M", "--gpu-hour-price", "2"],
         ("1,5M",)),
        ("budget_negative", [*cluster, "--train-tokens", "1T", "--budget", "$-5", "--gpu-hour-price", "2"],
         ("budget",)),
        ("budget_no_price", [*cluster, "--train-tokens", "1T", "--budget", "1M"], ("price",)),
        ("price_nan", ["search", *SMALL, "--train-tokens", "1T", "--gpu-hour-price", "nan"], ("price",)),
        ("price_negative", ["search", *SMALL, "--train-tokens", "1T", "--gpu-hour-price", "-2"], ("price",)),
        ("price_comma", ["search", *SMALL, "--train-tokens", "1T", "--gpu-hour-price", "2,50"], ("2,50",)),
        ("price_huge", ["search", *SMALL, "--train-tokens", "1T", "--gpu-hour-price", "1e308"], ("price",)),
        ("price_per_type_unknown", [*cluster, "--train-tokens", "1T", "--gpu-hour-price", "z100=2"], ("z100",)),
        ("headroom_101pct", ["search", *SMALL, "--memory-headroom", "101%"], ("101%", "headroom")),
        ("headroom_neg_pct", ["search", *SMALL, "--memory-headroom", "-5%"], ("-5%", "headroom")),
        ("headroom_nan_pct", ["search", *SMALL, "--memory-headroom", "nan%"], ("nan%", "headroom")),
        ("headroom_capacity", ["estimate", *SMALL, "--tp", "2", "--memory-headroom", "80GiB"],
         ("headroom", "capacity")),
        ("headroom_unit", ["search", *SMALL, "--memory-headroom", "5XB"], ("5XB",)),
        ("headroom_bare_unit", ["search", *SMALL, "--memory-headroom", "GiB"], ("GiB", "headroom")),
        # issue 53: a bare number is GiB to one user and a percentage to another; magnitudes of no real run
        ("headroom_bare_number", ["search", *SMALL, "--memory-headroom", "10"], ("10GiB or 10%",)),
        ("headroom_bare_decimal", ["estimate", *SMALL, "--tp", "2", "--memory-headroom", "4.5"], ("4.5GiB",)),
        ("tokens_tiny", [*cluster, "--train-tokens", "2", "--deadline-days", "30"], ("tokens", "training run")),
        ("deadline_past", [*cluster, "--train-tokens", "1T", "--deadline-days=-3"], ("past",)),
        ("gpus_zero", ["search", "--model", "llama-2-7b", "--gpus", "0"], ("gpus",)),
        ("gpus_float", ["search", "--model", "llama-2-7b", "--gpus", "8.0"], ("8.0", "gpus")),
        ("gpus_absurd", ["search", "--model", "llama-2-7b", "--gpus", "10000000000"], ("gpus",)),
        ("gpus_underscore", ["search", "--model", "llama-2-7b", "--gpus", "1_6"], ("1_6", "gpus")),
        ("gpus_arabic", ["search", "--model", "llama-2-7b", "--gpus", "١٦"], ("gpus",)),
        ("gbs_absurd", ["search", "--model", "llama-2-7b", "--gpus", "8", "--global-batch", "10**15"],
         ("global-batch",)),
        ("gbs_huge", ["estimate", "--model", "llama-2-7b", "--gpus", "8", "--global-batch", str(10**18)],
         ("global", "batch")),
        ("seq_absurd", ["estimate", "--model", "llama-2-7b", "--gpus", "8", "--seq-len", str(10**12)],
         ("seq-len", "seq_len", "context")),
        ("seq_beyond_context", ["estimate", "--model", "llama-2-7b", "--gpus", "8", "--seq-len", "8192"],
         ("seq", "context", "4096")),
        ("micro_zero", ["estimate", *SMALL, "--micro-batch", "0"], ("micro-batch",)),
        ("trials_zero", ["search", *SMALL, "--sampler", "tpe", "--trials", "0"], ("trials",)),
        ("trials_neg", ["search", *SMALL, "--trials", "-3"], ("trials",)),
        ("seed_neg", ["search", *SMALL, "--seed", "-1"], ("seed",)),
        ("seed_big", ["search", *SMALL, "--seed", str(2**40)], ("seed",)),
        ("gpus_min_over_max", ["cluster", "--model", "llama-2-7b", "--train-tokens", "1T", "--deadline-days", "30",
                               "--gpus-min", "64",
                               "--gpus-max", "8"], ("gpus-min", "gpus-max")),
        ("gpus_max_absurd", ["cluster", "--model", "llama-2-7b", "--train-tokens", "1T", "--gpus-max",
                             str(10**12)], ("gpus-max",)),
        ("top_zero", ["tune", "{d}/p.json", "--top", "0"], ("top",)),
        ("steps_zero", ["run", "{d}/p.json", "--steps", "0"], ("steps",)),
        ("lr_nan", ["run", "{d}/p.json", "--lr", "nan"], ("lr",)),
        ("lr_negative", ["tune", "{d}/p.json", "--lr", "-1"], ("lr",)),
        ("grad_clip_inf", ["run", "{d}/p.json", "--grad-clip", "inf"], ("grad-clip", "grad_clip")),
        ("min_lr_over_lr", ["run", "{d}/p.json", "--lr", "1e-4", "--min-lr", "1"], ("min-lr", "min_lr")),
        ("nproc_negative", ["run", "{d}/p.json", "--nproc", "-2"], ("nproc",)),
        ("steps_arabic", ["run", "{d}/p.json", "--steps", "٣"], ("steps",)),
        ("seed_arabic", ["search", *SMALL, "--seed", "٣"], ("seed",)),
        ("alternative_underscore", ["export", "{d}/p.json", "--to", "megatron", "--alternative", "0_1"],
         ("alternative",)),
        ("log_every_zero", ["run", "{d}/p.json", "--log-every", "0"], ("log-every",)),
        ("ckpt_every_neg", ["run", "{d}/p.json", "--checkpoint-every", "-1"], ("checkpoint-every",)),
        ("loss_chunk_negative", ["run", "{d}/p.json", "--loss-chunk-tokens", "-5"], ("loss-chunk",)),
        ("warmup_over_steps", ["run", "{d}/p.json", "--steps", "3", "--warmup-steps", "50"], ("warmup",)),
        ("alternative_float", ["export", "{d}/p.json", "--to", "megatron", "--alternative", "1.5"],
         ("alternative",)),
        ("alternative_neg", ["export", "{d}/p.json", "--to", "megatron", "--alternative", "-1"], ("alternative",)),
        ("alternative_over", ["export", "{d}/p.json", "--to", "megatron", "--alternative", "99"],
         ("alternative", "99")),
        ("recompute_layers_neg", ["estimate", *SMALL, "--recompute", "full", "--recompute-layers", "-1"],
         ("recompute-layers",)),
        ("profile_nproc_zero", ["profile", "--device", "cpu", "--nproc", "0", "-o", "{d}/x.json"], ("nproc",)),
    ]
    cases = [H("numbers", label, argv, "bad", words, files={"p.json": _j(base["plan"])}, keep=("p.json",))
             for label, argv, words in bad]
    edge = [("tokens_forms", [*cluster, "--train-tokens", "1.5e12"]),
            ("tokens_suffix", [*cluster, "--train-tokens", "300B", "--budget", "$250K", "--gpu-hour-price", "2.5"]),
            ("headroom_pct", ["estimate", *SMALL, "--tp", "2", "--memory-headroom", "10%"]),
            ("headroom_size", ["memory", *SMALL, "--zero", "1", "--memory-headroom", "512MiB"])]
    cases += [H("numbers", label, argv, "edge") for label, argv in edge]
    # a negative value with a space: argparse reads it as a flag; the refusal says how to pass it
    cases += [H("numbers", "negative-value-as-flag", ["search", *SMALL, "--memory-headroom", "-1GiB"], "bad",
                ("=VALUE",))]
    return cases


# -- names reaching generated scripts -----------------------------------------------------------------
HOSTILE = ["$(touch pwned)", "`touch pwned`", "a'b\"c", "x; touch pwned #", "\"\"\"); import os; os.system('touch pwned'); (\"\"\"",
           "\\", "]] = 1\n[x", "llama ${HOME} %s {0}", "‮evil‭", "名前-модель", "-rf", "--help"]
CONTROL = ["a\nb", "a\rb", "a\x1b[2Jb", "a\tb", "a\x7fb", "a\u2028b", "llama\u202egnp.exe"]


def _generators():
    """(label, argv tail, language of the file written to {d}/gen)."""
    return [("megatron", ["export", "{d}/p.json", "--to", "megatron", "-o", "{d}/gen"], "bash"),
            ("megatron-torchrun", ["export", "{d}/p.json", "--to", "megatron", "--launch", "torchrun",
                                   "-o", "{d}/gen"], "bash"),
            ("deepspeed-slurm", ["export", "{d}/p.json", "--to", "deepspeed", "--launch", "slurm", "-o", "{d}/gen"],
             "bash"),
            ("deepspeed", ["export", "{d}/p.json", "--to", "deepspeed", "-o", "{d}/gen"], "json"),
            ("torchtitan", ["export", "{d}/p.json", "--to", "torchtitan", "-o", "{d}/gen"], "python"),
            ("torchtitan-0.2", ["export", "{d}/p.json", "--to", "torchtitan-0.2", "-o", "{d}/gen"], "toml")]


def name_cases(base: dict) -> list:
    plan = base["plan"]
    cases = []
    for i, name in enumerate(HOSTILE):
        for field in ("model.name", "plan_id", "cluster.name"):
            body = _j(_edit(plan, field, name))
            for label, argv, lang in _generators():
                if field == "cluster.name" and label not in ("megatron-torchrun", "deepspeed-slurm"):
                    continue
                cases.append(H("names", f"{field}#{i}:{label}", argv, "either", (field.split(".")[-1], "name"),
                               files={"p.json": body}, keep=("p.json",), check=(lang, "gen")))
    for i, name in enumerate(CONTROL):
        for field in ("model.name", "plan_id"):
            body = _j(_edit(plan, field, name))
            for label, argv, lang in _generators()[:5:2]:
                cases.append(H("names", f"control:{field}#{i}:{label}", argv, "bad", ("control", "character"),
                               files={"p.json": body}, keep=("p.json",)))
    # hostile names on the command line
    cases += [H("names", "model-cmd-subst", ["estimate", "--model", "$(touch pwned)", "--gpus", "8"], "bad",
                ("model", "$(touch pwned)")),
              H("names", "model-empty", ["estimate", "--model", "", "--gpus", "8"], "bad", ("model",)),
              H("names", "model-dotdot", ["estimate", "--model", "../../../etc/passwd", "--gpus", "8"], "bad",
                ("passwd", "config", "model")),
              H("names", "model-devnull", ["estimate", "--model", "/dev/null", "--gpus", "8"], "bad",
                ("/dev/null", "model")),
              H("names", "model-fifo", ["estimate", "--model", "{d}/m.fifo", "--gpus", "8"], "bad",
                ("fifo", "model", "m.fifo"), nodes={"m.fifo": "fifo"}),
              H("names", "gpu-newline", ["estimate", *SMALL, "--gpu", "h100\n"], "bad", ("gpu",)),
              H("names", "gpu-unknown", ["estimate", *SMALL, "--gpu", "b300-288gb"], "bad", ("b300",)),
              H("names", "framework-unknown", ["estimate", *SMALL, "--framework", "deepspeed;rm"], "bad",
                ("framework",)),
              H("names", "profile-name-hostile", ["profile", "--name", "a\nb$(touch pwned)", "--device", "cpu",
                                                  "--quick", "-o", "{d}/x.json"], "bad", ("name", "control")),
              H("names", "storage-bad-url", ["search", *SMALL, "--storage", "notaurl://x"], "bad", ("storage",)),
              H("names", "storage-missing-dir", ["search", *SMALL, "--storage", "sqlite:////nonexistent_i27/x.db"],
                "bad", ("storage", "nonexistent_i27")),
              H("names", "study-name-control", ["search", *SMALL, "--storage", "sqlite:///{d}/s.db", "--study-name",
                                                "a\x1bb"], "bad", ("study", "control")),
              H("names", "hf-config-name-control", ["estimate", "--model", "{d}/cfg.json", "--gpus", "8"], "bad",
                ("model_type", "control", "name"),
                files={"cfg.json": _j({**runner.TINY, "model_type": "llama\n\x1b[31m"})}),
              H("names", "hf-config-nan", ["estimate", "--model", "{d}/cfg.json", "--gpus", "8"], "bad",
                ("hidden_size",), files={"cfg.json": _j({**runner.TINY, "hidden_size": float("nan")})}),
              H("names", "hf-config-huge", ["estimate", "--model", "{d}/cfg.json", "--gpus", "8"], "bad",
                ("num_hidden_layers", "layers"), files={"cfg.json": _j({**runner.TINY, "num_hidden_layers": 10**12})}),
              H("names", "report-html-name", ["report", "--plan", "{d}/p.json", "-o", "{d}/rep"], "either", ("name",),
                files={"p.json": _j(_edit(plan, "model.name", "<script>alert(1)</script><img src=x onerror=y>"))},
                check=("html", "rep/index.html")),
              H("names", "hf-config-float-context", ["estimate", "--model", "{d}/cfg.json", "--gpus", "8"], "bad",
                ("max_position_embeddings", "max_seq_len"),
                files={"cfg.json": _j({**runner.TINY, "max_position_embeddings": 1e30})}),
              H("names", "hf-config-negative-experts", ["estimate", "--model", "{d}/cfg.json", "--gpus", "8"], "bad",
                ("experts",), files={"cfg.json": _j({**runner.TINY, "model_type": "mixtral", "num_local_experts": -1,
                                      "num_experts_per_tok": 2})}),
              H("names", "hf-config-list", ["estimate", "--model", "{d}/cfg.json", "--gpus", "8"], "bad",
                ("object", "list", "config"), files={"cfg.json": "[1, 2]"}),
              H("names", "hf-folder-no-config", ["estimate", "--model", "{d}/sub", "--gpus", "8"], "bad",
                ("config.json",), nodes={"sub": "folder"}),
              H("names", "print-launch-out-newline", ["run", "{d}/p.json", "--print-launch", "slurm", "-o",
                                                      "runs\necho pwned.jsonl"], "bad", ("control", "-o/--output"),
                files={"p.json": _j(plan)}),
              H("names", "print-launch-data-dropped", ["run", "{d}/p.json", "--print-launch", "torchrun", "--data",
                                                       "{d}/tok.bin"], "bad", ("--data", "DATA"),
                files={"p.json": _j(plan), "tok.bin": b"\x01\x00" * 64}),
              H("names", "print-launch-nproc-dropped", ["run", "{d}/p.json", "--print-launch", "torchrun", "--nproc",
                                                        "2"], "bad", ("--nproc",), files={"p.json": _j(plan)}),
              H("names", "print-launch-hostile", ["run", "{d}/p.json", "--print-launch", "slurm"], "either",
                ("name",), files={"p.json": _j(_edit(plan, "model.name", "$(touch pwned)'\""))},
                check=("bash", "_stdout"))]
    return cases


# -- rules --------------------------------------------------------------------------------------------
def rule_cases(base: dict) -> list:
    bad = [
        ("ds_moe_zero3_estimate", ["estimate", *MOE, "--framework", "deepspeed", "--zero", "3", "--ep", "2"],
         ("zero", "moe", "expert")),
        ("ds_moe_zero3_search", ["search", *MOE, "--framework", "deepspeed", "--zero", "3"],
         ("zero", "moe", "expert")),
        ("ds_moe_zero3_memory", ["memory", *MOE, "--framework", "deepspeed", "--zero", "3", "--ep", "2"],
         ("zero", "moe", "expert")),
        ("ep_on_dense", ["estimate", *SMALL, "--ep", "2"], ("ep", "expert", "moe")),
        ("ep_on_dense_memory", ["memory", *SMALL, "--ep", "2"], ("ep", "expert", "moe")),
        ("sp_with_tp1", ["estimate", *SMALL, "--sequence-parallel", "--tp", "1"], ("sequence", "tp")),
        ("sp_with_tp1_memory", ["memory", *SMALL, "--sequence-parallel", "--tp", "1"], ("sequence", "tp")),
        ("fp8_on_a100", ["estimate", *SMALL, "--dtype", "fp8", "--gpu", "a100-80gb"], ("fp8", "a100")),
        ("fp8_on_a100_search", ["search", *SMALL, "--dtype", "fp8", "--gpu", "a100-80gb"], ("fp8", "a100")),
        ("vpp_without_pp", ["estimate", *SMALL, "--vpp", "2"], ("vpp", "pp")),
        ("cp_not_dividing", ["estimate", *SMALL, "--cp", "3"], ("cp",)),
        ("tp_across_nodes", ["estimate", "--model", "llama-2-7b", "--gpus", "16", "--tp", "16"], ("tp", "node")),
        ("dp_not_dividing", ["estimate", *SMALL, "--dp", "3"], ("dp",)),
        ("recompute_layers_with_none", ["estimate", *SMALL, "--recompute", "none", "--recompute-layers", "4"],
         ("recompute",)),
        ("exhaustive_with_nsga2", ["search", *SMALL, "--exhaustive", "--sampler", "nsga2"],
         ("exhaustive", "nsga2")),
        ("zero3_megatron2021", ["estimate", *SMALL, "--framework", "megatron-2021", "--zero", "3"],
         ("zero", "megatron-2021")),
        ("profile_and_gpu", ["estimate", *SMALL, "--gpu", "a100-80gb", "--profile", "builtin:h100-80gb"],
         ("profile", "gpu")),
        ("fp8_plan_on_a100", ["estimate", "{d}/fp8.json", "--gpu", "a100-80gb"], ("fp8",)),
        ("fp8_plan_megatron_on_a100", ["estimate", "{d}/fp8mc.json", "--gpu", "a100-80gb"], ("fp8",)),
        ("not_fitting_export", ["export", "{d}/big.json", "--to", "megatron"], ("fit", "--force")),
        ("not_fitting_tune", ["tune", "{d}/big.json"], ("fit", "--force")),
        ("compare_one_file", ["compare", "{d}/p.json"], ("PLAN", "two", "argument")),
    ]
    fp8 = _edit(base["plan"], "training.dtype", "fp8")
    files = {"p.json": _j(base["plan"]), "big.json": _j(base["big"]), "fp8.json": _j(fp8),
             "fp8mc.json": _j({**fp8, "framework": "megatron-core"})}
    cases = [H("rules", label, argv, "bad", words, files=files, keep=("p.json", "big.json"))
             for label, argv, words in bad]
    cases.append(H("rules", "not_fitting_export_force", ["export", "{d}/big.json", "--to", "megatron", "--force"],
                   "edge", files=files))
    cases.append(H("rules", "ds_moe_zero2_ok", ["estimate", *MOE, "--framework", "deepspeed", "--zero", "2",
                                                "--ep", "2"], "either", ("memory", "fit")))
    return cases


# -- stale predictions (issue 53) ---------------------------------------------------------------------------
UNSHARDED = {"tp": 1, "pp": 1, "cp": 1, "vpp": 1, "dp": 16, "zero_stage": 0, "micro_batch_size": 1,
             "num_microbatches": 4, "recompute": "none", "recompute_num_layers": 0, "sequence_parallel": False}
"""The base plan (llama-2-7b on 16 GPUs, global batch 64) edited by hand to keep every state on every
GPU: ~128 GiB per GPU, while the stored prediction still says the searched plan's ~40 GiB fits."""


def stale_cases(base: dict) -> list:
    """Plan files whose stored prediction no longer belongs to them: a hand-edited parallel section
    (and a file written before the hash, the same edit); exported to the file's own framework, where
    no re-score for another framework catches it, a plan that does not fit must be refused."""
    def edited(framework: str, legacy: bool = False) -> str:
        doc = json.loads(json.dumps(base["plan"]))
        doc["framework"] = framework
        doc["parallel"].update(UNSHARDED)
        if legacy:
            doc.pop("prediction_for", None)
        return _j(doc)

    cases = []
    for target, framework in (("megatron", "megatron-core"), ("torchtitan", "torchtitan"), ("deepspeed", "deepspeed")):
        for legacy in (False, True):
            label = f"stale_export_{target}" + ("_legacy" if legacy else "")
            cases.append(H("stale", label, ["export", "{d}/p.json", "--to", target], "bad", ("fit",),
                           files={"p.json": edited(framework, legacy)}, keep=("p.json",)))
    return cases


# -- a stored study reused (issue 53) -------------------------------------------------------------------------
def storage_cases(base: dict) -> list:
    """A study stored by a TPE search of the small model, resumed with another sampler or framework:
    one line naming --study-name (before: an Optuna traceback, and a silent resume)."""
    storage = ["--storage", "sqlite:///{d}/s.db", "--study-name", "x"]
    bad = [("storage_other_sampler", ["search", *SMALL, "--trials", "5", "--sampler", "nsga2", *storage],
            ("--study-name",)),
           ("storage_other_framework", ["search", *SMALL, "--trials", "5", "--framework", "deepspeed", *storage],
            ("--study-name",))]
    bad += [("storage_missing_folder", ["search", *SMALL, "--trials", "5", "--storage", "sqlite:///{d}/no/s.db"],
             ("folder",)),
            ("storage_not_a_url", ["search", *SMALL, "--trials", "5", "--storage", "s.db"], ("storage", "URL"))]
    cases = [H("storage", label, argv, "bad", words, files={"s.db": base["study_db"]}) for label, argv, words in bad]
    cases.append(H("storage", "storage_same_problem", ["search", *SMALL, "--trials", "5", *storage], "edge",
                   files={"s.db": base["study_db"]}))
    return cases


# -- running and classifying -------------------------------------------------------------------------------
def _check_file(case: H, folder: Path) -> bool:
    language, name = case.check
    path = folder / name
    if not path.exists():
        return True  # nothing generated (refused)
    text = path.read_text(errors="replace")
    ok = True
    if language == "bash":
        ok = subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
        # then run it, its placeholders set, on a PATH without torchrun/srun/deepspeed: every line up
        # to the launcher runs, so a name that escaped its quotes would make `pwned`
        subprocess.run(["bash", str(path)], cwd=folder, env=LAUNCH_ENV | {"HOME": str(folder), "RUN_DIR": str(folder)},
                       capture_output=True, timeout=20)
    elif language == "python":
        try:
            compile(text, name, "exec")
        except SyntaxError:
            ok = False
    elif language == "json":
        try:
            json.loads(text)
        except ValueError:
            ok = False
    elif language == "html":  # a name is text in the page, never markup
        ok = "<script>alert" not in text and "<img src=x" not in text
    elif language == "toml":
        body = "\n".join(line for line in text.splitlines())
        try:
            tomllib.loads(body)
        except tomllib.TOMLDecodeError:
            ok = False
    return ok and not (folder / "pwned").exists()


def classify(case: H, folder: Path) -> tuple[str, int, str]:
    # a report that is drawn takes ~7 s of CPU, ~50 s on 2 cores shared with a census
    cls, rc, err = runner._run_forked(case, folder, case_timeout_s * (4 if case.argv[0] == "report" else 1))
    damaged = cls.startswith("damaged:")
    cls = cls.removeprefix("damaged:")
    if case.expected == "either" and cls == "silent":
        cls = "accepted"
    if cls == "accepted":
        out = (folder / "_stdout").read_text(errors="replace") if (folder / "_stdout").exists() else ""
        if NOT_FINITE.search(out):
            cls = "silent"
        elif case.check and not _check_file(case, folder):
            cls = "unsafe"
    elif cls == "clear" and case.words:
        line = err.strip().lower()
        if not any(w.lower() in line for w in case.words):
            cls = "wrong_cause"
    return ("damaged:" if damaged else "") + cls, rc, err


case_timeout_s = 30.0


def base_documents(folder: Path) -> dict:
    from autoplan.cli.main import main

    base = runner._base_documents(folder)
    big = folder / "big.json"  # a plan predicted not to fit: llama-2-70b on 8 GPUs, no sharding
    rc = main(["estimate", "--model", "llama-2-70b", "--gpus", "8", "--global-batch", "8", "--seq-len", "4096",
               "-o", str(big)])
    assert rc == 1, rc
    base["big"] = json.loads(big.read_text())
    study = folder / "study.db"
    assert main(["search", *SMALL, "--trials", "5", "--storage", f"sqlite:///{study}", "--study-name", "x"]) == 0
    base["study_db"] = study.read_bytes()
    return base


def all_cases(base: dict) -> list:
    return (reader_cases(base) + field_cases(base) + output_cases(base) + number_cases(base) + name_cases(base)
            + rule_cases(base) + stale_cases(base) + storage_cases(base))


CLEAN = ("clear", "accepted")


FOUND = {  # the defects this set found in the code it was written against (issue 27, session 3)
    "record:zero_tokens:report", "record:plan_id_control:report", "record:nested_plan_bad:report",
    "profile:name_control:estimate", "fields/sp_tp1:compare", "fields/ep_dense:compare",
    "num_params_neg:estimate", "plan_id_control:run-launch", "model_name_empty:export-megatron",
    "profile_missing_file:compare", "profile_builtin_unknown:run-launch", "extra_nan:estimate-o",
    "export:trailing_slash", "calibrate:trailing_slash", "tokens_arabic", "gpus_arabic", "deadline_tiny",
    "steps_arabic", "model-fifo", "profile-name-hostile", "study-name-control", "control:plan_id#0:megatron",
    "exhaustive_with_nsga2",
    # a third census (session 3): silent acceptances and overwritten inputs before their fixes
    "pred_breakdown_not_summing:compare", "pred_fits_contradicting_peak:export-megatron",
    "model_typo_field:estimate", "training_typo_field:run-launch", "cluster_typo_field:compare",
    "named-input:plan-profile:estimate", "named-input:plan-profile:tune-records",
    "named-input:plan-profile-samples:run", "named-input:profile-samples:search",
    "named-input:model-folder-config:search", "control:model.name#6:megatron", "print-launch-out-newline",
    "print-launch-data-dropped", "print-launch-nproc-dropped", "negative-value-as-flag",
}
"""Labels (a class prefix `fields/` where the label alone is ambiguous) run by every cut: each was a
traceback, a hang, a silent acceptance or a wrong cause before its fix."""


def _found(case) -> bool:
    return case.label in FOUND or f"{case.kind}/{case.label}" in FOUND


def sample(cases: list, per_class: int) -> list:
    """The FOUND cases, and at most `per_class` others of each class, evenly spaced through its list
    (the same ones every run): a cheap cut that still reaches every reader, command and target."""
    by_class = collections.defaultdict(list)
    for case in cases:
        by_class[case.kind].append(case)
    picked = [case for case in cases if _found(case)]
    for group in by_class.values():
        step = max(1, -(-len(group) // per_class))
        picked += [case for case in group[::step] if not _found(case)]
    return picked


def census(only: str | None = None, per_class: int | None = None) -> dict:
    import matplotlib
    matplotlib.use("Agg")
    import autoplan.cli.main  # noqa: F401
    import autoplan.planning.planner  # noqa: F401
    import cost_model.learned.calibrate  # noqa: F401
    import optuna  # noqa: F401
    import sklearn.ensemble  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        base = base_documents(Path(tmp))
        cases = [c for c in all_cases(base) if only is None or c.kind == only]
        cases = sample(cases, per_class) if per_class else cases
        by_class = collections.defaultdict(collections.Counter)
        defects, groups = [], collections.defaultdict(dict)
        started = time.monotonic()
        for i, case in enumerate(cases):
            folder = Path(tmp) / f"h{i}"
            folder.mkdir()
            for name in case.files:
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
            if case.label.endswith(":hardlink"):  # a second name of the same inode
                (folder / "p.json").write_text(case.files["p.json"])
                os.link(folder / "p.json", folder / "hard.json")
            cls, rc, err = classify(case, folder)
            damaged = cls.startswith("damaged:")
            cls = cls.removeprefix("damaged:")
            by_class[case.kind]["damaged" if damaged else ("clean" if cls in CLEAN else cls)] += 1
            if damaged or cls not in CLEAN:
                tail = err.strip().splitlines()[-1][:220] if err.strip() else ""
                defects.append(f"[{case.kind}] {'DAMAGED ' if damaged else ''}{cls}: {case.label} (rc {rc}): {tail}")
            if case.group:  # exit 1 is an answer (estimate: does not fit)
                groups[case.group][case.label] = "accepted" if rc in (0, 1) and "Traceback" not in err else "refused"
        for group, answers in sorted(groups.items()):
            if len(set(answers.values())) > 1:
                by_class["consistency"]["inconsistent"] += 1
                defects.append(f"[consistency] inconsistent: {group}: {answers}")
            else:
                by_class["consistency"]["clean"] += 1
        return {"num_cases": len(cases), "by_class": {k: dict(v) for k, v in sorted(by_class.items())},
                "defects": defects, "wall_s": round(time.monotonic() - started, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=None, help="write the full result here")
    p.add_argument("--only", default=None, help="one class: readers, fields, outputs, numbers, names, rules, stale, "
                                                       "storage")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds before a case counts as a hang")
    p.add_argument("--per-class", type=int, default=None, help="run at most this many cases of each class")
    args = p.parse_args(argv)
    global case_timeout_s
    case_timeout_s = args.timeout
    result = census(args.only, args.per_class)
    print(f"{result['num_cases']} cases in {result['wall_s']} s")
    for cls, counts in result["by_class"].items():
        print(f"  {cls:12s} {counts}")
    for line in result["defects"]:
        print("  " + line)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
