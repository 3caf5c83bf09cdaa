"""Feed `autoplan export --to torchtitan` modules to the real torchtitan 0.3.0, no stand-ins.

Run with the python of the side venv that holds torchtitan 0.3.0 on torch 2.13.0+cpu (`make
torchtitan-0.3`, default ../side-venvs/tt03 beside the repository):
`python tests/torchtitan03_check.py EXPORTS.json`. EXPORTS.json is a list of {"text", "num_gpus", "fp8",
"build_only" (stop once the model is built: no parallelization)}
(or {"sac_trace": [dim, heads, kv_heads, ffn]}: the matmuls SelectiveAC keeps, `sac_trace`);
the last line printed is a JSON list with one verdict per export: {"error": "" (taken) or the first
complaint, "params": parameters of the model built on the meta device, "layers": its blocks,
"float8_linears": its Float8Linear modules, "compile"/"async_tp": the CompileConfig switches,
"model_parts"/"part_params"/"local_params": what rank 0 holds once parallelized, see below}.
tests/test_export_acceptance.py runs it in a subprocess, so 0.3.0 never meets the main venv's torch.

Per export, the steps Trainer.__init__ takes before it touches a device or a process group
(torchtitan 0.3.0 trainer.py lines 288-440), each with 0.3.0's own code:
- ConfigManager().parse_args (config/manager.py line 33): imports the module, calls the `--config`
  function, re-parses the result with tyro and the launch script's override (`--training.steps`),
  which runs Trainer.Config.__post_init__;
- ParallelDims.from_config (distributed/parallel_dims.py lines 153-189) for the plan's world size,
  and the trainer's sequence-length divisor (trainer.py line 306);
- model_spec.model.update_from_config (models/common/decoder.py line 113: weight tying with pp, tp
  dividing the heads), Trainer.Config._validate_cuda_graphs, the model built on the meta device in
  training.dtype, verify_module_protocol and get_nparams_and_flops (trainer.py lines 344-393);
- config.loss.build, its chunking of each rank's sequence (components/loss.py line 671, checked at
  the first step) and the batch-size rule (trainer.py lines 410-440);
- with pp > 1, the stage split pipeline_llm makes: _get_pipeline_metadata and
  _generate_llm_fqn_per_model_part (distributed/pipeline_parallel.py lines 194, 366);
- then the model parallelized as the trainer's model_parallelism_init does (trainer.py lines 442-509):
  a process group of the plan's world on torch's "fake" backend (rank 0: every collective returns at
  once, nothing is sent), the spmd backend set (line 319), ParallelDims.build_mesh, and the model
  spec's pipelining_fn (pipeline_llm: stages, the per-stage parallelize_fn, the schedule) or
  parallelize_fn (parallelize_llama / the deepseek_v3 and qwen3 ones: CP, TP/SP, EP, activation
  checkpointing, compile as configured, FSDP), on the meta model. Reported: the model parts rank 0
  holds and its parameters, whole and local (what FSDP/TP/EP left on the rank).

Where 0.3.0 stops on a CPU, and what stands in: torchtitan picks the device type "cuda" when no
accelerator is found (tools/utils.py line 55) and fully_shard asks torch.cuda for the mesh's device
(torch 2.13.0 fsdp/_fully_shard/_fsdp_init.py line 223), so the mesh is built on "cpu" (the one
module-level name parallel_dims.py reads, set in main()); the weights are never materialized
(to_empty and init_weights, trainer.py lines 474-478 and 501-505, would allocate every rank's shard).
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torchtitan.distributed.parallel_dims as parallel_dims_module
from torch.distributed.tensor import DTensor
from torch.testing._internal.distributed.fake_pg import FakeStore
from torchtitan.components.quantization import float8
from torchtitan.config import TORCH_DTYPE_MAP, ConfigManager
from torchtitan.distributed import ParallelDims
from torchtitan.distributed.pipeline_parallel import _generate_llm_fqn_per_model_part, _get_pipeline_metadata
from torchtitan.distributed import utils as dist_utils
from torchtitan.tools import utils


def check(text: str, num_gpus: int, workdir: Path, index: int, fp8: bool = False, build_only: bool = False) -> dict:
    """The first complaint of torchtitan 0.3.0 about one exported module, and the model it built."""
    out = {"error": "", "params": 0, "layers": 0, "float8_linears": 0, "compile": False, "async_tp": False,
           "model_parts": 0, "part_params": 0, "local_params": 0}
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), gpu_for_fp8(fp8):
            out.update(_check(text, num_gpus, workdir, index, out, build_only))
    except SystemExit as exc:  # tyro prints its complaint (in a box) to stderr and exits
        lines = [line.strip(" │╭╮╰╯─") for line in said.getvalue().splitlines()]
        out["error"] = f"ConfigManager.parse_args (tyro exit {exc.code}): " + " ".join(filter(None, lines))[-600:]
    except Exception as exc:  # whatever torchtitan raises is the verdict
        out["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:400] or type(exc).__name__
    return out


def _check(text: str, num_gpus: int, workdir: Path, index: int, out: dict, build_only: bool) -> dict:
    module = f"autoplan_job_{index}"
    (workdir / f"{module}.py").write_text(text)
    config = ConfigManager().parse_args(["--module", module, "--config", "autoplan_job", "--training.steps", "7"])
    if config.training.steps != 7:
        return {"error": "--training.steps did not reach TrainingConfig"}
    p = config.parallelism
    dims = ParallelDims.from_config(p, num_gpus)  # _validate asserts the product is the world size
    divisor = (dims.tp if p.enable_sequence_parallel else 1) * (2 * dims.cp if dims.cp > 1 else 1)
    if config.training.seq_len % divisor:  # trainer.py line 306
        return {"error": f"Training sequence length ({config.training.seq_len}) must be divisible by {divisor}"}
    model_config = config.model_spec.model
    model_config.update_from_config(config=config)
    config._validate_cuda_graphs()
    with torch.device("meta"), utils.set_default_dtype(TORCH_DTYPE_MAP[config.training.dtype]):
        model = model_config.build()
    model.verify_module_protocol()
    model_config.get_nparams_and_flops(model, config.training.seq_len)
    out.update(params=sum(t.numel() for t in model.parameters()), layers=len(model.layers), facts=model_facts(model),
               float8_linears=sum("Float8" in type(m).__name__ for m in model.modules()),
               compile=config.compile.enable, async_tp=config.compile.enable_async_tensor_parallel)
    loss = config.loss.build(compile_config=config.compile)
    chunks = getattr(loss, "num_chunks", 1)  # ChunkedLossWrapper splits each rank's sequence (loss.py line 671)
    if (config.training.seq_len // dims.cp) % chunks:
        return {"error": f"ChunkedLossWrapper sequence length must be divisible by num_chunks ({chunks})"}
    batch = (dims.dp_replicate * dims.dp_shard) if dims.dp_enabled else 1  # trainer.py lines 415-427
    local, total = config.training.local_batch_size, config.training.global_batch_size
    if total > 0 and total % (local * batch):
        return {"error": f"global batch size must be multiple of local batch size times data-parallel degree "
                         f"({total} % ({local} * {batch}) != 0)"}
    if dims.pp > 1:
        stages, layers, first, last = _get_pipeline_metadata(dims, p, model_config)
        parts = p.module_fqns_per_model_part or _generate_llm_fqn_per_model_part(stages, layers, first, last)
        held = [name for part in parts for name in part if name.startswith("layers.")]
        if held != [f"layers.{i}" for i in range(layers)] or len(parts) % dims.pp:
            return {"error": f"{len(parts)} model parts do not hold the {layers} layers in order over pp={dims.pp}"}
        if local % p.pipeline_parallel_microbatch_size:
            return {"error": "local_batch_size must be divisible by pipeline_parallel_microbatch_size"}
    return {} if build_only else parallelize(config, dims, model, loss)


def model_facts(model) -> dict:
    """The architecture of the model torchtitan built, read off its modules (the names
    tests/test_export_fidelity.py compares with the model's config)."""
    layers = list(model.layers.values()) if isinstance(model.layers, torch.nn.ModuleDict) else list(model.layers)
    attention = layers[0].attention
    rope = attention.rope.config
    norms = [m for m in model.modules() if type(m).__name__ == "RMSNorm"]
    dense = next((layer.feed_forward for layer in layers if getattr(layer, "feed_forward", None) is not None), None)
    moe = next((layer.moe for layer in layers if getattr(layer, "moe", None) is not None), None)
    qkv = getattr(attention, "qkv_linear", None)
    query = qkv.wqkv if qkv is not None and hasattr(qkv, "wqkv") else getattr(attention, "wq", None)
    mla = hasattr(attention, "kv_lora_rank")
    facts = {
        "hidden": model.tok_embeddings.embedding_dim, "heads": attention.n_heads,
        "kv_heads": attention.n_heads if mla else attention.n_kv_heads,
        "head_dim": attention.qk_head_dim if mla else attention.head_dim,
        "ffn": dense.w1.out_features if dense is not None else 0,
        "vocab_rows": model.tok_embeddings.num_embeddings,
        "tied": model.tok_embeddings.weight is model.lm_head.weight,
        "norm": ["rmsnorm"] if norms else [], "norm_eps": sorted({float(m.eps) for m in norms}),
        "activation": "swiglu",  # torchtitan's FeedForward and experts: w2(silu(w1 x) * w3 x)
        "qkv_bias": query is not None and query.bias is not None,
        "linear_bias": attention.wo.bias is not None,
        "qk_norm": "head" if getattr(attention, "q_norm", None) is not None else "",
        "rope_theta": round(float(rope.theta)),
        "rope_scaling_factor": {"llama": rope.scaling_factor, "yarn": rope.rope_factor}.get(rope.scaling, 1.0),
    }
    if mla:
        facts.update(q_lora_rank=attention.q_lora_rank, kv_lora_rank=attention.kv_lora_rank,
                     qk_rope_head_dim=attention.qk_rope_head_dim, v_head_dim=attention.v_head_dim)
    if moe is not None:
        router, shared = moe.router, getattr(moe, "shared_experts", None)
        facts.update(experts=router.num_experts, top_k=router.top_k, router_score=router.score_func,
                     expert_ffn=moe.routed_experts.inner_experts.w1_EFD.shape[1],
                     shared_ffn=shared.w1.out_features if shared is not None else 0)
    return facts


def parallelize(config, dims: ParallelDims, model, loss) -> dict:
    """Trainer.__init__'s model_parallelism_init on rank 0 of a fake process group of the plan's world."""
    if dist.is_initialized():  # one world per export
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=dims.world_size)
    dist_utils.set_spmd_backend(config.parallelism.spmd_backend)
    dims.build_mesh()
    spec = config.model_spec
    switches = dict(parallel_dims=dims, training=config.training, parallelism=config.parallelism,
                    compile_config=config.compile, ac_config=config.activation_checkpoint,
                    dump_folder=config.dump_folder)
    if dims.pp_enabled:
        _, parts, _, _ = spec.pipelining_fn(model, device=torch.device("cpu"), model_config=spec.model,
                                            parallelize_fn=spec.parallelize_fn, loss_fn=loss, **switches)
    else:
        parts = [spec.parallelize_fn(model, **switches)]
    params = [t for part in parts for t in part.parameters()]
    return {"model_parts": len(parts), "part_params": sum(t.numel() for t in params),
            "local_params": sum((t.to_local() if isinstance(t, DTensor) else t).numel() for t in params)}


