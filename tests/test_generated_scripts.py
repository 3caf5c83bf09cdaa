"""Issue 27: every script, module and config autoplan generates stays what it claims to be whatever the
model is called. The model name is a config.json path (`--model DIR/config.json`), so a hostile folder
name reaches every generator through the real CLI: each launch script passes `bash -n` and, run with a
stub torchrun, starts no command the name spells; each Python module compiles; TOML and JSON parse
and hold the name unchanged. A name with a control character is refused in one line, everywhere."""
import ast
import json
import os
import re
import shutil
import subprocess
import tomllib

import pytest

from tests.cli_run import run_cli

TINY = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 192, "num_attention_heads": 6,
        "num_key_value_heads": 2, "intermediate_size": 520, "vocab_size": 1000, "max_position_embeddings": 512}
"""A llama shape no framework ships: torchtitan's exports build it under the plan's model name."""
HOSTILE = {
    "quotes": "it's \"quoted\" \\ back\\slash",
    "command": "$(touch pwned_dollar)",
    "backticks": "`touch pwned_tick`",
    "triple quotes": 'x"""; import os; os.system("touch pwned_py") #',
    "heredoc end": "AUTOPLAN_EOF",
    "unicode": "模型-ünï ✓ é",
    "shell words": "a b;touch pwned_semi|&",
}
CONTROL = {"newline": "line1\ntouch pwned_nl", "tab": "a\tb", "escape": "a\x1b[2Jb", "nel": "a\x85b",
           "line separator": "a\u2028b"}
EXPORTS = [("megatron", ".sh"), ("torchtitan", ".py"), ("torchtitan-0.2", ".toml"), ("deepspeed", ".json")]
BASH = shutil.which("bash")


def run(capsys, *argv):
    return run_cli(capsys, *argv)


def make_plan(capsys, folder, name):
    """A plan file whose model name is `folder/name/config.json`, made by `estimate` with pins."""
    model_dir = folder / name
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(TINY))
    plan = folder / "plan.json"
    code, _, err = run(capsys, "estimate", "--model", model_dir / "config.json", "--gpus", "8", "--tp", "2",
                       "--zero", "1", "--global-batch", "16", "--seq-len", "256", "-o", plan)
    assert code == 0, err
    assert name in json.loads(plan.read_text())["model"]["name"]
    return plan


def check_bash(path, folder, name):
    """`bash -n`, then a real run with every placeholder set and torchrun a stub: the name must not
    have become a command (no pwned_* file appears) and every embedded file must parse."""
    if BASH is None:
        pytest.skip("bash is not installed")
    text = path.read_text()
    checked = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    if "srun" in text:  # the sbatch flavour needs a Slurm allocation; syntax is what is checked
        return
    stub = folder / "bin"
    stub.mkdir(parents=True)
    (stub / "torchrun").write_text("#!/bin/sh\nexit 0\n")
    (stub / "torchrun").chmod(0o755)
    env = {"PATH": f"{stub}:{os.environ['PATH']}", "RUN_DIR": str(folder / "run"), "HOME": str(folder)}
    env.update({name: "synthetic" for name in re.findall(r'^(\w+)="\$\{\1:-FILL_ME\}"', text, re.M)})
    done = subprocess.run([BASH, str(path)], cwd=folder, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not list(folder.rglob("pwned*")), "a model name ran as a command"
    for written in (folder / "run").iterdir():
        check_file(written, name)


def check_file(path, name=None):
    """Parses in its language; a Python module also holds `name` whole inside one string literal
    (a name that closed its literal early could compile and still run code of its own)."""
    text = path.read_text()
    if path.suffix == ".py":
        tree = ast.parse(compile(text, str(path), "exec", ast.PyCF_ONLY_AST))
        strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        assert name is None or name not in text or any(name in s for s in strings), "a name escaped its literal"
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import) and n.names[0].name == "os"]
    elif path.suffix == ".toml":
        tomllib.loads(text)
    elif path.suffix == ".json":
        json.loads(text)


@pytest.mark.parametrize("label", list(HOSTILE))
def test_every_generated_file_quotes_a_hostile_name(capsys, tmp_path, label):
    name = HOSTILE[label]
    plan = make_plan(capsys, tmp_path, name)
    for target, suffix in EXPORTS:
        out = tmp_path / f"export{suffix}"
        code, _, err = run(capsys, "export", plan, "--to", target, "-o", out)
        assert code == 0, err
        check_file(out, name)
        if suffix == ".toml":  # the flavor is the model's name: it must come back unchanged
            assert tomllib.loads(out.read_text())["model"]["flavor"].endswith(f"{name}/config.json")
        if suffix == ".json":
            assert name not in out.read_text() or json.loads(out.read_text())
        for launcher in ("torchrun", "slurm"):
            script = tmp_path / f"{target}-{launcher}.sh"
            code, _, err = run(capsys, "export", plan, "--to", target, "--launch", launcher, "-o", script)
            assert code == 0, err
            check_bash(script, tmp_path / f"{target}-{launcher}", name)
    for launcher in ("torchrun", "slurm"):
        code, out, err = run(capsys, "run", plan, "--print-launch", launcher)
        assert code == 0, err
        script = tmp_path / f"executor-{launcher}.sh"
        script.write_text(out)
        check_bash(script, tmp_path / f"executor-{launcher}", name)


