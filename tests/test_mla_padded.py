"""The executor's multi-head latent attention pads its values to the q/k head width (executor/blocks.py
LatentAttention), so its attention core does A·V at head_dim: the cost model prices that work for the
framework that runs it (Framework.mla_padded_values), not the architecture's narrower values."""
import pytest

from autoplan.inputs.catalog import catalog_model
from autoplan.specs import get_framework
from cost_model import builtin_profile
from cost_model.layer_time import Rates, layer_times
from cost_model.tables import ProfileTables

DEEPSEEK = catalog_model("deepseek-v3")   # q/k heads 192 wide (128 + 64 rotary), values 128
TABLES = ProfileTables(builtin_profile("h100-80gb"))


def _attention_flops(padded: bool) -> float:
    rates = Rates(gemm_dtype="bf16", matmul_scale=1.0, fp8_scale=1.0, attention_scale=1.0, memory_scale=1.0,
                  flash_attention=True, mla_padded_values=padded)
    return layer_times(DEEPSEEK, TABLES, rates, 1, 4096, tp=1, cp=1, ep=1, sequence_parallel=False,
                       gpus_per_node=8, moe=False).attn_fwd_flops


def test_padded_values_cost_head_dim_wide_work():
    # Causal: 4096^2/2 pairs x 128 heads x 2 FLOPs x (192 for QK^T + 128 or 192 for A·V).
    pairs = 4096 * 4096 / 2
    assert _attention_flops(False) == pytest.approx(2 * pairs * 128 * (192 + 128))
    assert _attention_flops(True) == pytest.approx(2 * pairs * 128 * (192 + 192))
    assert get_framework("autoplan").mla_padded_values and not get_framework("megatron-core").mla_padded_values
