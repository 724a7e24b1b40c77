"""The suite itself: without the shared data its tests skip saying so, and under CI (VASWANI_REQUIRE_DATA=1, set
by .ci/run) the run fails instead of going green on skips."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.shared_data  # it runs a module that reads ../shared/data


def _pytest(tmp_path, **env):
    environment = {**os.environ, "VASWANI_SHARED_DATA": str(tmp_path / "nothing"), **env}
    environment.pop("VASWANI_REQUIRE_DATA", None) if "VASWANI_REQUIRE_DATA" not in env else None
    args = [sys.executable, "-m", "pytest", "tests/test_viz.py", "-p", "no:cacheprovider", "-o", "addopts=", "-rs"]
    args += ["-k", "panels_follow_layer_and_head"]  # one test of the module: the rule is the module's marker
    return subprocess.run(args, env=environment, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a pytest of its own (~3 s); the inner loop keeps the CI rule's test below
def test_without_the_shared_data_its_tests_skip_saying_why(tmp_path):
    run = _pytest(tmp_path)
    assert run.returncode == 0, run.stdout[-2000:]
    assert "skipped" in run.stdout and "passed" not in run.stdout
    assert "lacks multi30k/raw/train.de.gz" in run.stdout


def test_under_ci_a_missing_shared_data_fails_the_run(tmp_path):
    run = _pytest(tmp_path, VASWANI_REQUIRE_DATA="1")
    assert run.returncode != 0
    assert "put the project's shared data beside the checkout" in run.stdout + run.stderr
    assert "passed" not in run.stdout and "skipped" not in run.stdout


def test_no_test_module_imports_another():
    """What tests share lives in tests/helpers (or tests/fuzz): a test module imported by another runs its tests'
    module-level code twice and ties the two modules' fixtures together."""
    from pathlib import Path

    tests = Path(__file__).parent
    importing = [
        str(path.relative_to(tests))
        for path in tests.rglob("test_*.py")
        if any(
            line.startswith(("from tests.", "import tests.")) and ".test_" in line.split(" import ")[0]
            for line in path.read_text(encoding="utf-8").splitlines()
        )
    ]
    assert not importing, importing


@pytest.mark.slow  # a pytest of its own (~3 s)
def test_with_the_shared_data_the_same_module_runs(tmp_path):
    run = _pytest(tmp_path, VASWANI_SHARED_DATA=os.environ.get("VASWANI_SHARED_DATA", ""), VASWANI_REQUIRE_DATA="1")
    assert run.returncode == 0 and "passed" in run.stdout and "skipped" not in run.stdout, run.stdout[-2000:]
