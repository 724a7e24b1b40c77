"""The corpus surface: parallel text as users bring it to `vaswani prepare` / `train`, and text to `vaswani
translate`: line counts that differ, invalid UTF-8, a BOM, CRLF line ends, lone carriage returns, NUL bytes, empty
and huge (up to 100,000 characters) lines, any Unicode, gzip files whole, truncated or corrupt.

The promise (issue 60): preparing reads every pair and accounts for it (pairs kept + pairs removed with a reason =
the input's pairs, the kept ones those the filters keep, their ids the tokenizer's for the lines as read), and
reading for translation gives one line per input line, in order, and one translation per line, each without a
line break; or a one-line DataError naming the file (and the line where one is at fault) and the fix. The lines
as read are the file's lines split at \\n alone, a BOM at its start dropped, invalid UTF-8 refused (or replaced
with U+FFFD where asked), NUL, CR and U+2028/9 made spaces, surrounding whitespace removed."""

from __future__ import annotations

import contextlib
import gzip
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.fuzz import Surface, quiet, text, tiny_translator
from tests.fuzz.config_yaml import SECONDS, deadline

BOM = b"\xef\xbb\xbf"
SPACED = ("\x00", "\r", "\u2028", "\u2029")
MODES = ("prepare", "prepare", "translate", "read")
SAMPLES = [
    b"",
    b"   ",
    "Ein Mann fährt Fahrrad.".encode(),
    b"A man rides a bike.",
    b"a\rb",
    b"a\x00b",
    b"\xff\xfe",
    b"caf\xe9",  # Latin-1
    b"\xe2\x80\xa8split?",  # U+2028
    BOM + b"mid-line BOM",
    b"\xed\xa0\x80",  # an encoded surrogate: not UTF-8
    b"\xc3",  # cut in the middle of a character
    b"\t\x0b\x0c\x1c\x85",
]


@dataclass(frozen=True)
class Case:
    """Two files' uncompressed bytes, how they are stored, the path that reads them and how it is set up."""

    src: bytes
    tgt: bytes
    mode: str  # prepare (vaswani prepare / train), translate (vaswani translate's input), read (read_parallel)
    gz: bool = False
    damage: str = ""  # a .gz "truncated" or "corrupt"
    cut: int = 0  # where (a fraction of 1000 of the compressed size)
    invalid_utf8: str = "error"
    max_len: int = 256
    valid: bool = False  # prepare: the files are the dev set too


