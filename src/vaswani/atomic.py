"""Writing files and directories so that a kill at any moment (kill -9, a power cut) leaves the old version or the
new one, never a mixture or a truncated file. Every writer of a model directory, prepared data, a checkpoint or an
export goes through here.

A file is written to a temporary name beside it, flushed and fsynced, renamed onto its name (rename is atomic on
POSIX) and its directory fsynced, so that the rename itself is durable. A directory is built in a temporary sibling,
every file in it fsynced, then renamed into place: where a complete one is already there, the two are exchanged in
one step (renameat2 RENAME_EXCHANGE on Linux; elsewhere the old one is renamed aside first and recovered by the next
writer when a kill falls between the two renames), and the old one deleted after.

Temporaries are named `.NAME.TAG-PID`: the next writer of NAME removes those whose process is gone (`clean_stale`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

TMP, OLD, DELETED = "tmp", "old", "deleted"
TAGS = (TMP, "partial", OLD, DELETED)  # "partial": prepared data's temporaries (data/store.py)
RENAME_EXCHANGE = 2  # linux/fs.h
AT_FDCWD = -100


def temporary_name(path: Path, tag: str = TMP) -> Path:
    """The name this process writes `path`'s next version under, beside it (the same file system: rename works)."""
    return path.with_name(f".{path.name}.{tag}-{os.getpid()}")


def fsync_file(path: Path) -> None:
    """The file's data on disk: a rename after a write without it may leave an empty file after a power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(path: Path) -> None:
    """The directory's entries on disk: what makes a rename into it durable."""
    with contextlib.suppress(OSError):  # some file systems cannot open or sync a directory; nothing more to do
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_tree(root: Path) -> None:
    """Every file under `root`, then every directory, deepest first: a directory renamed into place holds its data."""
    for top, _, files in os.walk(root, topdown=False):
        for name in files:
            fsync_file(Path(top) / name)
        fsync_directory(Path(top))


def write_file(path: str | Path, write: Callable[[Path], object]) -> None:
    """`write(tmp)` writes the new version at `tmp`; it then replaces `path` in one step. An exception (or a kill)
    in `write` leaves `path` as it was. `tmp` lies in a temporary directory of this process beside `path`, so that
    what `write` itself puts beside `tmp` (safetensors writes through a `.tmpXXXXXX` of its own) is inside it, and
    removed with it by the next writer where a kill left it."""
    path = Path(path)
    clean_stale(path)
    folder = temporary_name(path)
    folder.mkdir()
    tmp = folder / path.name
    try:
        write(tmp)
        fsync_file(tmp)
        os.replace(tmp, path)
    finally:
        remove(folder)
    fsync_directory(path.parent)


def write_bytes(path: str | Path, data: bytes) -> None:
    write_file(path, lambda tmp: tmp.write_bytes(data))


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def copy_file(source: str | Path, path: str | Path) -> None:
    """A copy of `source` at `path`, there whole or not at all."""
    write_file(path, lambda tmp: shutil.copyfile(source, tmp))


def append_line(path: str | Path, line: str) -> None:
    """`line` added to a log of lines (metrics.jsonl) in one write(2) with O_APPEND. A kill can leave at most the
    last line torn; the next append cuts it off first, so every line a reader sees is whole."""
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        _cut_torn_tail(fd)
        os.write(fd, data)
    finally:
        os.close(fd)


def _cut_torn_tail(fd: int) -> None:
    """Truncate the file after its last newline when it does not end with one (a line a kill tore)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    end, chunk = size, 1 << 16
    while end > 0:
        start = max(0, end - chunk)
        at = os.pread(fd, end - start, start).rfind(b"\n")
        if at >= 0:
            os.ftruncate(fd, start + at + 1)
            return
        end = start
    os.ftruncate(fd, 0)


@contextlib.contextmanager
def building(path: str | Path, tag: str = TMP, tmp: Path | None = None) -> Iterator[Path]:
    """A new empty directory to write `path`'s new version into: when the block completes, its files are fsynced
    and it replaces `path` (absent, empty or complete) in one step; when it fails, it is removed and `path` is as it
    was. `tmp`: its name, where the caller's readers already know it (default `.NAME.TAG-PID`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(path)
    tmp = tmp or temporary_name(path, tag)
    remove(tmp)
    tmp.mkdir()
    try:
        yield tmp
        fsync_tree(tmp)
        replace_directory(tmp, path)
    finally:
        remove(tmp)


def replace_directory(tmp: Path, path: Path) -> None:
    """`tmp` renamed to `path`; an old `path` with files is exchanged with it in one step, then deleted (after the
    exchange `tmp` names the old one)."""
    try:
        os.replace(tmp, path)  # `path` absent, or an empty directory: one rename
    except OSError as error:
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not path.is_dir():
            raise
        if not _exchange(tmp, path):
            aside = temporary_name(path, OLD)
            os.replace(path, aside)  # a kill here: clean_stale puts `aside` back (the old version)
            os.replace(tmp, path)
            tmp = aside
        fsync_directory(path.parent)
        remove(tmp)
    fsync_directory(path.parent)


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # not Linux, or a C library before glibc 2.28
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return function


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (renameat2 with RENAME_EXCHANGE); False where the system or file system cannot."""
    renameat2 = _renameat2()
    return renameat2 is not None and renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0


def remove(path: Path) -> None:
    """Delete a file or directory tree, where it is."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def remove_directory(path: Path) -> None:
    """Delete a directory that readers might list (a checkpoint): renamed out of their sight first, so that a kill
    during the deletion leaves no half-deleted directory under its name."""
    if not path.exists():
        return
    gone = temporary_name(path, DELETED)
    os.replace(path, gone)
    fsync_directory(path.parent)
    remove(gone)


def clean_stale(path: Path) -> None:
    """Remove the temporaries of `path` that writers killed before finishing left beside it; where a kill fell
    between renaming an old version aside and the new one into place, put the old one back."""
    parent, prefix = path.parent, f".{path.name}."
    if not parent.is_dir():
        return
    for entry in list(parent.iterdir()):
        if not entry.name.startswith(prefix):
            continue
        tag, _, pid = entry.name[len(prefix) :].rpartition("-")
        if tag not in TAGS or not pid.isdigit() or _alive(int(pid)):
            continue
        if tag == OLD and not path.exists():
            os.replace(entry, path)
            fsync_directory(parent)
        else:
            remove(entry)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
