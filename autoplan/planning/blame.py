"""Which rule to name when no plan runs: the one that binds for what the user pinned.

A search rejects each candidate for the first rule it breaks, so the counts say which rule came first
most often, not which one the pins make unavoidable: `--ep 8 --zero 3` for a DeepSpeed MoE plan broke
the expert-parallel divisibility rule in most candidates (a structural rule, checked first), while
DeepSpeed's "MoE not supported with Stage 3" broke every candidate that got that far. A rule that
reads only pinned knobs (and the problem) binds whatever the search chooses for the rest, so it is
named first (`RULE_READS`).
"""
from __future__ import annotations

PIN_RULES = {
    "dp": ("degree_product", "batch_product", "framework_microbatches_per_stage"),
    "tp": ("tp_divides_heads", "tp_across_nodes", "tp_divides_node", "degree_product", "framework_tp_limit",
           "framework_zero0_mixed", "framework_sp_always", "framework_moe_tp_pp", "framework_tied_embeddings",
           "framework_tp_block_extras"),
    "pp": ("pp_divides_layers", "degree_product", "framework_pp_limit", "framework_zero_with_pp",
           "framework_microbatches_per_stage", "framework_uneven_stages", "framework_uneven_interleaved",
           "framework_moe_tp_pp", "framework_tied_embeddings", "framework_zero0_mixed"),
    "cp": ("cp_divides_seq", "degree_product", "framework_cp_limit", "framework_learned_positions",
           "framework_zero0_mixed", "framework_cp_masked_attention"),
    "vpp": ("pp_divides_layers", "vpp_needs_pp", "vpp_microbatches", "framework_vpp_limit",
            "framework_uneven_interleaved"),
    "ep": ("ep_needs_moe", "ep_divides", "etp_divides_ffn", "framework_zero_with_ep", "framework_expert_tp"),
    "micro_batch_size": ("micro_batch_product", "vpp_microbatches", "framework_microbatches_per_stage"),
    "zero_stage": ("zero_stage", "framework_zero_stage", "framework_zero_with_moe", "framework_zero_with_pp",
                   "framework_zero_with_ep", "framework_zero0_mixed", "framework_zero3_tied_embeddings",
                   "framework_zero3_dtype"),
    "sequence_parallel": ("sp_needs_tp", "sp_divides_seq", "framework_sp_always", "framework_sp_never",
                          "framework_learned_positions", "framework_moe_tp_sp"),
    "recompute": ("recompute_policy", "recompute_layers"),
}
"""Which rules (InfeasiblePlan reason tags) a pinned knob can break: the structural rules of
ParallelPlan.check, then the framework's (autoplan/specs/framework_rules.py, "framework_*")."""

RULE_READS = {
    "tp_divides_heads": {"tp"},
    "tp_across_nodes": {"tp"},
    "tp_divides_node": {"tp"},
    "cp_divides_seq": {"cp"},
    "ep_needs_moe": {"ep"},
    "zero_stage": {"zero_stage"},
    "framework_zero_stage": {"zero_stage"},
    "framework_zero_with_moe": {"zero_stage"},
    "framework_zero3_tied_embeddings": {"zero_stage"},
    "framework_zero3_dtype": {"zero_stage"},
    "framework_zero_with_pp": {"zero_stage", "pp"},
    "framework_zero_with_ep": {"zero_stage", "ep"},
    "framework_zero0_mixed": {"zero_stage", "tp", "pp", "cp"},
    "framework_tp_limit": {"tp"},
    "framework_pp_limit": {"pp"},
    "framework_cp_limit": {"cp"},
    "framework_vpp_limit": {"vpp"},
    "framework_tp_block_extras": {"tp"},
    "framework_cp_masked_attention": {"cp"},
    "framework_sp_never": {"sequence_parallel"},
    "framework_sp_always": {"tp", "sequence_parallel"},
    "framework_moe_tp_sp": {"tp", "sequence_parallel"},
    "framework_moe_tp_pp": {"tp", "pp"},
    "framework_tied_embeddings": {"tp", "pp"},
    "framework_tied_embeddings_pp": {"pp"},
    "framework_learned_positions": {"cp", "sequence_parallel"},
}
"""The knobs each rule reads besides the problem (model, training shape, cluster), where they are
few: a rule whose knobs are all pinned is broken by every candidate that reaches it. Rules not
listed here read knobs the search fills in (degree products, divisibility with dp, micro-batches)."""

NOT_A_PLAN = ("degree_product", "micro_batch_product")
"""Knob combinations of the search grid, never a plan the problem could have had: degrees that do
not multiply to the GPU count, a micro-batch size larger than dp's share of the batch allows. Never
the rule to blame while another rule broke."""

PROBLEM_RULES = ("out_of_memory", "sp_divides_seq", "cp_divides_seq", "batch_product", "tp_divides_heads")
"""Rules a plan breaks because of the problem (memory; seq_len, global batch, heads), whatever the
search chose for the knob the rule names; the others (pp_divides_layers, vpp_microbatches, ...)
reject one value of a knob that other values avoid."""


def binds_for_pins(tag: str, pinned: set) -> bool:
    """Whether the rule `tag` reads only pinned knobs, so no choice of the others avoids it."""
    reads = RULE_READS.get(tag)
    return reads is not None and reads <= pinned


def rule_that_broke(rejections: dict, pinned: set) -> str:
    """The tag to blame when no plan runs, from the search's {tag: (count, first message)}: a rule the
    pins alone decide, else one a pinned knob can break (the most specific), else the problem's rule
    that rejected the most distinct plans ("out_of_memory", plans that break no rule but do not fit,
    competing like the rest); never whichever rule a search tried last."""
    blamable = {tag for knob in pinned for tag in PIN_RULES.get(knob, ())}
    counts = {tag: count for tag, (count, _) in rejections.items()}
    return min(counts, key=lambda tag: (not binds_for_pins(tag, pinned), tag not in blamable, tag in NOT_A_PLAN,
                                        tag not in PROBLEM_RULES, -counts[tag], tag))
