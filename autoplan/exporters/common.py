"""What every exporter shares: the result type, the target table and the checks on the plan.

The exporters import this module; the dispatch that imports them by name is autoplan.exporters.dispatch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from autoplan.specs import AUTOPLAN_VERSION, AutoplanError, ParallelPlan, PlanDocument

# target name -> (module under autoplan.exporters, file suffix of what it writes, framework whose rules
# apply, the release the export is written for and checked against: tests/test_export_acceptance.py)
_TARGETS = {
    "megatron": ("megatron", ".sh", "megatron-core", "Megatron-LM core_v0.16.1 (megatron-core 0.16.1)"),
    # torchtitan 0.3.0 (current) reads Python config modules (--module/--config); 0.2.x read TOML, kept as
    # torchtitan-0.2 (0.2.0: the last TOML release that runs on torch 2.9.0, autoplan's pin).
    "torchtitan": ("torchtitan.v03", ".py", "torchtitan", "torchtitan 0.3.0 (Python config module)"),
    "torchtitan-0.2": ("torchtitan.v02", ".toml", "torchtitan", "torchtitan 0.2.0 (TOML job config)"),
    "deepspeed": ("deepspeed", ".json", "deepspeed",
                  "DeepSpeed 0.19.8 with deepspeedai/Megatron-DeepSpeed (its flags as of commit 4efb479d)"),
}


@dataclass
class Export:
    target: str
    text: str
    """What to hand to the framework: a shell command, a Python module, a TOML file or a JSON file."""
    notes: list = field(default_factory=list)
    """One line per part of the plan that does not map (or maps only approximately)."""
    suffix: str = ""
    """File suffix of `text` (".sh", ".py", ".toml", ".json")."""


def target_names() -> tuple:
    return tuple(_TARGETS)


def target_module(target: str) -> str:
    """The module under autoplan.exporters that writes an export target's configuration."""
    return _TARGETS[target][0]


def target_suffix(target: str) -> str:
    """File suffix of what an export target writes."""
    return _TARGETS[target][1]


def target_framework(target: str) -> str:
    """The framework (autoplan.specs.frameworks) an export target runs on."""
    return _TARGETS[target][2]


def target_version(target: str) -> str:
    """The framework release an export target is written for and checked against."""
    return _TARGETS[target][3]


def check_names(doc: PlanDocument) -> None:
    """Refuse a name with a control character before it reaches a generated file: a newline in a
    comment of a bash script starts a command, in a Python or TOML literal it ends the file's syntax.
    The plan reader refuses such files already; a document built in memory is checked here too.
    (Quotes, $(...), backticks and non-ASCII letters are fine: each generator quotes for its language.)"""
    from autoplan.specs.validation import NAME_RULE, control_characters, show

    for what, value in (("model.name", doc.model.name), ("model.family", doc.model.family),
                        ("cluster.name", doc.cluster.name), ("cluster.profile", doc.cluster.profile)):
        if isinstance(value, str) and control_characters(value):
            raise AutoplanError(f"{what} {NAME_RULE}, got {show(value)}; it would be written into a generated "
                                f"script")


def with_alternative(doc: PlanDocument, index: int, force: bool = False) -> PlanDocument:
    """The plan document with its `index`-th ranked alternative (1-based) as the chosen plan; 0 is
    the chosen plan itself. Lets a user export the runner-up the search also wrote down.

    A plan predicted not to fit in memory (an alternative that was the "faster plan that came closest
    to fitting", or a chosen plan re-scored on a smaller GPU) is refused unless `force`: exported
    silently it would run out of memory on the cluster."""
    if index == 0:
        _refuse_if_not_fitting(doc.prediction, "the plan", force)
        return doc
    if not 1 <= index <= len(doc.alternatives):
        raise AutoplanError(
            f"--alternative {index}: the plan file holds {len(doc.alternatives)} alternatives; "
            f"choose 0 (the chosen plan) to {len(doc.alternatives)}")
    alternative = doc.alternatives[index - 1]
    prediction = (alternative.get("prediction") or {}) if isinstance(alternative, dict) else {}
    _refuse_if_not_fitting(prediction, f"--alternative {index}", force)
    parallel = ParallelPlan.from_dict(alternative.get("parallel") if isinstance(alternative, dict) else None,
                                      f"alternative {index} parallel")
    return PlanDocument(model=doc.model, training=doc.training, cluster=doc.cluster, parallel=parallel,
                        prediction=dict(alternative.get("prediction") or {}), search=doc.search,
                        provenance=doc.provenance, framework=doc.framework)


def _refuse_if_not_fitting(prediction: dict, what: str, force: bool) -> None:
    if prediction.get("fits") is False and not force:
        need, have = prediction.get("peak_memory_bytes", 0), prediction.get("memory_capacity_bytes", 0)
        raise AutoplanError(
            f"{what} does not fit: predicted peak {need / 2**30:.1f} GiB per GPU > {have / 2**30:.1f} GiB; "
            f"export it anyway with --force, or choose another alternative")


def header_lines(doc: PlanDocument, target: str) -> list:
    """The first comment lines of a text export: the framework release it targets, where it came from,
    for which model and cluster."""
    par = doc.parallel
    return [
        f"{target_version(target)} configuration exported by autoplan {AUTOPLAN_VERSION} from plan {doc.plan_id}",
        f"model {doc.model.name} on {doc.cluster.num_gpus} x {doc.cluster.name}: dp={par.dp} tp={par.tp} "
        f"pp={par.pp} cp={par.cp} vpp={par.vpp} sp={par.sequence_parallel} zero={par.zero_stage} "
        f"mbs={par.micro_batch_size} microbatches={par.num_microbatches} recompute={par.recompute}"
        f"({par.recompute_num_layers})",
    ]


def comment_block(lines: list, notes: list) -> str:
    """`# `-prefixed header plus a "does not map" section (shell and TOML share the comment sign)."""
    out = [f"# {line}" for line in lines]
    if notes:
        out.append("# Not mapped, or mapped approximately:")
        out.extend(f"#  - {note}" for note in notes)
    return "\n".join(out) + "\n"


def full_recompute_every_k(num_layers_per_stage: int, num_recomputed: int) -> tuple:
    """(k, count) so that checkpointing every k-th layer recomputes `count` of the stage's layers.

    Frameworks that pick recomputed layers by stride (torchtitan's layer-selective checkpointing)
    can hit the plan's count exactly only when it divides the layers per stage.
    """
    k = max(1, num_layers_per_stage // num_recomputed)
    return k, -(-num_layers_per_stage // k)


def uneven_stages(doc: PlanDocument) -> list | None:
    """Layers of each pipeline rank (ParallelPlan.stage_num_layers) when they differ, else None."""
    counts = doc.parallel.stage_num_layers(doc.model.num_layers)
    return counts if len(set(counts)) > 1 else None


def embedding_counts_as_a_layer(counts: list) -> bool:
    """True when the split is what weighing the embedding (first rank) and the head (last rank) as
    one layer each gives, [k-1, k, ..., k, k-1] -- BigScience's BLOOM split of 70 layers over 12
    stages, and torchtitan's default split of Llama 3.1 405B's 126 over 8."""
    if len(counts) < 3:
        return False
    k = counts[1]
    return counts == [k - 1] + [k] * (len(counts) - 2) + [k - 1]


def stages_text(counts: list) -> str:
    """[15, 16, 16, 16, 15] -> "15, 16 x3, 15": a pipeline split short enough for a note."""
    runs: list = []
    for n in counts:
        if runs and runs[-1][0] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    return ", ".join(f"{n} x{times}" if times > 1 else str(n) for n, times in runs)