def _line() -> st.SearchStrategy[bytes]:
    """One line's bytes, without a line end: any Unicode, a sample of the awkward ones, bytes, or a huge line."""
    unicode = text(max_size=40).map(str.encode)
    return st.one_of(
        unicode,
        unicode,
        unicode,
        st.sampled_from(SAMPLES),
        st.binary(max_size=12),
        st.integers(1000, 100_000).map(lambda n: (b"ein Mann " * (n // 9 + 1))[:n]),
    )


@st.composite
def _file(draw: st.DrawFn, count: int) -> bytes:
    """`count` lines joined by \\n or \\r\\n, the last one ended or not, perhaps after a BOM."""
    lines = draw(st.lists(_line(), min_size=count, max_size=count))
    end = draw(st.sampled_from([b"\n", b"\n", b"\r\n"]))
    data = end.join(lines) + (end if lines and draw(st.booleans()) else b"")
    return (BOM if draw(st.booleans()) else b"") + data


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """A pair of files as users bring them, to one of the three paths that read such text."""
    mode = draw(st.sampled_from(MODES))
    count = draw(st.integers(0, 6 if mode == "translate" else 10))
    other = count if draw(st.integers(0, 5)) else draw(st.integers(0, 10))  # mostly aligned
    gz = draw(st.integers(0, 4)) == 0
    return Case(
        src=draw(_file(count)),
        tgt=draw(_file(other)),
        mode=mode,
        gz=gz,
        damage=draw(st.sampled_from(["", "", "truncated", "corrupt"])) if gz else "",
        cut=draw(st.integers(0, 999)),
        invalid_utf8=draw(st.sampled_from(["error", "replace"])),
        max_len=draw(st.sampled_from([256, 256, 8])),
        valid=draw(st.booleans()),
    )


@dataclass(frozen=True)
class Expected:
    """One file's lines as the promise reads them (invalid UTF-8 replaced), and the lines holding invalid UTF-8."""

    lines: list[str]
    invalid: list[int]


def expected(raw: bytes) -> Expected:
    """The lines of a file's (uncompressed) bytes as the promise above reads them."""
    raw = raw[len(BOM) :] if raw.startswith(BOM) else raw
    parts = raw.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    lines, invalid = [], []
    for number, part in enumerate(parts, start=1):
        try:
            line = part.decode("utf-8")
        except UnicodeDecodeError:
            line = part.decode("utf-8", errors="replace")
            invalid.append(number)
        for char in SPACED:
            line = line.replace(char, " ")
        lines.append(line.strip())
    return Expected(lines, invalid)


def _stored(raw: bytes, case: Case, damaged: bool) -> bytes:
    """The file's bytes on disk: as they are, or gzipped, and for the damaged one truncated or with bytes flipped."""
    if not case.gz:
        return raw
    data = gzip.compress(raw, mtime=0)
    if not damaged or not case.damage:
        return data
    at = case.cut * (len(data) - 1) // 1000
    if case.damage == "truncated":
        return data[:at]
    flipped = bytearray(data)
    for i in (at, (at * 7 + 3) % len(data), (at * 13 + 5) % len(data)):
        flipped[max(i, 10) if len(data) > 10 else i] ^= (
            0x5A  # past the 10-byte header: in the deflate stream or trailer
        )
    return bytes(flipped)


def _write(directory: Path, case: Case) -> tuple[Path, Path]:
    """The two files, named as users name them (train.de, train.en, with .gz when gzipped); the source is the one
    a damage hits."""
    suffix = ".gz" if case.gz else ""
    src, tgt = directory / f"train.de{suffix}", directory / f"train.en{suffix}"
    src.write_bytes(_stored(case.src, case, damaged=True))
    tgt.write_bytes(_stored(case.tgt, case, damaged=False))
    return src, tgt


def _allowed(case: Case, src: Path, tgt: Path, a: Expected, b: Expected) -> list[str]:
    """What a refusal of this case may say (a true statement about the input), each naming the file at fault."""
    allowed = []
    if case.damage and src.stat().st_size:  # a .gz truncated to nothing reads as an empty file
        allowed.append(f"{src}: cannot read")
    if case.mode != "translate":
        if len(a.lines) != len(b.lines):
            allowed.append(f"{src} has {len(a.lines)} lines but {tgt} has {len(b.lines)}")
        if case.invalid_utf8 == "error":
            allowed += [f"{path}, line {e.invalid[0]}: invalid UTF-8" for path, e in ((src, a), (tgt, b)) if e.invalid]
    return allowed


def _refused(error: Exception, allowed: list[str]) -> str:
    """A one-line error of the kind the CLI prints, saying one of the things `allowed`."""
    from vaswani.data.corpus import DataError

    message = str(error)
    assert isinstance(error, DataError), f"{type(error).__name__}: {message}"
    assert len(message.splitlines()) == 1, f"not one line: {message!r}"
    assert any(text in message for text in allowed), f"refused with {message!r}; may say only {allowed}"
    return "refused"


def _kept(case: Case, tokenizer: Any, a: Expected, b: Expected) -> list[tuple[list[int], list[int]]]:
    """The pairs preparation keeps, as ids: both sides non-empty, at most max_len pieces, a length ratio of at most
    data.max_len_ratio (4) where both sides have more than 5 pieces."""
    kept = []
    for src, tgt in zip(tokenizer.encode_src(a.lines), tokenizer.encode_tgt(b.lines), strict=True):
        short, long = sorted((len(src), len(tgt)))
        if short and long <= case.max_len and not (short > 5 and long > 4.0 * short):
            kept.append((src, tgt))
    return kept


def _prepare(
    case: Case, src: Path, tgt: Path, context: dict[str, Any], a: Expected, b: Expected, allowed: list[str]
) -> str:
    """`vaswani prepare`'s path (open_or_prepare, one worker, the tiny model's tokenizer): every pair accounted
    for, the kept ones with the ids of the lines as read."""
    from vaswani.data.parallel import Corpus, ParallelRecipe
    from vaswani.data.prepare import open_or_prepare

    recipe = ParallelRecipe(
        corpora=(Corpus("train", str(src), str(tgt)),),
        valid=(str(src), str(tgt)) if case.valid else None,
        vocab_size=context["tokenizer"].src_vocab_size,
        max_len=case.max_len,
        invalid_utf8=case.invalid_utf8,
    )
    kept = _kept(case, context["tokenizer"], a, b) if len(a.lines) == len(b.lines) else []
    if not kept:  # nothing to train on: refused, naming the files
        allowed.append(f"no training pairs left after filtering {src} and {tgt}")
    prepared = open_or_prepare(recipe, src.parent / "prepared", context["tokenizer"], workers=1)
    _none_due(allowed)
    report = prepared.manifest["report"]
    assert report["total"] == len(a.lines), f"{report['total']} pairs read of {len(a.lines)}"
    assert report["kept"] + sum(report["removed"].values()) == report["total"], report
    assert len(prepared.train) == report["kept"] == len(kept), (report, len(kept))
    for i, (ids_src, ids_tgt) in enumerate(kept):
        assert [list(x) for x in prepared.train.pair(i)] == [ids_src, ids_tgt], f"pair {i} is not the lines read"
    if case.valid:
        _check_valid(prepared, report["valid"], a, b)
    return "prepared"


def _check_valid(prepared: Any, report: dict, a: Expected, b: Expected) -> None:
    """The dev set: every pair with both sides kept, with its text as read; the others counted as removed."""
    pairs = [(s, t) for s, t in zip(a.lines, b.lines, strict=True) if s and t]
    assert report["total"] == len(a.lines) and report["kept"] + sum(report["removed"].values()) == len(a.lines), report
    assert [prepared.valid.text(i) for i in range(len(prepared.valid))] == pairs, "the dev set is not the lines read"


def _translate(src: Path, context: dict[str, Any], a: Expected, allowed: list[str]) -> str:
    """`vaswani translate`'s input (LineReader, as cli/lines.py reads it, in chunks of 4): the lines as read, the
    lines with invalid UTF-8 named; one translation per line, none with a line break."""
    from vaswani.data.corpus import LineReader

    reader = LineReader(src)
    assert reader.total == len(a.lines), f"counted {reader.total} lines of {len(a.lines)}"
    lines, translations = [], []
    for first, chunk in reader.chunks(4):
        assert first == len(lines), (first, len(lines))
        lines += chunk
        translations += context["translator"].translate(chunk, beam_size=1)
    _none_due(allowed)
    assert lines == a.lines, "the lines read are not the file's"
    assert reader.replaced == a.invalid, (reader.replaced, a.invalid)
    assert len(translations) == len(lines) and not any("\n" in t or "\r" in t for t in translations), translations
    return "translated"


def check(case: Case, context: dict[str, Any]) -> str:
    """The case's files written into a fresh folder, read by the case's path; the promise checked."""
    directory = Path(tempfile.mkdtemp(dir=context["root"]))
    try:
        src, tgt = _write(directory, case)
        a = expected(case.src) if src.stat().st_size or not case.gz else Expected([], [])
        b = expected(case.tgt)
        allowed = _allowed(case, src, tgt, a, b)
        with quiet(), deadline(SECONDS):
            try:
                return _read(case, src, tgt, context, a, b, allowed)
            except (ValueError, OSError) as error:  # what the CLI prints in one line; anything else is a traceback
                return _refused(error, allowed)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _read(
    case: Case, src: Path, tgt: Path, context: dict[str, Any], a: Expected, b: Expected, allowed: list[str]
) -> str:
    """The case through its path; the lines read checked once no refusal was due."""
    from vaswani.data.corpus import read_parallel

    if case.mode == "translate":
        return _translate(src, context, a, allowed)
    if case.mode == "prepare":
        return _prepare(case, src, tgt, context, a, b, allowed)
    pairs = read_parallel(src, tgt, case.invalid_utf8)
    _none_due(allowed)
    assert pairs == list(zip(a.lines, b.lines, strict=True)), "the pairs read are not the files' lines"
    return "read"


def _none_due(allowed: list[str]) -> None:
    assert not allowed, f"read, though it must be refused saying one of {allowed}"


@contextlib.contextmanager
def tiny_model() -> Iterator[dict[str, Any]]:
    """The suite's tiny Translator (tests/fuzz/__init__.py): its tokenizer prepares, it translates; a temporary
    folder for the cases' files."""
    translator = tiny_translator()
    with tempfile.TemporaryDirectory(prefix="fuzz-corpus-") as root:
        yield {"root": root, "tokenizer": translator.tokenizer, "translator": translator}


SURFACE = Surface("corpus", cases, check, tiny_model)
