"""The suite's hooks and autouse fixtures; what tests share to import is in tests/helpers."""

import os

import pytest
import torch

from tests.helpers.common import SHARED_DATA, missing_shared_data, write_tiny_model_directory

REQUIRE_DATA = "VASWANI_REQUIRE_DATA"  # set by .ci/run: a test that needs the shared data never skips there


def pytest_collection_modifyitems(config, items):
    """Tests marked shared_data (they read Multi30k, Tiny Shakespeare or SST-2) skip, saying why, where the
    project's shared data is not beside the checkout; under VASWANI_REQUIRE_DATA=1 (CI) the run stops instead, so
    that a suite without its data cannot pass on skips."""
    missing = missing_shared_data()
    needing = [item for item in items if item.get_closest_marker("shared_data")]
    if not missing or not needing:
        return
    what = f"{SHARED_DATA} lacks {', '.join(missing)}"
    if os.environ.get(REQUIRE_DATA):
        raise pytest.UsageError(
            f"{what}: {len(needing)} tests read it; put the project's shared data beside the checkout "
            f"({REQUIRE_DATA}=1 makes their skip an error)"
        )
    reason = f"{what}: this test reads the project's shared data (Multi30k, Tiny Shakespeare, SST-2)"
    for item in needing:
        item.add_marker(pytest.mark.skip(reason=reason))


if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n N: N processes share the cores, one thread each
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _int8_everywhere(monkeypatch):
    """The suite's tiny models run every product in int8 under --precision int8, as models of real size do (a
    layer under int8.FLOAT32_BELOW weights stays float32: tests/nn/test_int8.py checks that rule apart)."""
    from vaswani.nn.cpu_linear import int8

    monkeypatch.setattr(int8, "FLOAT32_BELOW", 0)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """A model directory with a real BPE tokenizer and an untrained tiny model (write_tiny_model_directory), built
    once for the modules that only read it; a module that changes its directory makes its own."""
    return write_tiny_model_directory(tmp_path_factory.mktemp("model"))
