"""A census of how autoplan answers bad and edge-case input (issue 15): >= 1,000 generated
invocations over every file format and command, each classified, plus SIGINT at random moments.

    PYTHONPATH=<tree> python benchmarks/bad_input_census.py [--limit N] [--sigint N] [--json out.json]

Run it against any checkout (PYTHONPATH picks the tree): it only calls `autoplan.cli.main.main`
and `python -m autoplan`, so the same script measures the code before and after a change.

Classes of a case meant to be refused ("bad"):
  clear      exit 2, one stderr line, no traceback
  messy      exit 2 but more than one stderr line (still no traceback)
  traceback  a traceback on stderr, or an exit code other than 0/2
  silent     exit 0: the bad input was accepted
  hang       still running after --timeout seconds
A case meant to be accepted ("edge") is `accepted` on exit 0, else one of the classes above, or
  unsafe     exit 0, but the generated script or module does not parse (bash -n, compile()) or a
             model name ran as a command.
`damaged` counts cases whose failure changed an output file that existed before, or that changed an
input, a FIFO, a folder or /dev/null at all (issue 27's classes: outputs, scripts, readers, rules).

Each case runs in a child forked from a parent that has imported the heavy libraries once (so a
case costs milliseconds, not an interpreter start); the child is killed at the timeout.
"""
from __future__ import annotations

import argparse
import collections
import copy
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path

HUGE = 10**30
LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
         "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1024, "max_position_embeddings": 2048}
TINY = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 64}

# value mutations: (label, value or callable(original), expected verdict)
def _mutations(original):
    out = [("missing", _MISSING, "bad"), ("null", None, "bad"), ("string", "abc", "bad"), ("bool", True, "bad"),
           ("list", [1, 2], "bad"), ("object", {"a": 1}, "bad")]
    if isinstance(original, bool):
        return out[:3] + [("int", 3, "bad")]
    if isinstance(original, (int, float)):
        out += [("zero", 0, "bad"), ("negative", -1 * (original or 1), "bad"), ("huge_int", HUGE, "bad"),
                ("huge_float", 1e30, "bad"), ("nan", float("nan"), "bad"), ("inf", float("inf"), "bad")]
        if isinstance(original, int):
            out += [("float_value", original + 0.5, "bad")]
    if isinstance(original, str):
        out = [m for m in out if m[0] != "string"] + [("empty", "", "bad"), ("other_word", "fp33", "bad"),
                                                        ("number", 5, "bad")]
    if isinstance(original, list):
        out = [m for m in out if m[0] != "list"] + [("not_list", "x", "bad"), ("list_of_junk", [1, "x", None], "bad")]
    if isinstance(original, dict):
        out = [m for m in out if m[0] != "object"] + [("empty_object", {}, "bad")]
    return out


_MISSING = object()


def _set(doc, path, value):
    d = doc
    for key in path[:-1]:
        d = d[key]
    if value is _MISSING:
        d.pop(path[-1], None)
    else:
        d[path[-1]] = value