@pytest.mark.parametrize("label", list(CONTROL))
def test_a_name_with_a_control_character_is_refused_in_one_line(capsys, tmp_path, label):
    name = CONTROL[label]
    # the model read from such a folder: refused by every command that reads it
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    code, _, err = run(capsys, "estimate", "--model", folder / "config.json", "--gpus", "8")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "control characters" in err, err
    # a plan file edited to hold it: refused by every reader, and never written into a script
    good = make_plan(capsys, tmp_path, "tiny")
    doc = json.loads(good.read_text())
    doc["model"]["name"] = name
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    before = bad.read_bytes()
    for argv in (["export", bad, "--to", "megatron", "--launch", "torchrun", "-o", tmp_path / "x.sh"],
                 ["export", bad, "--to", "torchtitan", "-o", tmp_path / "x.py"],
                 ["run", bad, "--print-launch", "slurm"], ["estimate", bad], ["compare", bad, good]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1, (argv, err)
        assert "model.name" in err and "control characters" in err, err
        assert out == ""
    assert bad.read_bytes() == before
    assert not (tmp_path / "x.sh").exists() and not (tmp_path / "x.py").exists()


def test_check_names_guards_documents_built_in_memory():
    from autoplan.exporters.common import check_names
    from autoplan.specs import AutoplanError, ClusterSpec, ModelSpec, ParallelPlan, PlanDocument, TrainingSpec

    model = ModelSpec(name="ok", num_layers=4, hidden_size=192, num_heads=6, num_kv_heads=2, ffn_hidden_size=520,
                      vocab_size=1000)
    doc = PlanDocument(model=model, training=TrainingSpec(global_batch_size=8, seq_len=128),
                       cluster=ClusterSpec(name="h100-80gb", num_gpus=8),
                       parallel=ParallelPlan(dp=8, tp=1, pp=1, micro_batch_size=1, num_microbatches=1))
    check_names(doc)
    doc.cluster = ClusterSpec(name="h100\nrm -rf ~", num_gpus=8)
    with pytest.raises(AutoplanError, match="cluster.name"):
        check_names(doc)


def test_a_launch_script_never_writes_through_what_is_already_in_its_folder(capsys, tmp_path):
    """Issue 53: the script used to `cat >` its plan.json over whatever had that name -- through a
    symbolic link, into the link's target. It now writes beside the name and renames onto it; a file
    that is not the one it writes (or a link) stops it, exit 2, one line, nothing changed."""
    if BASH is None:
        pytest.skip("bash is not installed")
    plan = make_plan(capsys, tmp_path, "tiny")
    code, out, err = run(capsys, "run", plan, "--print-launch", "torchrun")
    assert code == 0, err
    script = tmp_path / "run.sh"
    script.write_text(out)
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "torchrun").write_text("#!/bin/sh\nexit 0\n")
    (stub / "torchrun").chmod(0o755)
    env = {"PATH": f"{stub}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    env.update({name: "synthetic" for name in re.findall(r'^(\w+)="\$\{\1:-FILL_ME\}"', out, re.M)})

    def launch(run_dir):
        return subprocess.run([BASH, str(script)], env={**env, "RUN_DIR": str(run_dir)}, capture_output=True,
                              text=True, timeout=60)

    fresh = tmp_path / "fresh"
    assert launch(fresh).returncode == 0 and launch(fresh).returncode == 0  # its own file again: fine
    assert json.loads((fresh / "plan.json").read_text())["plan_id"] == json.loads(plan.read_text())["plan_id"]
    elsewhere = tmp_path / "mine.json"
    elsewhere.write_text("my own file\n")
    for kind in ("symlink", "other file"):
        folder = tmp_path / kind.replace(" ", "_")
        folder.mkdir()
        if kind == "symlink":
            (folder / "plan.json").symlink_to(elsewhere)
        else:
            (folder / "plan.json").write_text("another plan\n")
        before = (folder / "plan.json").read_text()
        done = launch(folder)
        assert done.returncode == 2 and "already exists and is not the file this script writes" in done.stderr, kind
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert (folder / "plan.json").read_text() == before and elsewhere.read_text() == "my own file\n"
        assert sorted(p.name for p in folder.iterdir()) == ["plan.json"], "a temporary file was left"
