"""docs/architecture.md's floors are import-linter contracts (pyproject.toml [tool.importlinter]): the tree keeps them,
and an import that runs back up a floor breaks them (so the check can fail)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = shutil.which("lint-imports")
pytestmark = pytest.mark.skipif(LINT is None, reason="import-linter is not installed (pip install -e '.[dev]')")


def _lint(root: Path) -> subprocess.CompletedProcess:
    """lint-imports over the package under `root`/src with `root`'s pyproject.toml."""
    env = {"PYTHONPATH": str(root / "src"), "PATH": str(Path(sys.executable).parent)}
    return subprocess.run(
        [LINT, "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_tree_keeps_its_floors():
    run = _lint(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 kept, 0 broken" in run.stdout


@pytest.mark.parametrize(
    ("module", "back_arrow"),
    [
        ("nn/masks.py", "from vaswani.decode import request"),  # nn below decode
        ("runtime/machine.py", "import vaswani.serve.metrics"),  # runtime below serve
        ("translate/quality.py", "from vaswani.cli import serve"),  # nothing imports cli
        ("decode/hypothesis.py", "from vaswani import pretrained"),  # rooms of one floor apart
    ],
)
def test_an_import_back_up_a_floor_breaks_the_contract(tmp_path, module, back_arrow):
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    path = tmp_path / "src/vaswani" / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n\ndef _late():\n    {back_arrow}\n", encoding="utf-8")
    run = _lint(tmp_path)
    assert run.returncode != 0 and "0 kept, 1 broken" in run.stdout, run.stdout + run.stderr
    assert module.removesuffix(".py").replace("/", ".") in run.stdout  # the importer named
