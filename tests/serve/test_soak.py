"""benchmarks/soak.py's core, briefly (issue 60): the real `vaswani serve` under 8 client threads for 10 seconds,
a quarter of the requests malformed; every valid request answered with its own translations (those of its texts
translated before the load), every malformed one with its own 4xx, none with a 5xx. The 5-minute run is the
benchmark's."""

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.helpers.common import write_tiny_model_directory
from vaswani.serve.launch import launch

pytestmark = pytest.mark.shared_data  # reads ../shared/data (tests/conftest.py skips it where absent)

SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"


def _soak_module():
    """benchmarks/soak.py, imported by path (benchmarks/ is no package); in sys.modules first, as dataclasses need."""
    spec = importlib.util.spec_from_file_location("benchmarks_soak", SOAK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # about 20 s: a tokenizer trained, a server started, 10 s of load
def test_a_short_soak_answers_every_request_with_its_own_translations(tmp_path):
    soak = _soak_module()
    model_dir = write_tiny_model_directory(tmp_path, max_len_a=0.0, max_len_b=8)  # translations of 8 tokens: fast
    args = ("--device", "cpu", "--precision", "fp32", "--log-level", "warning")
    with launch(model_dir, *args, env={"OMP_NUM_THREADS": "1"}) as server:  # one thread: the CI's cores are shared
        result = soak.soak(server.url, server.process.pid, clients=8, seconds=10, pool=8, warmup=0, every=1)
        log = server.output()
    assert result["five_xx"] == 0 and result["swapped"] == 0, result["swapped_examples"]
    assert set(result["valid_by_status"]) == {"200"} and result["valid_by_status"]["200"] >= 8, result
    assert not result["malformed_unexpected"], result["malformed_unexpected"]
    assert sum(result["malformed_by_status"].values()) >= 2, result  # a quarter of the requests, at random
    assert "Traceback" not in log, log[-2000:]
