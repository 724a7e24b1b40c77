"""The prepared-data directory: token ids in flat memory-mapped arrays, described by a manifest.

    DATA_DIR/
      manifest.json             written last: what the arrays were made from, their sizes and hashes
      tokenizer.model           (or src.model + tgt.model) the SentencePiece model(s) the ids belong to
      report.json               the filter report, per corpus
      train.src.bin, .idx       ids of every kept source sentence back to back; int64 offsets (N + 1)
      train.tgt.bin, .idx       the same for the targets
      train.len                 (N, 2) source and target lengths, for batching without touching the ids
      valid.*                   the dev set, and its text (valid.*.txt.bin/.idx, UTF-8 bytes)
      train.*.txt.bin/.idx      the training text, only when subword sampling needs it
      train.ids, valid.ids      or, for a language model, token streams (data/plain.py)

Ids use the smallest unsigned type the vocabulary fits (uint16 below 65,536 pieces). Pairs of the
corpora are stored in corpus order; the manifest gives each corpus's range. fairseq's `.bin/.idx`
and Megatron's indexed datasets are the same idea; a plain format, read with numpy alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vaswani import atomic
from vaswani.data.corpus import DataError

FORMAT = 1
MANIFEST = "manifest.json"


def id_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


def file_sha256(path: Path, chunk: int = 1 << 24) -> str:
    """Read, not mapped: hashing a large array does not enter this process's resident memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


