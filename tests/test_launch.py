"""Launch scripts (`autoplan export --launch`, `autoplan run --print-launch`): bash accepts them, they
refuse to start while a placeholder is left, and once filled they start torchrun (a stand-in on
PATH that records its arguments) with the node and GPU counts of the plan."""
import json
import os
import shutil
import subprocess

import pytest

from autoplan.cli import main as cli_main
from autoplan.exporters import export_launch
from tests.export_plans import PLANS

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")


def _stubs(tmp_path):
    """torchrun/srun/scontrol stand-ins: torchrun writes its argv (one per line) to $TORCHRUN_LOG."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "torchrun").write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$TORCHRUN_LOG"\n')
    (bin_dir / "srun").write_text('#!/usr/bin/env bash\nwhile [[ "$1" == --* ]]; do shift 2; done\nexec "$@"\n')
    (bin_dir / "scontrol").write_text('#!/usr/bin/env bash\necho node-001\necho node-002\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def _run(script_text, tmp_path, **env):
    (tmp_path / "torchrun.args").unlink(missing_ok=True)
    script = tmp_path / "train.sh"
    script.write_text(script_text)
    run_dir = tmp_path / "run"
    full_env = {"PATH": f"{_stubs(tmp_path)}:{os.environ['PATH']}", "RUN_DIR": str(run_dir),
                "TORCHRUN_LOG": str(tmp_path / "torchrun.args"), **env}
    result = subprocess.run([BASH, str(script)], env=full_env, capture_output=True, text=True, timeout=60)
    args = (tmp_path / "torchrun.args").read_text().splitlines() if (tmp_path / "torchrun.args").exists() else []
    return result, args, run_dir


FILLED = {"MEGATRON_LM": "/opt/Megatron-LM", "MEGATRON_DEEPSPEED": "/opt/Megatron-DeepSpeed",
          "DATA_PATH": "/data/tokens_text_document", "TOKENIZER_MODEL": "meta-llama/Llama-3.1-8B",
          "TRAIN_ITERS": "100", "LR": "3e-4", "TOKENIZER_PATH": "/tok", "DATASET": "c4", "TRAIN_STEPS": "100",
          "MASTER_ADDR": "node-001"}


@pytest.mark.parametrize("target,plan", [("megatron", "uneven 405b (first/last lighter)"),
                                         ("torchtitan", "zero2 tp no-sp"), ("torchtitan-0.2", "zero2 tp no-sp"),
                                         ("deepspeed", "zero1 pp 1f1b partial recompute")])
@pytest.mark.parametrize("launcher", ["torchrun", "slurm"])
def test_launch_script_refuses_placeholders_then_starts_torchrun(target, plan, launcher, tmp_path):
    doc = PLANS[plan]
    if target == "torchtitan-0.2":  # 0.2.0 is always sequence-parallel (noted): use sp for this one
        doc = type(doc)(model=doc.model, training=doc.training, cluster=doc.cluster,
                        parallel=doc.parallel.replace(sequence_parallel=True))
    text = export_launch(doc, target, launcher).text
    assert subprocess.run([BASH, "-n"], input=text, text=True).returncode == 0
    slurm = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node-[001-002]"} if launcher == "slurm" else {}

    result, args, _ = _run(text, tmp_path, **slurm)
    assert result.returncode == 2 and not args
    assert "is still the placeholder FILL_ME: set it" in result.stderr

    result, args, run_dir = _run(text, tmp_path, **FILLED, **slurm)
    assert result.returncode == 0, result.stderr
    nodes = doc.cluster.num_nodes
    assert args[args.index("--nnodes") + 1] == str(nodes) and args[args.index("--nproc-per-node") + 1] == "8"
    if nodes > 1:
        endpoint = args[args.index("--rdzv-endpoint") + 1]
        assert endpoint == "node-001:29500"
    assert "FILL_ME" not in " ".join(args)
    if target == "megatron":
        assert "/opt/Megatron-LM/pretrain_gpt.py" in args and "/data/tokens_text_document" in args
    elif target == "torchtitan":
        assert args[args.index("--module") + 1] == "autoplan_job" and args[args.index("--config") + 1] == "autoplan_job"
        assert (run_dir / "autoplan_job.py").read_text().startswith("# torchtitan 0.3.0")
        assert args[args.index("--dataloader.dataset") + 1] == "c4" and args[args.index("--hf_assets_path") + 1] == "/tok"
    elif target == "torchtitan-0.2":
        assert args[args.index("--job.config_file") + 1] == f"{run_dir}/job.toml" and (run_dir / "job.toml").exists()
        assert args[args.index("--training.dataset") + 1] == "c4"
    else:
        config = json.loads((run_dir / "ds_config.json").read_text())
        assert config["train_batch_size"] == doc.training.global_batch_size
        assert args[args.index("--deepspeed_config") + 1] == f"{run_dir}/ds_config.json"


def test_a_launched_megatron_command_is_accepted_by_megatron(tmp_path):
    """What the filled script hands torchrun passes the same acceptance as the plain export."""
    fa = pytest.importorskip("tests.framework_acceptance")
    pytest.importorskip("megatron.core")
    doc = PLANS["cp (long context)"]
    result, args, _ = _run(export_launch(doc, "megatron", "torchrun").text, tmp_path, **FILLED)
    assert result.returncode == 0, result.stderr
    entry = args.index("/opt/Megatron-LM/pretrain_gpt.py")
    command = "export CUDA_DEVICE_MAX_CONNECTIONS=1\ntorchrun pretrain_gpt.py " + " ".join(args[entry + 1:])
    assert fa.megatron_accepts(command, doc.cluster.num_gpus) == ""


def test_torchtitan_launch_registers_a_flavor_torchtitan_lacks(tmp_path):
    doc = PLANS["zero2 tp no-sp"]
    doc = type(doc)(model=doc.model, training=doc.training, cluster=doc.cluster,
                    parallel=doc.parallel.replace(sequence_parallel=True))
    result, _, run_dir = _run(export_launch(doc, "torchtitan-0.2", "torchrun").text, tmp_path, **FILLED)
    assert result.returncode == 0, result.stderr
    module = (run_dir / "autoplan_flavor.py").read_text()
    assert "llama3_args['qwen2.5-7b'] = TransformerModelArgs(" in module and "multiple_of=18944" in module
    assert 'custom_import = "autoplan_flavor"' in (run_dir / "job.toml").read_text()


@pytest.fixture
def cli(monkeypatch):
    def run(*argv):
        return cli_main.main(list(argv))
    return run


def test_run_print_launch_writes_the_executor_script(cli, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    PLANS["fsdp (zero3, selective)"].save(plan)
    assert cli("run", str(plan), "--print-launch", "slurm", "--steps", "20", "--out", "runs.jsonl") == 0
    text = capsys.readouterr().out
    assert "#SBATCH --nodes=8" in text and "-m executor" in text and "--device cuda" in text
    result, args, run_dir = _run(text, tmp_path, DATA="synthetic", SLURM_JOB_ID="7", SLURM_JOB_NODELIST="n[1-8]")
    assert result.returncode == 0, result.stderr
    assert args[args.index("-m") + 1] == "executor" and args[args.index("--steps") + 1] == "20"
    assert "--data" not in args and json.loads((run_dir / "plan.json").read_text())["parallel"]["dp"] == 64
    result, _, _ = _run(text, tmp_path, SLURM_JOB_ID="7", SLURM_JOB_NODELIST="n[1-8]")
    assert result.returncode == 2 and "DATA is still the placeholder" in result.stderr


def test_print_launch_refuses_what_the_executor_cannot_run(cli, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    PLANS["zero1 tp+sp+pp+vpp"].save(plan)
    assert cli("run", str(plan), str(plan), "--print-launch", "torchrun") == 2
    assert "--print-launch writes the script of one plan, got 2" in capsys.readouterr().err


def test_a_nested_omp_num_threads_names_the_outer_level():
    # OMP_NUM_THREADS=4,2 is valid OpenMP (a count per nesting level); a rank took int() of it and died
    # (issue 53's fuzz). The outermost count is the first entry; what names none leaves torch's own.
    from executor.torch_backend.worker import omp_outer_threads

    assert omp_outer_threads("4,2") == 4 and omp_outer_threads(" 8 ") == 8 and omp_outer_threads("1") == 1
    assert omp_outer_threads("") is None and omp_outer_threads("zero") is None and omp_outer_threads("0,2") is None
