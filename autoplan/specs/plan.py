"""ParallelPlan: the degrees and knobs of one way to train, and the rules every plan must obey.

The rules here are structural (they need only the model's shape, the batch and the GPU count);
whether a plan fits in memory is the cost model's answer, not a rule.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import NamedTuple

from autoplan.specs.choices import RECOMPUTE_MODULES, RECOMPUTE_POLICIES
from autoplan.specs.errors import InfeasiblePlan, SchemaError
from autoplan.specs.schemas import validate_parallel
from autoplan.specs.validation import Issues, refuse_unknown_fields
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import ClusterSpec, TrainingSpec



@dataclass(frozen=True)
class ParallelPlan:
    dp: int = 1
    """Data-parallel replicas (sharded or not, see zero_stage)."""
    tp: int = 1
    """Tensor-parallel degree (Megatron column/row split inside each layer)."""
    pp: int = 1
    """Pipeline stages."""
    cp: int = 1
    """Context-parallel degree: the sequence split across ranks for attention (ring exchange)."""
    vpp: int = 1
    """Virtual stages per pipeline rank; 1 = plain 1F1B, >1 = interleaved 1F1B."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism inside the TP group (norms/dropout sharded on sequence)."""
    zero_stage: int = 0
    """What is sharded over dp: 1 optimizer state, 2 + gradients, 3 + parameters (FSDP)."""
    micro_batch_size: int = 1
    """Sequences per micro-batch per data-parallel replica."""
    num_microbatches: int = 1
    """Micro-batches per step per pipeline (gradient accumulation steps)."""
    recompute: str = "none"
    """"none", "selective" (attention core of every layer) or "full" (whole layers)."""
    recompute_num_layers: int = 0
    """Layers per pipeline stage under full recompute (1..layers per stage); 0 for none/selective."""
    ep: int = 1
    """Expert-parallel degree for MoE models; 1 for dense models. With the default expert TP (etp =
    tp) it splits the dp*cp ranks; a smaller etp lets it span tensor-parallel ranks too (Megatron-Core's
    MoE parallel folding)."""
    etp: int = 0
    """Expert tensor-parallel degree: how many ranks split each expert's matrices (Megatron-Core
    --expert-tensor-parallel-size). 0 = tp, Megatron's own default when the flag is absent
    (megatron/training/arguments.py core_v0.16.1 lines 410-411, parallel_state.py lines 786-787),
    which is also every plan made before the field existed; only megatron-core runs etp != tp."""
    recompute_modules: tuple = ()
    """Under recompute="selective": the submodules each layer recomputes, by Megatron-Core's names
    (--recompute-modules, autoplan.specs.choices.RECOMPUTE_MODULES). () = the framework's own selective
    recompute (Megatron's default ["core_attn"]: transformer_config.py core_v0.16.1 lines 1193-1194)."""
    moe_capacity_factor: float = 0.0
    """Tokens an expert takes per micro-batch, as a multiple of the mean (top-k x tokens / experts);
    the rest are dropped (Megatron-Core --moe-expert-capacity-factor, transformer_config.py
    core_v0.16.1 lines 690-691). 0 = dropless, Megatron's default."""
    zero_shard: int = 0
    """Hybrid sharding (HSDP): how many of the dp*cp ranks one copy of the ZeRO-sharded states spans.
    Consecutive ranks form a shard group; the states are sharded within it and replicated across the
    dp*cp/zero_shard groups, whose gradients are then all-reduced shard by shard (PyTorch FSDP
    HYBRID_SHARD, torchtitan's data_parallel_shard/replicate degrees, Megatron-Core's partial
    distributed optimizer --num-distributed-optimizer-instances). 0 = every dp*cp rank: plain ZeRO."""
    tp_comm_overlap: bool = False
    """Overlap the TP/SP collectives with the GEMMs, the framework's way (Framework.tp_comm_overlap_kind:
    Megatron-Core --tp-comm-overlap, torchtitan's async TP under torch.compile). Needs tp > 1. False: what
    every plan file without the field meant (Megatron-LM's and torchtitan's default)."""

    @property
    def zero_shard_group(self) -> int:
        """The ranks the ZeRO-sharded states are split over: zero_shard, or every dp*cp rank."""
        return self.zero_shard or self.dp * self.cp

    @property
    def zero_replicas(self) -> int:
        """Copies of the sharded states across the data-parallel ranks (1 without hybrid sharding)."""
        return self.dp * self.cp // self.zero_shard_group

    @property
    def expert_tp(self) -> int:
        """The expert tensor-parallel degree in effect (etp, or tp when etp is 0)."""
        return self.etp or self.tp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel replicas per pipeline stage: the tp*cp*dp ranks regrouped as
        etp x ep x edp (Megatron-Core parallel_state.py core_v0.16.1 line 791, per pp stage)."""
        return max(1, self.tp * self.cp * self.dp // (self.expert_tp * self.ep))

    def degrees(self) -> dict:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "cp": self.cp}

    @property
    def num_gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def stage_num_layers(self, num_layers: int) -> list[int]:
        """Layers each pipeline rank holds (summed over its virtual stages), rank 0 first.

        Every rank gets num_layers // pp, and the num_layers % pp extra layers go one each to the
        middle ranks (pp-2 down to 1: under 1F1B a lower rank holds more micro-batches in flight),
        then to the last rank; the first rank (most in flight, the embedding) never gets one. When
        the middle ranks end up equal this is Megatron-LM's --decoder-first/last-pipeline-num-layers
        split, e.g. 126 layers over 8 -> [15, 16, 16, 16, 16, 16, 16, 15]. The same rule holds with
        interleaving; `virtual_stage_num_layers` then splits each rank's count over its vpp chunks.
        """
        base, extra = divmod(num_layers, self.pp)
        counts = [base] * self.pp
        receivers = list(range(self.pp - 2, 0, -1)) + [self.pp - 1]
        for rank in receivers[:extra]:
            counts[rank] += 1
        return counts

    def chunk_num_layers(self, num_layers: int) -> list[list[int]]:
        """Layers of each virtual stage (model chunk) of each pipeline rank: [rank][chunk].

        A rank's count is split over its vpp chunks as evenly as it goes; when it does not divide,
        the smaller chunks are the last rank's last ones (that chunk also computes the head and the
        loss) and every other rank's first ones (chunk 0 holds the most micro-batches in flight
        under interleaved 1F1B, and on rank 0 it also embeds). 126 layers at pp=8, vpp=8 gives rank
        0 [1, 2 x7] and rank 7 [2 x7, 1]: Megatron-LM's --account-for-embedding-in-pipeline-split
        --account-for-loss-in-pipeline-split layout (128 "layers", 2 per virtual stage) and
        torchtitan's generated split with the embedding and the head weighing one layer each.
        """
        chunks = []
        for rank, count in enumerate(self.stage_num_layers(num_layers)):
            base, extra = divmod(count, self.vpp)
            sizes = [base] * (self.vpp - extra) + [base + 1] * extra   # small chunks first
            chunks.append(sizes[::-1] if rank == self.pp - 1 else sizes)
        return chunks

    def virtual_stage_num_layers(self, num_layers: int) -> list[int]:
        """Layers of each of the pp*vpp (virtual) stages in pipeline order: stage k is chunk k // pp
        of rank k % pp (the looping placement of Narayanan et al. 2021, sec. 2.2.1)."""
        chunks = self.chunk_num_layers(num_layers)
        return [chunks[k % self.pp][k // self.pp] for k in range(self.pp * self.vpp)]

    def layers_per_stage(self, num_layers: int) -> int:
        """Layers of the LARGEST pipeline rank: the slowest stage, and the bound on
        recompute_num_layers (which applies per rank as min(recompute_num_layers, its layers))."""
        return -(-num_layers // self.pp)

    def _check_zero_shard(self) -> None:
        """Hybrid sharding needs sharded states, whole context-parallel groups in each shard group, and
        shard groups that split the dp*cp ranks into two or more equal copies."""
        ranks = self.dp * self.cp
        if self.zero_shard < 0:
            raise InfeasiblePlan(f"zero_shard must be 0 (shard over every dp*cp rank) or positive, got "
                                 f"zero_shard={self.zero_shard}", "zero_shard")
        if self.zero_stage == 0:
            raise InfeasiblePlan(f"zero_shard={self.zero_shard} shards ZeRO states, but zero_stage=0 shards none; "
                                 f"pick zero_stage 1-3 or leave zero_shard 0", "zero_shard")
        if self.zero_shard >= ranks or ranks % self.zero_shard or self.zero_shard % self.cp:
            raise InfeasiblePlan(
                f"zero_shard must be a multiple of cp that divides dp*cp into two or more shard groups, got "
                f"zero_shard={self.zero_shard}, dp={self.dp} * cp={self.cp} = {ranks} (0 shards over all {ranks})",
                "zero_shard")

    def replace(self, **changes) -> "ParallelPlan":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        """Every field; etp, recompute_modules, moe_capacity_factor, zero_shard and tp_comm_overlap only when set, so the plan
        files (and plan ids) without them stay as they were."""
        d = asdict(self)
        for key in ("etp", "recompute_modules", "moe_capacity_factor", "zero_shard", "tp_comm_overlap"):
            if not d[key]:
                del d[key]
        if "recompute_modules" in d:
            d["recompute_modules"] = list(d["recompute_modules"])
        return d

    @classmethod
    def from_dict(cls, data: dict, what: str = "parallel") -> "ParallelPlan":
        if not isinstance(data, dict):
            raise SchemaError(f"{what} must be a JSON object")
        refuse_unknown_fields(data, cls.__dataclass_fields__, what)  # "tensor_parallel" would run as tp=1
        issues = Issues(what)
        validate_parallel(data, issues, prefix="")
        issues.raise_if_any()
        if "recompute_modules" in data:
            data = {**data, "recompute_modules": tuple(data["recompute_modules"])}
        return cls(**data)

    def check(self, model: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
              allow_tp_across_nodes: bool = False) -> None:
        """Raise InfeasiblePlan (with a reason tag) for the first rule this plan breaks, in this order:
        the degrees, the pipeline, ZeRO's shard group, the sequence splits, the batch and recompute,
        the experts."""
        self._check_degrees(model, cluster, allow_tp_across_nodes)
        self._check_pipeline(model)
        if self.zero_shard:
            self._check_zero_shard()
        self._check_sequence_splits(training)
        self._check_batch_and_recompute(model, training)
        self._check_experts(model, training)

    def _check_degrees(self, model: ModelSpec, cluster: ClusterSpec, allow_tp_across_nodes: bool) -> None:
        if self.etp < 0:
            raise InfeasiblePlan(f"etp must be a positive integer (or 0 for etp = tp), got etp={self.etp}",
                                 "non_positive")
        for key in ("dp", "tp", "pp", "cp", "vpp", "micro_batch_size", "num_microbatches", "ep"):
            v = getattr(self, key)
            if v < 1:
                raise InfeasiblePlan(f"{key} must be a positive integer, got {key}={v}", "non_positive")
        if self.num_gpus != cluster.num_gpus:
            raise InfeasiblePlan(
                f"dp*tp*pp*cp must equal the GPU count, got dp={self.dp} * tp={self.tp} * pp={self.pp} "
                f"* cp={self.cp} = {self.num_gpus}, num_gpus={cluster.num_gpus}", "degree_product")
        if model.num_heads % self.tp or model.num_kv_heads % self.tp:
            raise InfeasiblePlan(
                f"tp must divide num_heads and num_kv_heads, got tp={self.tp}, "
                f"num_heads={model.num_heads}, num_kv_heads={model.num_kv_heads}", "tp_divides_heads")
        if self.tp > cluster.gpus_per_node and not allow_tp_across_nodes:
            raise InfeasiblePlan(
                f"tp={self.tp} crosses nodes of {cluster.gpus_per_node} GPUs; tensor parallelism needs "
                f"NVLink (pass --allow-tp-across-nodes to permit it)", "tp_across_nodes")
        if cluster.gpus_per_node % self.tp and self.tp < cluster.gpus_per_node:
            raise InfeasiblePlan(
                f"tp must divide gpus_per_node so TP groups stay inside a node, got tp={self.tp}, "
                f"gpus_per_node={cluster.gpus_per_node}", "tp_divides_node")

    def _check_pipeline(self, model: ModelSpec) -> None:
        if self.pp > model.num_layers:
            raise InfeasiblePlan(
                f"every pipeline stage needs a layer, got pp={self.pp} > num_layers={model.num_layers}",
                "pp_divides_layers")
        if self.vpp > 1 and self.pp * self.vpp > model.num_layers:
            raise InfeasiblePlan(
                f"interleaving (vpp > 1) needs a layer in every virtual stage: pp*vpp <= num_layers, got "
                f"pp={self.pp} * vpp={self.vpp} = {self.pp * self.vpp}, num_layers={model.num_layers}",
                "pp_divides_layers")
        if self.vpp > 1 and self.pp == 1:
            raise InfeasiblePlan(f"vpp={self.vpp} needs pp > 1 (interleaving splits pipeline stages)", "vpp_needs_pp")
        if self.vpp > 1 and self.num_microbatches % self.pp:
            raise InfeasiblePlan(
                f"interleaved 1F1B needs num_microbatches divisible by pp, got "
                f"num_microbatches={self.num_microbatches}, pp={self.pp}", "vpp_microbatches")

    def _check_sequence_splits(self, training: TrainingSpec) -> None:
        if self.sequence_parallel and self.tp == 1:
            raise InfeasiblePlan("sequence_parallel needs tp > 1 (it shards along the TP group)", "sp_needs_tp")
        if self.tp_comm_overlap and self.tp == 1:
            raise InfeasiblePlan("tp_comm_overlap needs tp > 1 (it overlaps the TP group's collectives)",
                                 "tp_overlap_needs_tp")
        if self.sequence_parallel and (training.seq_len // self.cp) % self.tp:
            # The sequence (each cp rank's part of it) is split evenly over the TP group (Megatron
            # refuses an uneven split too).
            raise InfeasiblePlan(
                f"sequence_parallel needs seq_len/cp divisible by tp, got seq_len={training.seq_len}, "
                f"cp={self.cp}, tp={self.tp}", "sp_divides_seq")
        if self.cp > 1 and training.seq_len % (2 * self.cp):
            raise InfeasiblePlan(
                f"cp needs seq_len divisible by 2*cp (load-balanced causal chunks), got seq_len="
                f"{training.seq_len}, cp={self.cp}", "cp_divides_seq")

    def _check_batch_and_recompute(self, model: ModelSpec, training: TrainingSpec) -> None:
        if not 0 <= self.zero_stage <= 3:
            raise InfeasiblePlan(f"zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}", "zero_stage")
        if self.dp * self.micro_batch_size * self.num_microbatches != training.global_batch_size:
            raise InfeasiblePlan(
                f"global_batch_size must equal dp*micro_batch_size*num_microbatches, got "
                f"{training.global_batch_size} != dp={self.dp} * micro_batch_size={self.micro_batch_size} "
                f"* num_microbatches={self.num_microbatches}", "batch_product")
        if self.recompute not in RECOMPUTE_POLICIES:
            raise InfeasiblePlan(
                f"recompute must be one of {RECOMPUTE_POLICIES}, got {self.recompute!r}", "recompute_policy")
        per_stage = self.layers_per_stage(model.num_layers)
        if self.recompute == "full" and not 1 <= self.recompute_num_layers <= per_stage:
            raise InfeasiblePlan(
                f"recompute='full' needs 1 <= recompute_num_layers <= layers per stage ({per_stage}), "
                f"got {self.recompute_num_layers}", "recompute_layers")
        if self.recompute != "full" and self.recompute_num_layers != 0:
            raise InfeasiblePlan(
                f"recompute_num_layers counts fully recomputed layers; it must be 0 with "
                f"recompute={self.recompute!r}, got {self.recompute_num_layers}", "recompute_layers")
        self._check_recompute_modules(model)

    def _check_experts(self, model: ModelSpec, training: TrainingSpec) -> None:
        if self.moe_capacity_factor < 0 or (self.moe_capacity_factor and not model.is_moe):
            raise InfeasiblePlan(f"moe_capacity_factor must be 0 (dropless) or positive, for a mixture-of-experts "
                                 f"model only, got {self.moe_capacity_factor}", "moe_capacity_factor")
        if training.moe_load_imbalance and not model.is_moe:
            raise InfeasiblePlan(f"moe_load_imbalance={training.moe_load_imbalance:g} is the routing of a "
                                 f"mixture-of-experts model; {model.name} has no experts", "moe_load_imbalance")
        if (self.ep > 1 or self.expert_tp != self.tp) and not model.is_moe:
            raise InfeasiblePlan(f"ep={self.ep} and etp={self.etp} need a mixture-of-experts model",
                                 "ep_needs_moe")
        if model.is_moe:
            # Megatron-Core regroups the tp*cp*dp ranks of a pipeline stage as etp x ep x edp
            # (megatron/core/parallel_state.py core_v0.16.1 lines 788-795: world_size divisible by
            # etp*ep*pp) and splits the experts over ep (megatron/training/arguments.py lines
            # 1025-1028). With etp = tp (the default) this is the older rule: ep divides dp*cp.
            etp, ranks = self.expert_tp, self.tp * self.cp * self.dp
            if model.num_experts % self.ep or ranks % (self.ep * etp):
                raise InfeasiblePlan(
                    f"ep must divide num_experts and ep*etp must divide tp*cp*dp, got ep={self.ep}, etp={etp}, "
                    f"num_experts={model.num_experts}, tp*cp*dp={self.tp}*{self.cp}*{self.dp}={ranks}"
                    + (f" (with etp = tp: ep must divide dp*cp={self.dp * self.cp})" if etp == self.tp else ""),
                    "ep_divides")
            if etp != self.tp and model.expert_ffn_size % etp:
                raise InfeasiblePlan(
                    f"etp must divide the expert's inner size, got etp={etp}, "
                    f"expert ffn size={model.expert_ffn_size}", "etp_divides_ffn")

    def _check_recompute_modules(self, model: ModelSpec) -> None:
        """Megatron-Core's rules for --recompute-modules (transformer_config.py core_v0.16.1 lines
        1196-1221): known names, under selective granularity; mla_up_proj needs MLA (moe_act also
        needs grouped GEMM, which autoplan's MoE always assumes). A module the model lacks (mlp in an
        all-MoE model) recomputes nothing, as in Megatron."""
        if not self.recompute_modules:
            return
        unknown = [m for m in self.recompute_modules if m not in RECOMPUTE_MODULES]
        if unknown or self.recompute != "selective":
            raise InfeasiblePlan(
                f"recompute_modules must name modules of {RECOMPUTE_MODULES} under recompute='selective', got "
                f"recompute={self.recompute!r}, recompute_modules={list(self.recompute_modules)}", "recompute_modules")
        if "mla_up_proj" in self.recompute_modules and not model.is_mla:
            raise InfeasiblePlan("recompute_modules names mla_up_proj, which needs multi-latent attention "
                                 f"(an MLA model), got model {model.name!r}", "recompute_modules")


class ComputeMode(NamedTuple):
    fsdp: bool
    """FSDP2 wraps the model (else DDP, or nothing at one replica)."""
    bf16_weight_copies: bool
    """FSDP2's mixed precision hands the forward bf16 copies of the fp32 weights; else fp32 weights
    run under bf16 autocast."""


def compute_mode(plan: ParallelPlan, model: ModelSpec, bf16_params: bool = True) -> ComputeMode:
    """How autoplan's executor computes `plan`: the rule the executor applies
    (executor/torch_backend/train.py PlanRunner) and the cost model prices
    (cost_model/eager_activations.py autocast_for). FSDP2 wraps where ZeRO shards over several
    replicas (dp * cp), and, for its mixed precision (fp32 master, bf16 compute copies), at one
    replica too; MoE at one replica keeps autocast, and MoE without ZeRO runs on fp32 weights.
    `bf16_params`: the executor's bf16-params speed-up is on (its default)."""
    replicas = plan.dp * plan.cp
    fsdp = (plan.zero_stage > 0 and replicas > 1) or (replicas == 1 and bf16_params and not model.is_moe)
    return ComputeMode(fsdp, fsdp and bf16_params and (not model.is_moe or plan.zero_stage > 0))
