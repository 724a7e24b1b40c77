"""The suite's hooks and autouse fixtures; what tests share to import is in tests/helpers."""

import pytest
import torch

from tests.helpers.common import SHARED_DATA, write_tiny_model_directory


def pytest_collection_modifyitems(config, items):
    """Tests marked shared_data (they read Multi30k, Tiny Shakespeare or SST-2) skip, saying why, where the
    project's shared data is not beside the checkout."""
    if SHARED_DATA.is_dir():
        return
    reason = f"{SHARED_DATA} is absent: this test reads the project's shared data (Multi30k, Tiny Shakespeare, SST-2)"
    for item in items:
        if item.get_closest_marker("shared_data"):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """A model directory with a real BPE tokenizer and an untrained tiny model (write_tiny_model_directory), built
    once for the modules that only read it; a module that changes its directory makes its own."""
    return write_tiny_model_directory(tmp_path_factory.mktemp("model"))
