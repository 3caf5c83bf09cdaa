"""The fixed choices of the vocabulary's fields: the one place each tuple is written.

A leaf: it imports nothing, so the spec classes (model, training, plan, hardware, measurement) and the
schema checks in `autoplan.specs.schemas` all read it without importing one another.
"""
from __future__ import annotations

# ModelSpec
MLP_KINDS = ("swiglu", "geglu", "gelu")
NORM_KINDS = ("rmsnorm", "layernorm")
POSITION_KINDS = ("rope", "alibi", "learned")
QK_NORM_KINDS = ("", "head", "full")
ROPE_SCALING_KINDS = ("", "linear", "dynamic", "yarn", "llama3", "longrope")
"""HF rope_scaling rope_type values (transformers modeling_rope_utils ROPE_INIT_FUNCTIONS); "" none."""
ROUTER_SCORES = ("", "softmax", "sigmoid")
NORM_PLACEMENTS = ("pre", "post", "sandwich")

# TrainingSpec
DTYPES = ("bf16", "fp16", "fp8", "fp32")

# ParallelPlan
RECOMPUTE_POLICIES = ("none", "selective", "full")
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
"""Megatron-Core's --recompute-modules choices (megatron/core/transformer/transformer_config.py
core_v0.16.1 lines 411-424 and the allowed set at lines 1197-1211)."""

TP_COMM_OVERLAP_KINDS = ("", "userbuffers", "async-tp")
"""How a framework overlaps the TP/SP collectives with the GEMMs when a plan asks for it
(Framework.tp_comm_overlap_kind, ParallelPlan.tp_comm_overlap): "" it cannot; "userbuffers" Megatron-Core
--tp-comm-overlap (Transformer Engine's split-pipelined all-gather/reduce-scatter, needs sequence
parallelism); "async-tp" torchtitan's async tensor parallelism (torch.compile's micro-pipelined TP over
symmetric memory, needs compile)."""

# Measurement
STATUSES = ("ok", "oom", "error")

# HardwareProfile
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
SCOPES = ("intra_node", "inter_node")
NIC_SHARE_OPS = ("all_to_all", "send_recv")
"""Across nodes these run at one NIC share per GPU, not at the node's NIC total a ring reaches (an
all-to-all cannot aggregate several NICs, NVIDIA/nccl-tests issue #267; cost_model/profiles.py
`_A2A_NIC_SOURCE`): an inter-node sample of them is read by the bytes that left its node, which its
ranks_per_node says (cost_model/tables.py nic_share_bytes_per_s)."""
MEMORY_OPS = ("copy", "add", "activation", "norm")
"""Memory-bound ops the profiler times for achieved bandwidth (the elementwise traffic of a transformer
layer); a profile's memory_ops rows name one of them."""

ATTENTION_KERNELS = ("sdpa", "flash2", "cudnn", "flash1", "flash-triton")
"""The attention kernel a profile's sample timed, and a framework's attention runs on: "sdpa" is
PyTorch's scaled_dot_product_attention with its own backend choice (what `autoplan profile` times),
"flash2" FlashAttention-2 (the flash-attn package, and SDPA's flash backend), "cudnn" cuDNN's fused
attention (SDPA's cuDNN backend, and Transformer Engine's FusedAttention), "flash1" FlashAttention-1
(the flash-attn package before 2.0), "flash-triton" the flash-attn package's Triton kernel
(flash_attn/flash_attn_triton.py; llm-foundry's attn_impl "triton", Megatron-DeepSpeed's
--use-flash-attn-triton)."""
ATTENTION_KERNEL_STAND_IN = {"flash1": "flash2", "flash-triton": "flash2"}
"""The timed kernel whose samples price one a profile has none of: no built-in profile times these two,
and FlashAttention-2, their successor in the same package, prices them (the Triton kernel's padded
width apart, cost_model/layer_terms.py tile_head_dim). FlashAttention-2's own figures put both at
0.42-0.60 of its rate; read so, with the one attention efficiency every framework shares, they make
every split worse (docs/cost_model.md, "Kernels no record of ours timed")."""
