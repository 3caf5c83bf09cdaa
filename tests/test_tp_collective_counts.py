"""How many TP collectives a layer issues under two real DTensor plans, counted on torch's own code.

`Framework.tp_backward_input_reductions` says how many input-gradient reductions a layer's backward
issues. It is not fitted: these tests count it by running torch.distributed.tensor.parallel on a
2-rank fake process group (torch's FakeStore backend: collectives are recorded, not sent), once with
torchtitan's plan (a PrepareModuleInput gathers each block's input once; the q/k/v and w1/w3
projections read that replicated input) and once with KempnerForge's (each of q, k, v, gate and up is
a ColwiseParallel with its own `input_layouts=Shard(1)`, kempnerforge/distributed/tensor_parallel.py
_build_block_tp_plan). The cost model's layer times are then checked against the counts.
"""
import collections

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

from autoplan.specs import ClusterSpec, ParallelPlan, TrainingSpec  # noqa: E402
from cost_model.profiles import builtin_profile  # noqa: E402

DIM, FFN, SEQ, BATCH = 64, 128, 16, 2


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))

    def forward(self, x):
        return self.o_proj(self.q_proj(x) * torch.sigmoid(self.k_proj(x)) + self.v_proj(x))


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(DIM, FFN, bias=False), nn.Linear(DIM, FFN, bias=False)
        self.down_proj = nn.Linear(FFN, DIM, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm, self.attention = nn.RMSNorm(DIM), _Attention()
        self.mlp_norm, self.mlp = nn.RMSNorm(DIM), _MLP()

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.mlp(self.mlp_norm(h))


@pytest.fixture(scope="module")
def mesh():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    yield init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    dist.destroy_process_group()


def _parallel_block(mesh, plan_kind: str, sequence_parallel: bool):
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    block = _Block()
    sharded = {"input_layouts": Shard(1)} if sequence_parallel else {}
    row = RowwiseParallel(output_layouts=Shard(1)) if sequence_parallel else RowwiseParallel()
    projections = ("attention.q_proj", "attention.k_proj", "attention.v_proj", "mlp.gate_proj", "mlp.up_proj")
    if plan_kind == "kempnerforge":       # every column-parallel projection redistributes its own input
        plan = {name: ColwiseParallel(**sharded) for name in projections}
    else:                                 # torchtitan: each block's input gathered once
        plan = {name: ColwiseParallel() for name in projections}
        if sequence_parallel:
            for block_name in ("attention", "mlp"):
                plan[block_name] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    plan.update({"attention.o_proj": row, "mlp.down_proj": row})
    if sequence_parallel:
        plan.update({"attention_norm": SequenceParallel(), "mlp_norm": SequenceParallel()})
    parallelize_module(block, mesh, plan)
    x = torch.randn(BATCH, SEQ // 2 if sequence_parallel else SEQ, DIM, requires_grad=True)
    if sequence_parallel:
        # As KempnerForge's hooks do: the block outputs stay sequence-sharded DTensors.
        def keep_sharded(module, args, out):
            return out if isinstance(out, DTensor) else DTensor.from_local(out, mesh, [Shard(1)])
        block.attention.register_forward_hook(keep_sharded)
        block.mlp.register_forward_hook(keep_sharded)
        x = DTensor.from_local(x, mesh, [Shard(1)])
    return block, x


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _eager_counts(block, x) -> tuple:
    from torch.distributed.tensor.debug import CommDebugMode

    def counts(mode):
        return {str(op).split(".")[-1]: n for op, n in mode.get_comm_counts().items() if n}
    forward, backward = CommDebugMode(), CommDebugMode()
    with forward:
        out = block(x)
    with backward:
        _local(out).sum().backward()
    return counts(forward), counts(backward)


def _compiled_counts(block, x) -> tuple:
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from functorch.compile import make_boxed_func

    graphs = {}

    def counting(tag):
        def compiler(gm, example_inputs):
            graphs[tag] = dict(collections.Counter(
                str(n.target).split(".")[-2] for n in gm.graph.nodes
                if n.op == "call_function" and "c10d_functional" in str(n.target) and "wait" not in str(n.target)))
            return make_boxed_func(gm)
        return compiler
    torch._dynamo.reset()
    compiled = torch.compile(block, backend=aot_autograd(fw_compiler=counting("fwd"), bw_compiler=counting("bwd"),
                                                         partition_fn=min_cut_rematerialization_partition))
    _local(compiled(x)).sum().backward()
    return graphs["fwd"], graphs["bwd"]


def test_torchtitans_plan_reduces_each_blocks_input_gradient_once(mesh):
    fwd, bwd = _eager_counts(*_parallel_block(mesh, "torchtitan", sequence_parallel=True))
    assert fwd == {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 2}
    assert bwd == {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 2}
    from cost_model.constants import load_constants
    assert load_constants().framework("torchtitan").tp_backward_input_reductions == 0    # one per block


def test_kempnerforges_plan_reduces_five_input_gradients_and_compile_merges_its_gathers(mesh):
    from autoplan.specs.frameworks.torchtitan import KEMPNERFORGE_FACTS

    eager_fwd, eager_bwd = _eager_counts(*_parallel_block(mesh, "kempnerforge", sequence_parallel=True))
    assert eager_fwd == {"all_gather_into_tensor": 5, "reduce_scatter_tensor": 2}
    assert eager_bwd == {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 5}
    fwd, bwd = _compiled_counts(*_parallel_block(mesh, "kempnerforge", sequence_parallel=True))
    assert fwd == {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 2}
    assert bwd == {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 5}
    plain_fwd, plain_bwd = _eager_counts(*_parallel_block(mesh, "kempnerforge", sequence_parallel=False))
    assert plain_fwd == {"all_reduce": 2} and plain_bwd == {"all_reduce": 5}
    assert KEMPNERFORGE_FACTS["tp_backward_input_reductions"] == bwd["reduce_scatter_tensor"] == plain_bwd["all_reduce"]


@pytest.mark.parametrize("sequence_parallel", [True, False])
def test_layer_times_price_the_counted_reductions(sequence_parallel):
    # A Llama-3-8B layer at tp 4, 1 x 4096 tokens: the activation buffer is 2 B x 4096 x 4096. Under SP the
    # backward is 2 all-gathers + 5 reduce-scatters with KempnerForge's count, 2 + 2 with the default;
    # without SP 5 all-reduces against 2. The forward is 2 + 2 (or 2 all-reduces) either way.
    from autoplan.inputs.catalog import resolve_model
    from cost_model.constants import load_constants
    from cost_model.estimator import Estimator
    from cost_model.tables import ProfileTables

    model = resolve_model("llama-3-8b")
    plan = ParallelPlan(dp=1, tp=4, sequence_parallel=sequence_parallel, micro_batch_size=1, num_microbatches=1)
    training = TrainingSpec(global_batch_size=1, seq_len=4096)
    cluster = ClusterSpec(name="h100", num_gpus=4, gpus_per_node=8, profile="builtin:h100-80gb")
    titan = load_constants().framework("torchtitan")
    layer = {}
    for name, fw in (("default", titan), ("five", titan.with_overrides(tp_backward_input_reductions=5))):
        details = Estimator(model, training, cluster, builtin_profile("h100-80gb"), framework=fw).estimate(plan).details
        layer[name] = (details["layer_tp_comm_total_s"], details["tp_bytes_per_layer_microbatch"])
    tables = ProfileTables(builtin_profile("h100-80gb"))
    buffer = 2 * 4096 * 4096
    if sequence_parallel:
        gather, scatter = (tables.collective_time_s(op, buffer, 4, 4) for op in ("all_gather", "reduce_scatter"))
        assert layer["default"][0] == pytest.approx((2 + 2) * gather + (2 + 2) * scatter, rel=1e-12)
        assert layer["five"][0] == pytest.approx((2 + 2) * gather + (2 + 5) * scatter, rel=1e-12)
        assert layer["five"][1] == pytest.approx((4 + 7) * 3 / 4 * buffer, rel=1e-12)
    else:
        all_reduce = tables.collective_time_s("all_reduce", buffer, 4, 4)
        assert layer["default"][0] == pytest.approx((2 + 2) * all_reduce, rel=1e-12)
        assert layer["five"][0] == pytest.approx((2 + 5) * all_reduce, rel=1e-12)
        assert layer["five"][1] == pytest.approx(2 * (2 + 5) * 3 / 4 * buffer, rel=1e-12)

