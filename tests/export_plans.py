"""Plans that cover every plan dimension, for the acceptance tests of the exporters: ZeRO 0-3 (FSDP),
tp with and without sequence parallelism, pp plain / interleaved / uneven (first and last stage
lighter, and unequal middle stages), cp, ep (Mixtral), GQA, qkv bias, tied embeddings, full /
partial / selective recompute, bf16 / fp16 / fp8, one node and many; and the newer architectures
(MLA with shared experts and leading dense layers at 32k, per-head q/k norm)."""
from autoplan.inputs.catalog import catalog_model
from autoplan.specs import ClusterSpec, ModelSpec, ParallelPlan, PlanDocument, TrainingSpec

LLAMA3_8B = ModelSpec(name="llama-3-8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                      ffn_hidden_size=14336, vocab_size=128256, max_seq_len=8192)
LLAMA3_405B = ModelSpec(name="llama-3-405b", num_layers=126, hidden_size=16384, num_heads=128, num_kv_heads=8,
                        ffn_hidden_size=53248, vocab_size=128256, max_seq_len=8192)
LLAMA2_70B = ModelSpec(name="llama-2-70b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
                       ffn_hidden_size=28672, vocab_size=32000)
QWEN25_7B = ModelSpec(name="qwen2.5-7b", num_layers=28, hidden_size=3584, num_heads=28, num_kv_heads=4,
                      ffn_hidden_size=18944, vocab_size=152064, qkv_bias=True, max_seq_len=32768)
LLAMA2_13B = ModelSpec(name="llama-2-13b", num_layers=40, hidden_size=5120, num_heads=40, num_kv_heads=40,
                       ffn_hidden_size=13824, vocab_size=32000)
MIXTRAL = ModelSpec(name="mixtral-8x7b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                    ffn_hidden_size=14336, vocab_size=32000, num_experts=8, num_experts_per_token=2)
TIED_1B = ModelSpec(name="tied-1b", num_layers=16, hidden_size=2048, num_heads=16, num_kv_heads=16,
                    ffn_hidden_size=5632, vocab_size=50304, tied_embeddings=True)
GPT3_175B = ModelSpec(name="gpt3-175b", num_layers=96, hidden_size=12288, num_heads=96, num_kv_heads=96,
                      ffn_hidden_size=49152, vocab_size=50257, mlp="gelu", norm="layernorm", position="learned",
                      tied_embeddings=True, linear_bias=True, max_seq_len=2048)


def export_doc(model, num_gpus, gbs, seq_len=4096, dtype="bf16", **parallel):
    return PlanDocument(model=model, training=TrainingSpec(global_batch_size=gbs, seq_len=seq_len, dtype=dtype),
                        cluster=ClusterSpec(name="h100-80gb", num_gpus=num_gpus), parallel=ParallelPlan(**parallel))


PLANS = {
    "fsdp (zero3, selective)": export_doc(LLAMA3_8B, 64, 128, dp=64, zero_stage=3, micro_batch_size=2, num_microbatches=1,
                                    recompute="selective"),
    "fsdp + tp": export_doc(LLAMA3_8B, 64, 128, dp=16, tp=4, sequence_parallel=True, zero_stage=3, micro_batch_size=1,
                      num_microbatches=8, recompute="full", recompute_num_layers=32),
    "ddp (zero0)": export_doc(LLAMA3_8B, 8, 64, dp=8, zero_stage=0, micro_batch_size=1, num_microbatches=8,
                        recompute="full", recompute_num_layers=32),
    "zero1 tp+sp+pp+vpp": export_doc(LLAMA2_70B, 128, 512, dp=4, tp=8, pp=4, vpp=5, sequence_parallel=True, zero_stage=1,
                               micro_batch_size=1, num_microbatches=128, recompute="full", recompute_num_layers=10),
    "zero2 tp no-sp": export_doc(QWEN25_7B, 16, 64, dp=4, tp=4, zero_stage=2, micro_batch_size=2, num_microbatches=8,
                           recompute="selective"),
    "zero1 pp 1f1b partial recompute": export_doc(LLAMA2_13B, 32, 256, dp=4, tp=2, pp=4, sequence_parallel=True,
                                            zero_stage=1, micro_batch_size=1, num_microbatches=64,
                                            recompute="full", recompute_num_layers=5),
    "cp (long context)": export_doc(LLAMA2_70B, 64, 64, seq_len=32768, dp=4, tp=8, cp=2, sequence_parallel=True,
                              zero_stage=1, micro_batch_size=1, num_microbatches=16, recompute="full",
                              recompute_num_layers=80),
    "uneven 405b (first/last lighter)": export_doc(LLAMA3_405B, 1024, 1024, dp=16, tp=8, pp=8, sequence_parallel=True,
                                             zero_stage=1, micro_batch_size=1, num_microbatches=64),
    "uneven middle stages": export_doc(LLAMA2_70B, 256, 512, dp=8, pp=32, zero_stage=1, micro_batch_size=1,
                                 num_microbatches=64),
    "moe ep (mixtral, fp8)": export_doc(MIXTRAL, 64, 256, dtype="fp8", dp=16, tp=2, pp=2, ep=8, zero_stage=1,
                                  sequence_parallel=True, micro_batch_size=1, num_microbatches=16),
    "fp8 dense tp+pp": export_doc(LLAMA3_8B, 32, 256, dtype="fp8", dp=4, tp=4, pp=2, sequence_parallel=True, zero_stage=1,
                            micro_batch_size=2, num_microbatches=32),
    "fp16 zero1": export_doc(LLAMA2_13B, 16, 128, dtype="fp16", dp=8, tp=2, sequence_parallel=True, zero_stage=1,
                       micro_batch_size=2, num_microbatches=8),
    "tied embeddings zero2": export_doc(TIED_1B, 8, 64, dp=8, zero_stage=2, micro_batch_size=4, num_microbatches=2),
    "gpt3 learned positions tp+pp": export_doc(GPT3_175B, 1024, 1536, seq_len=2048, dp=16, tp=8, pp=8,
                                         sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                                         num_microbatches=96, recompute="selective"),
    # seq 32768: within DeepSeek-V3's context, past the 16384 positions torchtitan's flavor caches RoPE for
    "deepseek-v3 (mla, moe, uneven pp)": export_doc(catalog_model("deepseek-v3"), 256, 1024, seq_len=32768, dp=32, pp=8,
                                              ep=32, zero_stage=1, micro_batch_size=1, num_microbatches=32),
    "qwen3-8b (qk norm) tp+sp": export_doc(catalog_model("qwen3-8b"), 8, 64, dp=4, tp=2, sequence_parallel=True,
                                     zero_stage=1, micro_batch_size=1, num_microbatches=16),
    "qwen3-moe (235b-a22b) ep pp": export_doc(catalog_model("qwen3-235b-a22b"), 128, 512, dp=64, pp=2, ep=16, zero_stage=1,
                                        micro_batch_size=1, num_microbatches=8, recompute="full",
                                        recompute_num_layers=47),
    # Expert parallelism over the tensor-parallel ranks too (ep 32 > dp 16): whole experts (etp 1), as
    # torchtitan 0.3.0 runs them with EP (efsdp = dp_shard*cp*tp/ep = 2) and Megatron-Core's MoE parallel folding.
    "qwen3-moe ep over tp+sp (etp 1)": export_doc(catalog_model("qwen3-235b-a22b"), 128, 512, dp=16, tp=4, pp=2, ep=32,
                                            etp=1, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                                            num_microbatches=32, recompute="full", recompute_num_layers=47),
    # ep 2 over tp 4 (etp 1): torchtitan 0.3.0 and Megatron-Core take part of a tp block for the expert group,
    # 0.2.0 only whole cp x tp blocks (its ParallelDims asserts): refused for torchtitan-0.2, not exported to fail.
    "deepseek-v3 ep inside tp (etp 1)": export_doc(catalog_model("deepseek-v3"), 256, 1024, seq_len=32768, dp=16, tp=4,
                                             pp=4, ep=2, etp=1, sequence_parallel=True, zero_stage=1,
                                             micro_batch_size=1, num_microbatches=64),
    # Hybrid sharding: FSDP within each node of 8, 8 replicas (torchtitan data_parallel_replicate_degree);
    # the distributed optimizer over groups of 8 dp*cp ranks, 4 instances (Megatron's partial DistOpt).
    "hsdp (zero3, shard 8)": export_doc(LLAMA3_8B, 64, 128, dp=64, zero_stage=3, zero_shard=8, micro_batch_size=2,
                                        num_microbatches=1),
    "hsdp zero1 tp+cp (4 instances)": export_doc(LLAMA3_8B, 64, 128, dp=16, tp=2, cp=2, sequence_parallel=True,
                                                 zero_stage=1, zero_shard=8, micro_batch_size=1, num_microbatches=8),
}
