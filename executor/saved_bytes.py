"""How many bytes autograd keeps for the backward: the activation memory of a forward, measured
with `torch.autograd.graph.saved_tensors_hooks` on any device (CPU included).

Each saved tensor is counted by its storage, once (views of one storage, and the same tensor saved
by several operations, count once); parameters are left out (they are held whatever is saved).
"""
from __future__ import annotations

from typing import Callable

import torch


def saved_bytes(forward: Callable[[], torch.Tensor], exclude: list[torch.Tensor] = ()) -> tuple[torch.Tensor, int]:
    """Run `forward()` and return (its output, bytes of the distinct storages saved for backward
    other than those of `exclude`, e.g. the model's parameters)."""
    excluded = {t.untyped_storage().data_ptr() for t in exclude}
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in excluded and tensor.device.type != "meta":
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = forward()
    return out, sum(storages.values())