def _get(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def _leaf_paths(doc, prefix=(), skip=()):
    for key, value in doc.items():
        path = prefix + (key,)
        if key in skip:
            continue
        if isinstance(value, dict) and value and len(prefix) < 1:
            yield from _leaf_paths(value, path, skip)
        else:
            yield path


class Case:
    def __init__(self, kind, label, argv, expected, files=None, output=None, nodes=None, keep=(), verify=None):
        self.kind, self.label, self.argv, self.expected = kind, label, argv, expected
        self.files = files or {}      # name -> str | bytes, written into the case folder
        self.output = output          # name of a file that exists before the command and must survive a failure
        self.nodes = nodes or {}      # name -> "fifo" | "folder" | "symlink:<target>", made before the command
        self.keep = keep              # names of files that must be byte-identical afterwards, whatever the exit
        self.verify = verify          # (language, file name): a generated file that must parse ("bash", "python")


def _dump(doc):
    return json.dumps(doc, allow_nan=True)


def generate(base: dict, rng: random.Random) -> list[Case]:
    """Every case. `base` holds valid documents: plan, profile, measurement line, calibration."""
    cases = []
    plan, profile, record, calibration = base["plan"], base["profile"], base["record"], base["calibration"]

    # HF config.json: every field mutated, for estimate (pins) and search (a few trials)
    optional_hf = {"num_key_value_heads", "max_position_embeddings"}
    for key in LLAMA:
        for label, value, verdict in _mutations(LLAMA[key]):
            cfg = dict(LLAMA)
            _set(cfg, (key,), value)
            if label == "missing" and key in optional_hf:
                verdict = "edge"
            for cmd in (["estimate", "--model", "{d}/config.json", "--gpus", "8", "--global-batch", "16",
                         "--seq-len", "1024", "-o", "{d}/out.json"],
                        ["search", "--model", "{d}/config.json", "--gpus", "8", "--global-batch", "16",
                         "--seq-len", "1024", "--trials", "5", "-o", "{d}/out.json"]):
                cases.append(Case("hf_config", f"{cmd[0]} {key}={label}", cmd, verdict,
                                  {"config.json": _dump(cfg)}, "out.json"))
    hf_cross = [
        ("heads do not divide hidden", {"hidden_size": 100, "num_attention_heads": 6, "num_key_value_heads": 6}),
        ("odd head_dim with rope", {"head_dim": 7}),
        ("kv heads do not divide heads", {"num_key_value_heads": 3}),
        ("kv heads above heads", {"num_key_value_heads": 16}),
        ("seq_len above max positions", {"max_position_embeddings": 512}),
        ("head_dim zero", {"head_dim": 0}),
        ("layers 1e30 int", {"num_hidden_layers": HUGE}),
        ("hidden 2**40", {"hidden_size": 2**40, "num_attention_heads": 8}),
        ("vocab 10**12", {"vocab_size": 10**12}),
        ("unknown model_type", {"model_type": "llama9"}),
        ("only two fields", "minimal"),
        ("mixtral top-k above experts", {"model_type": "mixtral", "num_local_experts": 2, "num_experts_per_tok": 4}),
        ("hidden_act gelu for llama", {"hidden_act": "gelu"}),
    ]
    for label, change in hf_cross:
        cfg = {"model_type": "llama", "hidden_size": 96} if change == "minimal" else {**LLAMA, **change}
        for cmd in (["estimate", "--model", "{d}/config.json", "--gpus", "8", "--global-batch", "16",
                     "--seq-len", "1024"],
                    ["search", "--model", "{d}/config.json", "--gpus", "8", "--global-batch", "16",
                     "--seq-len", "1024", "--trials", "5"]):
            cases.append(Case("hf_config", f"{cmd[0]} {label}", cmd, "bad", {"config.json": _dump(cfg)}))

    # plan files: every field of every section, for estimate and export (each target)
    skip = {"prediction", "search", "provenance", "plan_id", "num_params", "schema"}
    optional_plan = {("model", "mlp"), ("model", "norm"), ("model", "position"), ("model", "tied_embeddings"),
                     ("model", "qkv_bias"), ("model", "linear_bias"), ("model", "max_seq_len"),
                     ("model", "head_dim"), ("model", "num_experts"), ("model", "num_experts_per_token"),
                     ("model", "family"), ("training", "dtype"), ("training", "optimizer"),
                     ("cluster", "gpus_per_node"), ("cluster", "profile"), ("parallel", "cp"), ("parallel", "vpp"),
                     ("parallel", "sequence_parallel"), ("parallel", "zero_stage"), ("parallel", "recompute"),
                     ("parallel", "recompute_num_layers"), ("parallel", "ep"), ("alternatives",)}
    commands = [["estimate", "{d}/plan.json", "-o", "{d}/out.json"],
                ["export", "{d}/plan.json", "--to", "megatron", "-o", "{d}/out.json"],
                ["export", "{d}/plan.json", "--to", "torchtitan", "--alternative", "1"],
                ["export", "{d}/plan.json", "--to", "deepspeed"]]
    for path in _leaf_paths(plan, skip=skip):
        for label, value, verdict in _mutations(_get(plan, path)):
            doc = copy.deepcopy(plan)
            _set(doc, path, value)
            if label == "missing" and path in optional_plan:
                verdict = "edge"
            if path == ("model", "name") and label == "other_word":  # "" names no export (issue 27, session 3)
                verdict = "edge"
            if path == ("model", "family") and label in ("empty", "other_word"):
                verdict = "edge"
            if path == ("cluster", "name") and label == "other_word":
                verdict = "edge"
            cmd = commands[rng.randrange(len(commands))] if label not in ("missing", "huge_int") else commands[0]
            cases.append(Case("plan", f"{cmd[0]} {'.'.join(path)}={label}", cmd, verdict,
                              {"plan.json": _dump(doc)}, "out.json" if "-o" in cmd else None))
    plan_cross = [
        ("hidden 8200 with 64 heads", {("model", "hidden_size"): 8200, ("model", "num_heads"): 64,
                                       ("model", "num_kv_heads"): 8}),
        ("seq_len 1e9 above max", {("training", "seq_len"): 10**9}),
        ("seq_len above model max", {("training", "seq_len"): plan["model"]["max_seq_len"] * 2}),
        ("dtype fp32", {("training", "dtype"): "fp32"}),
        ("gpus_per_node 3 with 128 GPUs", {("cluster", "gpus_per_node"): 3, ("cluster", "num_gpus"): 128}),
        ("head_dim 0", {("model", "head_dim"): 0}),
        ("alternatives a string", {("alternatives",): "x"}),
        ("alternatives of numbers", {("alternatives",): [1, 2, 3]}),
        ("alternatives without parallel", {("alternatives",): [{"prediction": {}}]}),
        ("cluster.profile a number", {("cluster", "profile"): 5}),
        ("cluster.profile missing file", {("cluster", "profile"): "/nonexistent/profile.json"}),
        ("cluster.profile unknown builtin", {("cluster", "profile"): "builtin:nope"}),
        ("layers 10**30", {("model", "num_layers"): HUGE}),
        ("vocab 10**12", {("model", "vocab_size"): 10**12}),
        ("kv heads above heads", {("model", "num_kv_heads"): 1024}),
        ("schema v9", {("schema",): "autoplan.plan/v9"}),
        ("schema of a profile", {("schema",): "autoplan.profile/v1"}),
        ("unknown parallel field", {("parallel", "tensor_parallel"): 8}),
        ("prediction a list", {("prediction",): [1]}),
        ("search a string", {("search",): "x"}),
        ("provenance a number", {("provenance",): 3}),
    ]
    for label, changes in plan_cross:
        doc = copy.deepcopy(plan)
        for path, value in changes.items():
            _set(doc, path, value)
        for cmd in commands:
            cases.append(Case("plan", f"{cmd[0]} {label}", cmd, "bad", {"plan.json": _dump(doc)},
                              "out.json" if "-o" in cmd else None))

    # hardware profiles: profile --compare, and estimate --profile
    optional_profile = {("intra_node_latency_s",), ("inter_node_latency_s",), ("num_nodes",), ("device_kind",),
                        ("measured",), ("environment",), ("sources",), ("raw_samples",), ("attention",),
                        ("memory_ops",)}
    for path in _leaf_paths(profile, skip={"schema", "environment", "sources"}):
        for label, value, verdict in _mutations(_get(profile, path)):
            doc = copy.deepcopy(profile)
            _set(doc, path, value)
            if label == "missing" and path in optional_profile:
                verdict = "edge"
            if path in (("name",), ("device_name",), ("device_kind",), ("raw_samples",)) and label in (
                    "empty", "other_word"):
                verdict = "edge"
            cmd = (["profile", "--compare", "{d}/profile.json", "builtin:h100-80gb"] if rng.random() < 0.6 else
                   ["estimate", "--model", "llama-2-7b", "--gpus", "8", "--profile", "{d}/profile.json"])
            cases.append(Case("profile", f"{cmd[0]} {'.'.join(path)}={label}", cmd, verdict,
                              {"profile.json": _dump(doc)}))
    for table in ("matmul", "collectives", "attention", "memory_ops"):
        if not profile.get(table):
            continue
        sample = profile[table][0]
        for key in sample:
            for label, value, verdict in _mutations(sample[key]):
                doc = copy.deepcopy(profile)
                _set(doc[table][0], (key,), value)
                if key == "time_s" and label == "missing":
                    verdict = "edge"
                cmd = ["profile", "--compare", "{d}/profile.json", "builtin:h100-80gb"]
                cases.append(Case("profile", f"profile {table}[0].{key}={label}", cmd, verdict,
                                  {"profile.json": _dump(doc)}))
    for label, change in [("raw_samples ../", {"raw_samples": "../../etc/passwd"}),
                          ("raw_samples absolute", {"raw_samples": "/etc/passwd"}),
                          ("no matmul table", {"matmul": []}), ("no collectives", {"collectives": []}),
                          ("peak of -1", {"peak_flops_per_s": {"bf16": -1.0}}),
                          ("peak a string", {"peak_flops_per_s": {"bf16": "fast"}})]:
        doc = {**profile, **change}
        for cmd in (["profile", "--compare", "{d}/profile.json", "builtin:h100-80gb"],
                    ["calibrate", "--profile", "{d}/profile.json", "-o", "{d}/out.json"]):
            cases.append(Case("profile", f"{cmd[0]} {label}", cmd, "bad", {"profile.json": _dump(doc)},
                              "out.json" if "-o" in cmd else None))

    # measurement records (runs.jsonl): calibrate mostly, report some
    for path in _leaf_paths(record, skip={"schema", "plan", "extra"}):
        for label, value, verdict in _mutations(_get(record, path)):
            doc = copy.deepcopy(record)
            _set(doc, path, value)
            good = _dump(record)
            text = "\n".join([good, _dump(doc)]) + "\n"
            cmd = (["calibrate", "{d}/runs.jsonl", "-o", "{d}/out.json"] if rng.random() < 0.85 else
                   ["report", "{d}/runs.jsonl", "-o", "{d}/report"])
            # calibrate skips malformed lines and says how many; with one good line left it refuses
            # (too few rows), so a bad line reaches exit 2 either way
            cases.append(Case("measurement", f"{cmd[0]} {'.'.join(path)}={label}", cmd, verdict,
                              {"runs.jsonl": text}, "out.json" if "-o" in cmd and cmd[0] == "calibrate" else None))

    # calibration files: report --published --calibration and search --calibration
    for key in calibration:
        if key == "schema":
            continue
        for label, value, verdict in _mutations(calibration[key]):
            doc = copy.deepcopy(calibration)
            _set(doc, (key,), value)
            if key in ("correction", "profile") and label in ("null", "missing"):
                verdict = "edge"
            if key in ("op_models", "training") and label == "missing":
                verdict = "edge"
            cmd = ["search", "--model", "llama-2-7b", "--gpus", "8", "--trials", "5", "--calibration",
                   "{d}/calibration.json", "-o", "{d}/out.json"]
            cases.append(Case("calibration", f"search --calibration {key}={label}", cmd, verdict,
                              {"calibration.json": _dump(doc)}, "out.json"))

    # structure: nesting, size, encodings, non-objects, for every reader
    readers = {
        "hf_config": (["estimate", "--model", "{d}/x.json", "--gpus", "8"], "x.json"),
        "plan": (["estimate", "{d}/x.json"], "x.json"),
        "plan_export": (["export", "{d}/x.json", "--to", "torchtitan"], "x.json"),
        "profile": (["profile", "--compare", "{d}/x.json", "builtin:h100-80gb"], "x.json"),
        "profile_search": (["search", "--model", "llama-2-7b", "--gpus", "8", "--profile", "{d}/x.json"], "x.json"),
        "measurement": (["calibrate", "{d}/x.jsonl", "-o", "{d}/out.json"], "x.jsonl"),
        "calibration": (["search", "--model", "llama-2-7b", "--gpus", "8", "--calibration", "{d}/x.json"], "x.json"),
        "run": (["run", "{d}/x.json", "--device", "cpu"], "x.json"),
    }
    bodies = [("deep list", "[" * 100000), ("deep object", '{"a":' * 50000), ("deep closed", "[" * 5000 + "]" * 5000),
              ("empty", ""), ("binary", bytes(range(128, 256)) * 4), ("number", "5"), ("string", '"x"'),
              ("list", "[]"), ("null", "null"), ("truncated", '{"schema": "autoplan.plan/v1", "model": {'),
              ("huge number", '{"a": ' + "9" * 5000 + "}"), ("nan", "NaN"),
              ("big file", '{"pad": "' + "x" * (80 * 2**20) + '"}')]
    for kind, (cmd, name) in readers.items():
        for label, body in bodies:
            cases.append(Case("structure", f"{kind} {label}", cmd, "bad", {name: body},
                              "out.json" if "-o" in cmd else None))

    # command-line values
    long = "m" * 5000
    for label, argv in [
        ("5000-char --model", ["estimate", "--model", long, "--gpus", "8"]),
        ("5000-char --model search", ["search", "--model", long, "--gpus", "8"]),
        ("5000-char plan path", ["export", long + ".json", "--to", "megatron"]),
        ("5000-char profile path", ["profile", "--compare", long, "builtin:h100-80gb"]),
        ("NUL in model", ["estimate", "--model", "a\x00b", "--gpus", "8"]),
        ("gpus not a whole node", ["search", "--model", "llama-2-7b", "--gpus", "12"]),
        ("seq_len above context", ["estimate", "--model", "llama-2-7b", "--gpus", "8", "--seq-len", "1000000"]),
        ("global batch not multiple", ["estimate", "--model", "llama-2-7b", "--gpus", "8", "--global-batch", "3"]),
        ("tp 3", ["estimate", "--model", "llama-2-7b", "--gpus", "8", "--tp", "3"]),
        ("storage junk", ["search", "--model", "llama-2-7b", "--gpus", "8", "--storage", "junk://"]),
        ("calibrate nothing", ["calibrate", "-o", "{d}/out.json"]),
        ("report nothing", ["report", "-o", "{d}/report"]),
        ("run missing plan", ["run", "{d}/missing.json"]),
        ("export alternative 99", ["export", "{d}/plan.json", "--to", "megatron", "--alternative", "99"]),
        ("export alternative -1", ["export", "{d}/plan.json", "--to", "megatron", "--alternative", "-1"]),
        ("run --resume without checkpoint", ["run", "{d}/plan.json", "--resume", "--checkpoint-dir", "{d}/ck"]),
        ("validate --runs folder", ["validate", "--runs", "{d}"]),
        ("profile --nproc 0", ["profile", "--device", "cpu", "--nproc", "0", "--out", "{d}/p.json"]),
    ]:
        cases.append(Case("argv", label, argv, "bad", {"plan.json": _dump(plan)}))
    cases += _issue27_cases(plan)
    return cases


HOSTILE_NAMES = {"quotes": "it's \"q\" \\ x", "dollar": "$(touch pwned)", "backtick": "`touch pwned`",
                 "triple quotes": 'x"""; import os #', "unicode": "模型-é ✓"}
CONTROL_NAMES = {"newline": "a\ntouch pwned", "tab": "a\tb", "escape": "a\x1bb", "line separator": "a\u2028b"}


def _issue27_cases(plan: dict) -> list:
    """Issue 27's classes: outputs (devices, FIFOs, folders, inputs as outputs, stdout, symlinks),
    generated scripts for hostile names, the same plan file read by every command, rules and numbers."""
    cases = []
    small = ["--model", "llama-2-7b", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048"]
    writers = {
        "search": ["search", *small, "--trials", "5", "-o", "{out}"],
        "estimate": ["estimate", "{d}/plan.json", "-o", "{out}"],
        "memory": ["memory", *small, "--tp", "2", "--zero", "1", "-o", "{out}"],
        "export": ["export", "{d}/plan.json", "--to", "megatron", "-o", "{out}"],
        "export --launch": ["export", "{d}/plan.json", "--to", "torchtitan", "--launch", "slurm", "-o", "{out}"],
        "calibrate": ["calibrate", "{d}/runs.jsonl", "-o", "{out}"],
        "tune": ["tune", "{d}/plan.json", "--device", "cpu", "-o", "{out}"],
        "tune --records": ["tune", "{d}/plan.json", "--device", "cpu", "--records", "{out}"],
        "run": ["run", "{d}/plan.json", "--device", "cpu", "-o", "{out}"],
        "profile": ["profile", "--device", "cpu", "--quick", "-o", "{out}"],
        "cluster": ["cluster", "--model", "llama-2-7b", "--train-tokens", "2T", "--deadline-days", "60", "-o", "{out}"],
    }
    targets = {"fifo": ("{d}/pipe.md", {"pipe.md": "fifo"}), "folder": ("{d}/sub", {"sub": "folder"}),
               "/dev/null": ("/dev/null", {}), "the plan input": ("{d}/plan.json", {}),
               "a symlink to the input": ("{d}/link.json", {"link.json": "symlink:plan.json"}),
               "a symlink loop": ("{d}/loop.json", {"loop.json": "symlink:loop.json"})}
    files = {"plan.json": _dump(plan), "runs.jsonl": _dump({"schema": "autoplan.measurement/v1"}) + "\n"}
    for command, argv in writers.items():
        for label, (out, nodes) in targets.items():
            if "plan.json" not in " ".join(argv) and "input" in label:
                continue
            cases.append(Case("outputs", f"{command} -o {label}", [a.replace("{out}", out) for a in argv], "bad",
                              files, nodes=nodes, keep=("plan.json",)))
    for command in ("estimate", "export", "memory"):
        cases.append(Case("outputs", f"{command} -o -", [a.replace("{out}", "-") for a in writers[command]], "edge",
                          files, keep=("plan.json",)))
        cases.append(Case("outputs", f"{command} -o a symlink to a new file",
                          [a.replace("{out}", "{d}/link.md") for a in writers[command]], "edge", files,
                          nodes={"link.md": "symlink:target.md"}, keep=("plan.json",)))

    # generated scripts and modules: the model name of a plan file, hostile
    exports = [(["export", "{d}/plan.json", "--to", "megatron", "--launch", "torchrun", "-o", "{d}/x.sh"], "bash"),
               (["export", "{d}/plan.json", "--to", "torchtitan", "-o", "{d}/x.py"], "python"),
               (["export", "{d}/plan.json", "--to", "torchtitan", "--launch", "slurm", "-o", "{d}/x.sh"], "bash"),
               (["export", "{d}/plan.json", "--to", "deepspeed", "--launch", "torchrun", "-o", "{d}/x.sh"], "bash"),
               (["run", "{d}/plan.json", "--print-launch", "torchrun"], "bash-stdout")]
    for names, verdict in ((HOSTILE_NAMES, "edge"), (CONTROL_NAMES, "bad")):
        for label, name in names.items():
            doc = copy.deepcopy(plan)
            doc["model"]["name"] = name
            for argv, language in exports:
                target = argv[-1].rsplit("/", 1)[-1] if language != "bash-stdout" else "_stdout"
                cases.append(Case("scripts", f"{argv[0]} {argv[3] if argv[0] == 'export' else 'launch'} name={label}",
                                  argv, verdict, {"plan.json": _dump(doc)}, keep=("plan.json",),
                                  verify=(language.removesuffix("-stdout"), target)))

    # one reader: the same edited plan file, for every command that reads plans
    readers = [["estimate", "{d}/plan.json"], ["export", "{d}/plan.json", "--to", "megatron"],
               ["compare", "{d}/plan.json", "{d}/good.json"], ["tune", "{d}/plan.json", "--nproc", "999"],
               ["run", "{d}/plan.json", "--print-launch", "slurm"]]
    edits = [("degrees off the GPU count", "bad", lambda d: d["parallel"].update(dp=d["parallel"]["dp"] * 2)),
             ("tokens/s per GPU 0", "bad", lambda d: d["prediction"].update(tokens_per_s_per_gpu=0)),
             ("MFU 5.0", "bad", lambda d: d["prediction"].update(mfu=5.0)),
             ("no breakdowns", "edge", lambda d: [d["prediction"].pop(k) for k in
                                                  ("time_breakdown_s", "memory_breakdown_bytes")]),
             ("empty prediction", "edge", lambda d: d.update(prediction={})),
             ("no prediction", "edge", lambda d: d.pop("prediction")),
             ("does not fit", "bad", lambda d: d["prediction"].update(fits=False))]
    for label, verdict, edit in edits:
        doc = copy.deepcopy(plan)
        edit(doc)
        for argv in readers:
            expected = verdict
            if argv[0] in ("tune", "run") and verdict == "edge":
                expected = "bad" if argv[0] == "tune" else "edge"  # tune --nproc 999 is refused once read
            if label == "does not fit" and argv[0] in ("estimate", "compare", "run"):
                continue  # they answer about such a plan; export and tune refuse it without --force
            cases.append(Case("readers", f"{argv[0]} {label}", argv, expected,
                              {"plan.json": _dump(doc), "good.json": _dump(plan)}, keep=("plan.json", "good.json")))

    # rules and numbers
    for label, argv in [
        ("deepspeed MoE ZeRO-3", ["estimate", "--model", "mixtral-8x7b", "--gpus", "64", "--framework", "deepspeed",
                                  "--zero", "3", "--ep", "8"]),
        ("--budget 1,5M", ["cluster", "--model", "llama-2-7b", "--train-tokens", "2T", "--budget", "1,5M",
                           "--gpu-hour-price", "2"]),
        ("--budget 1_5M", ["cluster", "--model", "llama-2-7b", "--train-tokens", "2T", "--budget", "1_5M",
                           "--gpu-hour-price", "2"]),
        ("--train-tokens 1e300", ["search", *small, "--train-tokens", "1e300"]),
        ("--gpu-hour-price 1e308", ["estimate", *small, "--train-tokens", "2T", "--gpu-hour-price", "1e308"]),
        ("--deadline-days 1e300", ["cluster", "--model", "llama-2-7b", "--train-tokens", "2T", "--deadline-days",
                                   "1e300"]),
        ("cluster --seq-len above context", ["cluster", "--model", "llama-2-7b", "--train-tokens", "2T",
                                             "--deadline-days", "30", "--seq-len", "32768"]),
        ("export not fitting", ["export", "{d}/nofit.json", "--to", "megatron"]),
    ]:
        nofit = copy.deepcopy(plan)
        nofit["prediction"]["fits"] = False
        cases.append(Case("rules", label, argv, "bad", {"nofit.json": _dump(nofit)}))
    return cases


def _make_nodes(case: Case, folder: Path) -> None:
    for name, kind in case.nodes.items():
        if kind == "fifo":
            os.mkfifo(folder / name)
        elif kind == "folder":
            (folder / name).mkdir()
        elif kind.startswith("symlink:"):
            (folder / name).symlink_to(kind.split(":", 1)[1])


def _verify(case: Case, folder: Path) -> bool:
    """A generated file parses in its language and no name ran as a command (no pwned file)."""
    language, name = case.verify
    text = (folder / name).read_text(errors="replace")
    if language == "bash":
        if subprocess.run(["bash", "-n", str(folder / name)], capture_output=True).returncode != 0:
            return False
    else:
        try:
            compile(text, name, "exec")
        except SyntaxError:
            return False
    return not (folder / "pwned").exists()


def _node_damaged() -> bool:
    """/dev/null must stay a character device (as root a rename would make it a regular file)."""
    import stat

    return not stat.S_ISCHR(os.stat("/dev/null").st_mode)


# -- running ---------------------------------------------------------------------------------------
def _run_forked(case: Case, folder: Path, timeout_s: float) -> tuple[str, int, str]:
    for name, body in case.files.items():
        (folder / name).write_bytes(body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass"))
    _make_nodes(case, folder)
    kept = {name: (folder / name).read_bytes() for name in case.keep}
    if case.output:
        (folder / case.output).write_text("sentinel\n")
    argv = [a.replace("{d}", str(folder)) for a in case.argv]
    out_path, err_path = folder / "_stdout", folder / "_stderr"
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.chdir(folder)
            fd_out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            fd_err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd_out, 1)
            os.dup2(fd_err, 2)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            from autoplan.cli.main import main
            try:
                rc = main(argv)
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # noqa: BLE001 - what a real process would print
                traceback.print_exc()
                rc = 1
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            rc = 99
        os._exit(rc if isinstance(rc, int) and 0 <= rc < 256 else 1)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hang", -9, ""
        time.sleep(0.005)
    rc = os.waitstatus_to_exitcode(status)
    err = err_path.read_text(errors="replace")
    damaged = bool(case.output) and rc != 0 and not _answered(case, rc) and \
        (folder / case.output).read_text(errors="replace") != "sentinel\n"
    damaged = damaged or any((folder / name).read_bytes() != body for name, body in kept.items()) or _node_damaged()
    for name, kind in case.nodes.items():  # a FIFO or folder replaced by a file
        damaged = damaged or (kind == "fifo" and not (folder / name).is_fifo()) or (
            kind == "folder" and not (folder / name).is_dir())
    cls = classify(case, rc, err)
    if cls == "accepted" and case.verify is not None and not _verify(case, folder):
        cls = "unsafe"
    return ("damaged:" if damaged else "") + cls, rc, err


def _answered(case: Case, rc: int) -> bool:
    """`estimate` exits 1 to answer "does not fit" (docs/bad_input.md): an answer, with its -o written."""
    return rc == 1 and case.argv[0] == "estimate"


def classify(case: Case, rc: int, err: str) -> str:
    if _answered(case, rc):
        rc = 0
    if "Traceback (most recent call last)" in err or rc not in (0, 2):
        return "traceback"
    if rc == 0:
        return "accepted" if case.expected == "edge" else "silent"
    return "clear" if len(err.strip().splitlines()) == 1 else "messy"


def _base_documents(folder: Path) -> dict:
    """A valid plan (with alternatives), a measured-style profile, a measurement line, a calibration."""
    from autoplan.cli.main import main

    plan_path = folder / "base_plan.json"
    assert main(["search", "--model", "llama-2-7b", "--gpus", "16", "--global-batch", "64", "--seq-len", "2048",
                 "--trials", "40", "-o", str(plan_path)]) == 0
    plan = json.loads(plan_path.read_text())
    from cost_model import builtin_profile
    profile = builtin_profile("h100-80gb").to_dict()
    profile.setdefault("matmul", [])
    if not profile["matmul"]:
        profile["matmul"] = [{"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "flops_per_s": 6e14}]
    if not profile["collectives"]:
        profile["collectives"] = [{"op": "all_reduce", "scope": "intra_node", "group_size": 8,
                                   "message_bytes": 2**26, "bus_bandwidth_bytes_per_s": 3.5e11, "time_s": 3e-4}]
    profile["raw_samples"] = "samples.csv"
    record = {"schema": "autoplan.measurement/v1", "plan_id": plan["plan_id"], "plan": plan,
              "prediction": plan["prediction"], "backend": "torch", "status": "ok",
              "step_times_s": [1.0, 1.1, 1.05], "losses": [10.0, 9.5, 9.0, 8.7], "peak_memory_bytes": 2**34,
              "environment": {"device": "cuda"}, "num_warmup_steps": 1, "tokens_per_step": 131072,
              "num_gpus": 16, "peak_flops_per_s": 9.89e14, "error": ""}
    cal_path = folder / "base_cal.json"
    assert main(["calibrate", "--published", "--kind", "ridge", "-o", str(cal_path)]) == 0
    calibration = json.loads(cal_path.read_text())
    return {"plan": plan, "profile": profile, "record": record, "calibration": calibration}


def census(limit: int | None, timeout_s: float, seed: int) -> dict:
    # warm the parent: every child inherits these imports
    import matplotlib
    matplotlib.use("Agg")
    import autoplan.cli.main  # noqa: F401
    import autoplan.planning.planner  # noqa: F401
    import cost_model.learned.calibrate  # noqa: F401
    import optuna  # noqa: F401
    import sklearn.ensemble  # noqa: F401

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="census-") as tmp:
        base = _base_documents(Path(tmp))
        cases = generate(base, rng)
        if limit:
            cases = rng.sample(cases, min(limit, len(cases)))
        counts = collections.Counter()
        by_kind = collections.defaultdict(collections.Counter)
        examples = collections.defaultdict(list)
        started = time.monotonic()
        for i, case in enumerate(cases):
            folder = Path(tmp) / f"c{i}"
            folder.mkdir()
            cls, rc, err = _run_forked(case, folder, timeout_s)
            damaged = cls.startswith("damaged:")
            cls = cls.removeprefix("damaged:")
            counts[cls] += 1
            counts["damaged"] += damaged
            by_kind[case.kind][cls] += 1
            if (cls in ("traceback", "silent", "hang", "messy", "unsafe") or damaged) and len(examples[cls]) < 400:
                tail = err.strip().splitlines()[-1][:200] if err.strip() else ""
                examples[cls].append(f"[{case.kind}] {case.label} (rc {rc}): {tail}")
            if (i + 1) % 100 == 0:
                print(f"  {i + 1}/{len(cases)} cases, {time.monotonic() - started:.0f} s", file=sys.stderr)
        return {"num_cases": len(cases), "counts": dict(counts), "by_kind": {k: dict(v) for k, v in by_kind.items()},
                "examples": dict(examples), "wall_s": round(time.monotonic() - started, 1)}


# -- SIGINT ---------------------------------------------------------------------------------------
def _sigint_commands(folder: Path) -> dict:
    py = [sys.executable, "-m", "autoplan"]
    d = str(folder)
    (folder / "tiny.json").write_text(json.dumps(TINY))
    subprocess.run(py + ["search", "--model", f"{d}/tiny.json", "--gpus", "2", "--global-batch", "4", "--seq-len", "32",
                         "--trials", "10", "-o", f"{d}/tiny_plan.json"], check=True, capture_output=True)
    subprocess.run(py + ["search", "--model", "llama-2-7b", "--gpus", "16", "--trials", "30", "-o", f"{d}/plan.json"],
                   check=True, capture_output=True)
    return {
        "search": (["search", "--model", "llama-3-70b", "--gpus", "256", "--trials", "400", "--storage",
                    f"sqlite:///{d}/study.db", "-o", f"{d}/out.json"], "out.json"),
        "estimate": (["estimate", "--model", "llama-2-70b", "--gpus", "64", "--tp", "8", "--pp", "2", "-o",
                      f"{d}/out.json"], "out.json"),
        "export": (["export", f"{d}/plan.json", "--to", "torchtitan", "-o", f"{d}/out.toml"], "out.toml"),
        "calibrate": (["calibrate", "--published", "--kind", "ridge", "-o", f"{d}/out.json"], "out.json"),
        "validate": (["validate"], None),
        "report": (["report", "--published", "-o", f"{d}/report"], None),
        "profile": (["profile", "--device", "cpu", "--nproc", "2", "--quick", "--out", f"{d}/out.json"], "out.json"),
        "run": (["run", f"{d}/tiny_plan.json", "--device", "cpu", "--steps", "30", "--out", f"{d}/runs.jsonl"],
                "runs.jsonl"),
        "models": (["models"], None),
    }


SIGINT_DELAY_SCALE = {"estimate": 0.4, "export": 0.3, "models": 0.3, "report": 3.0, "profile": 4.0, "run": 4.0}
"""Per command, the delay range relative to --sigint-max-delay: roughly how long the command takes,
so that the signal lands while it runs rather than after it finished."""


def _orphans(tag: str) -> int:
    count = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if f"AUTOPLAN_CENSUS_TAG={tag}".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                count += 1
        except OSError:
            pass
    return count


def sigint_census(trials: int, seed: int, max_delay_s: float) -> dict:
    rng = random.Random(seed)
    results = {}
    with tempfile.TemporaryDirectory(prefix="census-int-") as tmp:
        commands = _sigint_commands(Path(tmp))
        for name, (argv, output) in commands.items():
            tally = collections.Counter()
            for _ in range(trials):
                out = Path(tmp) / output if output else None
                if out is not None:
                    out.write_text("sentinel\n")
                tag = uuid.uuid4().hex
                env = {**os.environ, "AUTOPLAN_CENSUS_TAG": tag}
                # SIGINT back to its default in the child: a census started in the background
                # (nohup, `&`) has it ignored, and Python would then never see the Ctrl-C.
                proc = subprocess.Popen([sys.executable, "-m", "autoplan", *argv], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, env=env, cwd=tmp,
                                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
                time.sleep(rng.uniform(0.05, max_delay_s * SIGINT_DELAY_SCALE.get(name, 1.0)))
                proc.send_signal(signal.SIGINT)
                try:
                    _, err = proc.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    _, err = proc.communicate()
                    tally["hang"] += 1
                    continue
                err = err.decode(errors="replace")
                rc = proc.returncode
                time.sleep(0.5)
                orphans = _orphans(tag)
                if orphans:
                    tally["orphans"] += 1
                    for pid in os.listdir("/proc"):
                        if pid.isdigit():
                            try:
                                if f"AUTOPLAN_CENSUS_TAG={tag}".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                                    os.kill(int(pid), signal.SIGKILL)
                            except OSError:
                                pass
                changed = out is not None and out.exists() and rc != 0 and out.read_text(errors="replace") != "sentinel\n"
                if changed and name != "run":  # run appends: a finished record is allowed
                    tally["output_changed"] += 1
                if rc == 0:
                    tally["finished_first"] += 1
                elif "Traceback" in err or rc not in (130, 2):
                    tally["traceback_or_other"] += 1
                elif rc == 130 and len(err.strip().splitlines()) >= 1 and err.strip().splitlines()[-1].endswith(
                        "interrupted") and "Traceback" not in err:
                    tally["clean_130"] += 1
                else:
                    tally["other"] += 1
            results[name] = dict(tally)
            print(f"  SIGINT {name}: {dict(tally)}", file=sys.stderr)
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=int, default=None, help="run a random sample of this many cases")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds before a case counts as a hang")
    p.add_argument("--sigint", type=int, default=0, help="SIGINT trials per command (0: skip)")
    p.add_argument("--sigint-max-delay", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--json", default=None, help="write the full result here")
    p.add_argument("--no-census", action="store_true", help="only the SIGINT trials")
    args = p.parse_args(argv)
    result = {}
    if not args.no_census:
        result["census"] = c = census(args.limit, args.timeout, args.seed)
        print(f"{c['num_cases']} cases in {c['wall_s']} s: {c['counts']}")
        for kind, counts in sorted(c["by_kind"].items()):
            print(f"  {kind:12s} {counts}")
    if args.sigint:
        result["sigint"] = sigint_census(args.sigint, args.seed, args.sigint_max_delay)
        for name, tally in result["sigint"].items():
            print(f"  SIGINT {name:10s} {tally}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
