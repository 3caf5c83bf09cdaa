"""Test tiers (DESIGN.md): default CPU tests; `@pytest.mark.gpu` skipped where CUDA is absent."""
import importlib.util

import pytest


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (a GPU machine); this one has none")
    for item in gpu_items:
        item.add_marker(skip)