def sac_trace(dim: int, heads: int, kv_heads: int, ffn: int) -> list:
    """The matmuls of one llama3 block, in order, as (output width, kept?) under 0.3.0's SelectiveAC
    policy: a one-layer model of this shape, its forward and backward on the CPU with the policy
    function spied on. Flex attention has no CPU backward, so plain causal SDPA runs in its place (the
    attention op is not a matmul; on a GPU its output is kept, activation_checkpoint.py line 49)."""
    import torch.nn.functional as F
    from torch.utils.checkpoint import CheckpointPolicy
    from torchtitan.distributed import activation_checkpoint as ac
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.common.attention import FlexAttention
    from torchtitan.models.llama3 import (_EMBEDDING_INIT, _NORM_INIT, Llama3Model, _build_llama3_layers,
                                          _output_linear_init)
    matmuls, spied = [], ac.create_selective_checkpoint_contexts

    def spy(policy):
        def policy_seen(ctx, func, *args, **kwargs):
            verdict = policy(ctx, func, *args, **kwargs)
            if func == torch.ops.aten.mm.default and not ctx.is_recompute:
                matmuls.append((args[1].shape[1], verdict == CheckpointPolicy.MUST_SAVE))
            return verdict
        return spied(policy_seen)

    vocab, seq = 64, 16
    config = Llama3Model.Config(
        dim=dim, vocab_size=vocab, norm=RMSNorm.Config(normalized_shape=dim, param_init=_NORM_INIT),
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim, param_init=_EMBEDDING_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=vocab, param_init=_output_linear_init(dim)),
        layers=_build_llama3_layers(n_layers=1, dim=dim, n_heads=heads, n_kv_heads=kv_heads, hidden_dim=ffn,
                                    rope=ComplexRoPE.Config(dim=dim // heads, max_seq_len=seq, theta=1e4),
                                    attn_backend="flex"))
    flex = FlexAttention.forward
    FlexAttention.forward = lambda self, q, k, v, *args, **kwargs: F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True).transpose(1, 2)
    ac.create_selective_checkpoint_contexts = spy
    try:
        model = config.build()
        ac.SelectiveAC.Config().build(dump_folder=".").apply(model)
        positions = torch.arange(seq).repeat(1, 1)
        model(torch.zeros(1, seq, dtype=torch.long), positions=positions,
              attention_masks=model.get_attention_masks(positions)).sum().backward()
    finally:
        FlexAttention.forward, ac.create_selective_checkpoint_contexts = flex, spied
    return matmuls  # the head runs outside the checkpointed block: the policy never sees it