class RaggedWriter:
    """Appends sequences to NAME.bin (values) and NAME.idx (int64 offsets), hashing as it writes."""

    def __init__(self, directory: Path, name: str, dtype: np.dtype) -> None:
        self.name, self.dtype = name, np.dtype(dtype)
        self.paths = (directory / f"{name}.bin", directory / f"{name}.idx")
        self.values, self.offsets = (open(p, "wb") for p in self.paths)  # noqa: SIM115 (closed by close())
        self.hashes = [hashlib.sha256(), hashlib.sha256()]
        self.end, self.count = 0, 0
        self._write(1, np.zeros(1, dtype=np.int64))

    def _write(self, which: int, array: np.ndarray) -> None:
        data = array.tobytes()
        (self.values, self.offsets)[which].write(data)
        self.hashes[which].update(data)

    def append(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        """Sequences given as their concatenation and their lengths."""
        self._write(0, np.ascontiguousarray(flat, dtype=self.dtype))
        self._write(1, self.end + np.cumsum(lengths, dtype=np.int64))
        self.end += int(flat.size)
        self.count += len(lengths)

    def close(self) -> dict[str, dict]:
        """Entries for the manifest: each file's dtype, element count, size and sha256."""
        for handle in (self.values, self.offsets):
            handle.close()
        counts, dtypes = (self.end, self.count + 1), (self.dtype, np.dtype(np.int64))
        return {
            path.name: {
                "dtype": dtype.str,
                "count": count,
                "bytes": count * dtype.itemsize,
                "sha256": digest.hexdigest(),
            }
            for path, dtype, count, digest in zip(self.paths, dtypes, counts, self.hashes, strict=True)
        }


def write_array(directory: Path, name: str, array: np.ndarray) -> dict[str, dict]:
    """A whole (small or already built) array as NAME, with its manifest entry."""
    data = np.ascontiguousarray(array)
    (directory / name).write_bytes(data.tobytes())
    return {
        name: {
            "dtype": data.dtype.str,
            "count": int(data.size),
            "bytes": data.nbytes,
            "sha256": hashlib.sha256(data.tobytes()).hexdigest(),
            "shape": list(data.shape),
        }
    }


class Ragged:
    """Read side of RaggedWriter: `ragged[i]` is the i-th sequence, a view into the mapped file."""

    def __init__(self, directory: Path, name: str, files: dict[str, dict]) -> None:
        self.values = _map(directory, f"{name}.bin", files)
        self.offsets = _map(directory, f"{name}.idx", files)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def text(self, i: int) -> str:
        return self[i].tobytes().decode("utf-8")


def _map(directory: Path, name: str, files: dict[str, dict]) -> np.ndarray:
    entry = files[name]
    if entry["count"] == 0:
        return np.zeros(0, dtype=np.dtype(entry["dtype"]))
    array = np.memmap(directory / name, dtype=np.dtype(entry["dtype"]), mode="r", shape=(entry["count"],))
    return array.reshape(entry["shape"]) if "shape" in entry else array


@dataclass
class PairSplit:
    """One split's pairs: ids of both sides, their lengths, and the text where it was kept."""

    src: Ragged
    tgt: Ragged
    lengths: np.ndarray  # (N, 2)
    src_text: Ragged | None = None
    tgt_text: Ragged | None = None

    def __len__(self) -> int:
        return len(self.lengths)

    def pair(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.src[i], self.tgt[i]

    def text(self, i: int) -> tuple[str, str]:
        if self.src_text is None or self.tgt_text is None:
            raise DataError("this prepared data has no text for this split")
        return self.src_text.text(i), self.tgt_text.text(i)


class PreparedData:
    """A prepared-data directory, checked and mapped. Construct with `PreparedData.open`."""

    def __init__(self, directory: Path, manifest: dict) -> None:
        self.directory, self.manifest = directory, manifest
        files = manifest["files"]
        self.splits: dict[str, PairSplit] = {}
        for split in manifest["splits"]:
            text = f"{split}.src.txt.bin" in files
            self.splits[split] = PairSplit(
                Ragged(directory, f"{split}.src", files),
                Ragged(directory, f"{split}.tgt", files),
                _map(directory, f"{split}.len", files),
                Ragged(directory, f"{split}.src.txt", files) if text else None,
                Ragged(directory, f"{split}.tgt.txt", files) if text else None,
            )
        # A language model's text: token streams (data/plain.py) instead of pairs.
        self.streams: dict[str, np.ndarray] = {
            name: _map(directory, f"{name}.ids", files) for name in manifest.get("streams", {})
        }

    @property
    def train(self) -> PairSplit:
        return self.splits["train"]

    @property
    def valid(self) -> PairSplit:
        return self.splits["valid"]

    @property
    def corpora(self) -> list[dict]:
        """name, first and end index of each training corpus, in order."""
        return self.manifest["corpora"]

    @classmethod
    def open(cls, directory: str | Path, verify: bool = True) -> PreparedData:
        """Check sizes (truncation) and, with `verify`, content hashes (corruption) of the files modified since
        the manifest was written."""
        directory = Path(directory)
        manifest = read_manifest(directory)
        fix = f"delete {directory} and prepare again (vaswani prepare CONFIG {directory}, or vaswani train remakes it)"
        for name, entry in manifest["files"].items():
            path = directory / name
            if not path.is_file():
                raise DataError(f"{path} is missing from the prepared data; {fix}")
            size = path.stat().st_size
            if size != entry["bytes"]:
                raise DataError(
                    f"{path} has {size:,} bytes, its manifest says {entry['bytes']:,} (truncated or overwritten); {fix}"
                )
            # Hashed when changed since the manifest was written (its mtime differs): a file left alone is
            # trusted without reading it, so a run over a 10M-pair corpus starts in seconds, not minutes.
            changed = path.stat().st_mtime_ns != entry.get("mtime_ns")
            if verify and changed and file_sha256(path) != entry["sha256"]:
                raise DataError(f"{path} does not match the sha256 in its manifest (corrupted); {fix}")
        data = cls(directory, manifest)
        for name, split in data.splits.items():
            for side in (split.src, split.tgt):
                if len(side) != len(split) or (len(side.offsets) and side.offsets[-1] != len(side.values)):
                    raise DataError(f"{directory}: the {name} arrays disagree with each other; {fix}")
        return data


def read_manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    if not path.is_file():
        hint = " (an interrupted preparation leaves no manifest)" if directory.is_dir() else ""
        raise DataError(
            f"{directory} is not prepared data: no {MANIFEST}{hint}; run vaswani prepare CONFIG {directory}"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        version = manifest["format"]
    except (ValueError, KeyError, TypeError):
        raise DataError(f"{path} is not a valid manifest; delete {directory} and prepare again") from None
    if version != FORMAT:
        raise DataError(
            f"{directory} holds prepared data of format {version}; this vaswani reads format {FORMAT}: prepare it again"
        )
    return manifest


def check_unprepared(directory: Path) -> None:
    """A directory without a manifest may be made: it must be missing or empty (never someone's files)."""
    if directory.is_dir() and any(directory.iterdir()):
        raise DataError(
            f"{directory} is not prepared data (no {MANIFEST}) and not empty; delete it or set "
            "data.prepared to a new directory"
        )


def building(directory: Path) -> contextlib.AbstractContextManager[Path]:
    """A temporary sibling of `directory` to write prepared data into (`.NAME.partial-PID`): fsynced and renamed to
    `directory` when the block completes, removed when it fails, so that an interrupted preparation leaves nothing a
    later run trusts; the next preparation removes what a killed one left (vaswani.atomic.building)."""
    return atomic.building(directory, tag="partial")


def describe_input(path: Path) -> dict:
    """What the manifest records of an input file, to tell later whether it changed."""
    stat = path.stat()
    return {"path": str(path), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": file_sha256(path)}


def write_manifest(directory: Path, manifest: dict) -> None:
    """Written last and atomically: a directory without it is never trusted."""
    for name, entry in manifest.get("files", {}).items():
        entry["mtime_ns"] = (directory / name).stat().st_mtime_ns
    temporary = directory / f".{MANIFEST}.tmp"
    temporary.write_text(json.dumps({"format": FORMAT, **manifest}, indent=1) + "\n", encoding="utf-8")
    os.replace(temporary, directory / MANIFEST)
