import gzip
import io
import os
import subprocess
import sys

import pytest
from rich.console import Console

from vaswani import __version__
from vaswani.cli.lines import Lines
from vaswani.data.corpus import read_lines


def test_the_help_imports_no_torch():
    code = (
        "import sys\nfrom vaswani.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "translate" in run.stdout and run.stdout.splitlines()[-1] == "False"


@pytest.mark.slow
def test_python_m_vaswani_cli_is_the_command_with_its_exit_codes(tmp_path):
    version = subprocess.run(
        [sys.executable, "-m", "vaswani.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert version.returncode == 0 and version.stdout == f"vaswani {__version__}\n"
    missing = subprocess.run(
        [sys.executable, "-m", "vaswani.cli", "prepare", str(tmp_path / "nope.yaml"), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "VASWANI_THREADS": "1"},  # no line about threads a busy CPU leaves (runtime/threads.py)
    )
    assert missing.returncode == 2 and missing.stderr.startswith("vaswani: error: ")
    assert "nope.yaml" in missing.stderr and len(missing.stderr.splitlines()) == 1
    unknown = subprocess.run([sys.executable, "-m", "vaswani.cli", "nope"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr  # argparse's own usage error


def test_lines_answer_line_by_line_and_name_the_lines_with_invalid_utf8(tmp_path):
    source, output = tmp_path / "in.txt.gz", tmp_path / "out.txt"
    source.write_bytes(gzip.compress(b"eins\nzw\xffei\n\n drei\r\nvier"))  # no final newline: still a line
    console = Console(file=io.StringIO(), width=200)
    chunks = []
    with Lines(str(source), str(output), console) as lines:
        assert lines.total == 5
        for first, chunk in lines.chunks(3):
            if chunks:  # the answers to a chunk are out before the next one is read (a terminal waits for them)
                assert output.read_text(encoding="utf-8").splitlines() == [s.upper() for s in chunks[-1][1]]
            chunks.append((first, chunk))
            lines.write(s.upper() for s in chunk)
    expected = read_lines(source, "replace")
    assert [first for first, _ in chunks] == [0, 3]
    assert [s for _, chunk in chunks for s in chunk] == expected
    assert output.read_text(encoding="utf-8") == "".join(s.upper() + "\n" for s in expected)
    assert console.file.getvalue() == "vaswani: warning: line 2: invalid UTF-8, replaced with U+FFFD\n"


def test_lines_check_the_input_before_opening_the_output(tmp_path):
    console = Console(file=io.StringIO())
    with pytest.raises(ValueError, match=r"missing\.txt: file not found"):
        Lines(str(tmp_path / "missing.txt"), str(tmp_path / "out.txt"), console)
    assert not (tmp_path / "out.txt").exists()