@contextlib.contextmanager
def gpu_for_fp8(fp8: bool):
    """The Float8 converter asks the GPU it runs on (components/quantization/float8.py line 85): for an
    export of an fp8 plan, the H100 the plans are made for (sm90) stands in for the absent CUDA device.
    Any other export builds as on this CPU, with no fp8: a recipe that constructs a Float8 converter
    behind the plan's back fails here as on an A100 ("float8 is only supported on NVIDIA SM89 or later")."""
    saved = float8.has_cuda_capability
    if fp8:
        float8.has_cuda_capability = lambda major, minor: (major, minor) <= (9, 0)
    try:
        yield
    finally:
        float8.has_cuda_capability = saved


def main() -> None:
    parallel_dims_module.device_type = "cpu"  # the device mesh's type (see the module's docstring)
    exports = json.loads(Path(sys.argv[1]).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, tmp)
        with contextlib.redirect_stdout(io.StringIO()):  # torchtitan's logger and tyro's help go to stderr
            verdicts = [{"sac_trace": sac_trace(*item["sac_trace"])} if "sac_trace" in item else
                        check(item["text"], item["num_gpus"], Path(tmp), index, item.get("fp8", False),
                              item.get("build_only", False)) for index, item in enumerate(exports)]
    print(json.dumps(verdicts))


if __name__ == "__main__":
    main()
