import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip with reason "no GPU" where torch sees no CUDA device."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason="no GPU")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def device() -> str:
    """Where kernel tests run: "cuda" (the compiled kernel) when torch sees a GPU, else
    "cpu" (the same kernel under Triton's interpreter)."""
    return "cuda" if _cuda_available() else "cpu"
