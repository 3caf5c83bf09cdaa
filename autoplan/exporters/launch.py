"""Launch scripts: an export wrapped in the bash that starts it on a cluster, with torchrun on every
node or as a Slurm batch job (`autoplan export --to T --launch torchrun|slurm`, `autoplan run
--print-launch`).

Node and GPU counts come from the plan; what only the user knows (data, tokenizer, where the
framework is checked out, the rendezvous host) is a placeholder variable the script refuses to run
with until it is set, in the file or in the environment: `DATA_PATH=/data/x bash train.sh`.
"""
from __future__ import annotations

import shlex

from autoplan.exporters.common import check_names
from autoplan.specs import AutoplanError, PlanDocument

LAUNCHERS = ("torchrun", "slurm")
PLACEHOLDER = "FILL_ME"


_WRITE_FILE = [
    "# Each file is written whole beside its name and renamed onto it: a file of that name that is not this",
    "# one (or a symbolic link, whose target would be overwritten) is left alone and the script stops.",
    "write_file() {",
    '  local dest="$RUN_DIR/$1" tmp',
    '  tmp="$(mktemp "$RUN_DIR/.$1.XXXXXX")"',
    '  cat > "$tmp"',
    '  if [[ -L "$dest" ]] || { [[ -e "$dest" ]] && ! cmp -s "$tmp" "$dest"; }; then',
    '    rm -f "$tmp"',
    '    echo "$0: $dest already exists and is not the file this script writes: move it away or set RUN_DIR" >&2',
    "    exit 2",
    "  fi",
    '  mv -f "$tmp" "$dest"',
    "}",
]


def launch_script(doc: PlanDocument, header: list, placeholders: dict, env: dict, files: dict,
                  entry: list, args: list, launcher: str, prelude: tuple = ()) -> str:
    """The bash script: `header` comment lines, `placeholders` name -> what to put there, `env`
    exported as is, `files` name -> text written next to the run ($RUN_DIR), then
    `prelude` bash lines, then `torchrun ... <entry> <args>` (each arg a tuple of words; "$VAR" words
    stay unquoted)."""
    if launcher not in LAUNCHERS:
        raise AutoplanError(f"--launch {launcher!r}: choose one of {', '.join(LAUNCHERS)}")
    cluster = doc.cluster
    nodes, per_node = cluster.num_nodes, min(cluster.gpus_per_node, cluster.num_gpus)
    out = ["#!/usr/bin/env bash"]
    if launcher == "slurm":  # #SBATCH lines count only before the first command
        out += [f"#SBATCH --job-name=autoplan-{doc.plan_id}", f"#SBATCH --nodes={nodes}",
                "#SBATCH --ntasks-per-node=1", f"#SBATCH --gpus-per-node={per_node}", "#SBATCH --exclusive"]
    out += [f"# {line}" for line in header]
    out.append("# submit with: sbatch THIS_FILE" if launcher == "slurm" else
               "# run this same file on every node" + (" (set MASTER_ADDR to the first node's address)"
                                                      if nodes > 1 else ""))
    out += ["set -euo pipefail", "", f"# Placeholders: set each here or in the environment; the script stops while "
            f"one is still {PLACEHOLDER}."]
    names = dict(placeholders)
    if launcher == "torchrun" and nodes > 1:
        names["MASTER_ADDR"] = "address of the first node (the rendezvous host)"
    for name, what in names.items():
        out.append(f'{name}="${{{name}:-{PLACEHOLDER}}}"  # {what}')
    out += [f"for name in {' '.join(names)}; do",
            f'  if [[ "${{!name}}" == {PLACEHOLDER} ]]; then',
            f'    echo "$0: $name is still the placeholder {PLACEHOLDER}: set it (in this file or the environment) '
            f'before launching" >&2',
            "    exit 2", "  fi", "done"] if names else []
    out += ["", 'RUN_DIR="${RUN_DIR:-$PWD}"', 'mkdir -p "$RUN_DIR"'] + (_WRITE_FILE if files else [])
    for name, text in files.items():
        end = _here_doc_end(text)
        out += [f"write_file {name} <<'{end}'", text.rstrip("\n"), end]
    out += [f"export {name}={value}" for name, value in env.items()]
    out += list(prelude)
    out.append('MASTER_PORT="${MASTER_PORT:-29500}"')
    if launcher == "slurm":
        out += [': "${SLURM_JOB_ID:?submit this script with sbatch (no SLURM_JOB_ID in the environment)}"',
                # the first node of the allocation hosts the rendezvous (no `| head`: SIGPIPE under pipefail)
                'mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
                'MASTER_ADDR="${NODES[0]}"',
                f"srun --nodes {nodes} --ntasks-per-node 1 \\",
                f"  torchrun --nnodes {nodes} --nproc-per-node {per_node} --rdzv-backend c10d "
                '--rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "$SLURM_JOB_ID" \\']
    elif nodes > 1:
        out.append(f"torchrun --nnodes {nodes} --nproc-per-node {per_node} --rdzv-backend c10d "
                   f'--rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id autoplan-{doc.plan_id} \\')
    else:
        out.append(f"torchrun --standalone --nnodes 1 --nproc-per-node {per_node} \\")
    words = [" ".join(_word(w) for w in entry)] + [" ".join(_word(str(w)) for w in arg) for arg in args]
    out.append("    " + " \\\n    ".join(words))
    return "\n".join(out) + "\n"


def _here_doc_end(text: str) -> str:
    """A here-document delimiter that no line of `text` equals (a line equal to it would end the
    document early and run the rest of the file as bash)."""
    lines, end = set(text.splitlines()), "AUTOPLAN_EOF"
    while end in lines:
        end += "_"
    return end


def _word(word: str) -> str:
    """Shell-quote a word, keeping "$VAR"-style references expandable."""
    if word.startswith('"$') and word.endswith('"') and '"' not in word[1:-1]:
        return word
    return shlex.quote(word)


def executor_launch(doc: PlanDocument, plan_text: str, launcher: str, run_args: list) -> str:
    """`autoplan run --print-launch`: autoplan's own executor on the plan's GPUs (python -m executor
    under torchrun, one process per GPU), the plan file written next to the run."""
    check_names(doc)
    from autoplan.specs.validation import NAME_RULE, control_characters, show

    for flag, *value in run_args:  # --out: a path on the cluster, written into the script as it is
        value = value[0] if value else None
        if isinstance(value, str) and control_characters(value):
            given = "-o/--output" if flag == "--out" else flag  # how `autoplan run` spells it
            raise AutoplanError(f"{given} {NAME_RULE}, got {show(value)}; it would be written into the launch script")
    header = [f"autoplan executor (torch backend, --device cuda) for plan {doc.plan_id}: {doc.model.name} on "
              f"{doc.cluster.num_gpus} x {doc.cluster.name}",
              "needs autoplan installed on every node (pip install 'autoplan[torch]')"]
    placeholders = {"DATA": "flat token-id file (numpy memmap; see --data-dtype), or the word synthetic"}
    prelude = ("DATA_ARGS=()", 'if [[ "$DATA" != synthetic ]]; then DATA_ARGS=(--data "$DATA"); fi')
    args = [("\"$RUN_DIR/plan.json\"",), ("--device", "cuda")] + [tuple(a) for a in run_args] + [('"${DATA_ARGS[@]}"',)]
    return launch_script(doc, header, placeholders, {}, {"plan.json": plan_text}, ["-m", "executor"], args,
                         launcher, prelude)
