"""Weights that decoding reads a few rows of at a time, read from the model's weights file through a private mapping
of it instead of memory of their own: the token embeddings, and the output matrix where the output projection runs
on a copy of it (packed for oneDNN, or int8). A step looks up one row per token, so the pages of the rows never
read are never loaded: a large tied embedding is otherwise held twice, once as itself and once as the output
projection's copy (docs/benchmarks.md, "Many-to-many at NLLB-200's size").

The mapping is copy-on-write (nothing is written to the file), and vaswani replaces a weights file by renaming a new
one onto it (atomic.py), which leaves the mapped one in place for as long as it is mapped.
"""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path

import torch
from torch import nn


def lookup_parameters(model: nn.Module, output_on_copy: bool) -> dict[int, tuple[nn.Parameter, list[str]]]:
    """The float32 parameters decoding reads by rows only, each once with all its names: the token embeddings (the
    output matrix too when tied to them), where `output_on_copy` or it is not the output matrix."""
    output = getattr(model, "output_weight", None)
    found: dict[int, tuple[nn.Parameter, list[str]]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if not (name.endswith("embed.tokens.weight") or name == "output_weight"):
            continue
        if (parameter is output and not output_on_copy) or parameter.dtype != torch.float32:
            continue
        found.setdefault(id(parameter), (parameter, []))[1].append(name)
    return found


def map_lookups(model: nn.Module, path: Path, output_on_copy: bool) -> list[str]:
    """`model`'s lookup parameters (lookup_parameters) read from the safetensors file `path` they were loaded from,
    mapped; their own memory freed. A parameter whose stored values are not its own (another dtype or shape, or
    rows that differ: changed since loading) keeps its memory. Returns the names of those mapped (the file's)."""
    found = lookup_parameters(model, output_on_copy)
    if not found or next(iter(found.values()))[0].device.type != "cpu":
        return []
    try:
        with open(path, "rb") as f:
            size = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(size))
            mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    except (OSError, ValueError, struct.error):  # a file system without mappings: the memory of their own is kept
        return []
    mapped = []
    for parameter, names in found.values():
        name = next((n for n in names if n in header), None)
        entry = header.get(name) if name else None
        if entry is None or entry["dtype"] != "F32" or entry["shape"] != list(parameter.shape):
            continue
        start = 8 + size + entry["data_offsets"][0]
        if start % 4:
            continue
        stored = torch.frombuffer(mapping, dtype=torch.float32, count=parameter.numel(), offset=start)
        stored = stored.view(parameter.shape)
        with torch.no_grad():  # the first and last rows: the values loaded (not a model changed since)
            if not (torch.equal(stored[0], parameter[0]) and torch.equal(stored[-1], parameter[-1])):
                continue
        parameter.data = stored
        mapped.append(name)
    return mapped
