"""A vocabulary shortlist (`vaswani shortlist`, `--shortlist`): the target words a batch's source words can turn
into, so that each decoding step's output layer computes those words' logits, not the whole vocabulary's.

    shortlist = learn(sources, targets, Vocabularies(src_size, tgt_size, eos_id))   # token ids of parallel lines
    shortlist.save("runs/opus/shortlist.safetensors")
    words = Shortlist.load(path).words(src)                               # one batch's target ids, sorted

A shortlist holds, for every source piece, its `top` most probable translations under IBM Model 1's lexical
probabilities p(target piece | source piece) (Brown et al., 1993: EM over the parallel lines, a NULL source word
for target pieces that align to nothing), and the `frequent` most frequent target pieces, which every batch gets:
Marian's lexical shortlist and CTranslate2's vocabulary map are built the same way (from fast_align's table). The
parallel lines come from training data, or from the model itself (`vaswani shortlist` without `--tgt`: its own
translations of the given sources). Where one vocabulary numbers both sides, a source's own pieces are candidates
too (names and numbers copied through).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from vaswani import atomic

FILE = "shortlist.safetensors"  # in a model directory: what --shortlist without a path reads
FORMAT = "vaswani shortlist 1"
TOP = 50  # translations kept per source piece
FREQUENT = 100  # most frequent target pieces in every batch's words
ITERATIONS = 5  # of Model 1's EM
MIN_PROBABILITY = 1e-3  # a translation less probable than this is not kept
PAIRS_PER_CHUNK = 4_000_000  # (source piece, target piece) pairs in memory at a time while learning


@dataclass(frozen=True)
class Shortlist:
    """`translations`: per source id, its candidate target ids, best first, -1 where fewer (V_src, top);
    `frequent`: target ids every batch gets (the most frequent ones, those Model 1 gives the NULL word, EOS);
    `copy`: one vocabulary numbers both sides, so a source's own ids are candidates too. `lines`: how many
    parallel lines it was learned from; `origin`: "data" (given targets) or "model" (the model's translations)."""

    translations: Tensor
    frequent: Tensor
    tgt_vocab_size: int
    copy: bool
    lines: int = 0
    origin: str = "data"

    @property
    def src_vocab_size(self) -> int:
        return self.translations.size(0)

    def words(self, src: Tensor, extra: Sequence[Sequence[int]] = (), pad_id: int = -1) -> tuple[Tensor, Tensor]:
        """The target ids a batch of sources (padded with `pad_id`) may produce, sorted, and which of them each
        source may: its pieces' translations, the frequent ones, its own pieces where `copy`, and its `extra` ids
        (a glossary's terms). The output layer computes the batch's words; each sentence's search sees its own
        only, so its output does not depend on the sentences it is batched with.
        Shape: src (B, S) -> ids (W,), allowed (B, W) bool, on src's device"""
        device, src = src.device, src.cpu()
        B = src.size(0)
        rows, found = [], []
        for i in range(B):
            ids = src[i].unique()
            ids = ids[(ids < self.src_vocab_size) & (ids != pad_id)]
            mine = [self.translations.index_select(0, ids).flatten()]
            if self.copy:
                mine.append(ids[ids < self.tgt_vocab_size])
            if i < len(extra):
                mine.append(torch.as_tensor(list(extra[i]), dtype=torch.long))
            mine = torch.cat(mine)
            mine = mine[mine >= 0]
            found.append(mine)
            rows.append(torch.full_like(mine, i))
        found_all, rows_all = torch.cat(found), torch.cat(rows)
        ids = torch.cat([self.frequent, found_all]).unique()  # (W,)
        allowed = torch.zeros(B, len(ids), dtype=torch.bool)
        allowed[:, torch.searchsorted(ids, self.frequent)] = True
        allowed[rows_all, torch.searchsorted(ids, found_all)] = True
        return ids.to(device), allowed.to(device)

    def describe(self) -> str:
        """One line: what the output layer covers."""
        made = "parallel lines" if self.origin == "data" else "lines the model translated"
        return (
            f"shortlist: each batch's output layer covers its source pieces' {self.translations.size(1)} likeliest "
            f"translations and {len(self.frequent)} frequent pieces, of {self.tgt_vocab_size:,} (learned from "
            f"{self.lines:,} {made})"
        )

    def check(self, src_vocab_size: int, tgt_vocab_size: int, where: str) -> None:
        """A one-line ValueError unless this shortlist numbers the model's vocabularies with ids inside them."""
        again = "learn it again for this model (vaswani shortlist MODEL_DIR --src ...)"
        if (self.src_vocab_size, self.tgt_vocab_size) != (src_vocab_size, tgt_vocab_size):
            raise ValueError(
                f"{where} was learned for vocabularies of {self.src_vocab_size} source and {self.tgt_vocab_size} "
                f"target pieces, but the model has {src_vocab_size} and {tgt_vocab_size}: {again}"
            )
        t, f = self.translations, self.frequent
        inside = t.dim() == 2 and f.dim() == 1 and bool(((t >= -1) & (t < tgt_vocab_size)).all())
        if not inside or not bool(((f >= 0) & (f < tgt_vocab_size)).all()):
            raise ValueError(f"{where} holds target ids outside the model's {tgt_vocab_size:,} pieces: {again}")

    def save(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        meta = dict(
            format=FORMAT, tgt_vocab_size=self.tgt_vocab_size, copy=self.copy, lines=self.lines, origin=self.origin
        )
        tensors = {"translations": self.translations.int().contiguous(), "frequent": self.frequent.int()}
        atomic.write_file(path, lambda tmp: save_file(tensors, str(tmp), metadata={"vaswani": json.dumps(meta)}))

    @classmethod
    def load(cls, path: str | Path) -> Shortlist:
        """A one-line ValueError (OSError for a missing file) where `path` is not a shortlist this version wrote."""
        from safetensors import SafetensorError, safe_open

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(2, "no shortlist here; learn one with vaswani shortlist MODEL_DIR --src ...", path)
        try:
            with safe_open(str(path), "pt") as f:
                meta = json.loads((f.metadata() or {}).get("vaswani", "{}"))
                names = f.keys()  # safe_open is no mapping
                tensors = {k: f.get_tensor(k) for k in names}
        except (SafetensorError, OSError, ValueError) as error:
            again = "learn it again with vaswani shortlist"
            raise ValueError(f"{path}: not a readable shortlist ({error}); {again}") from None
        if meta.get("format") != FORMAT or set(tensors) != {"translations", "frequent"}:
            raise ValueError(f"{path}: not a vaswani shortlist ({FORMAT}); learn it again with vaswani shortlist")
        return cls(
            tensors["translations"].long(),
            tensors["frequent"].long(),
            int(meta["tgt_vocab_size"]),
            bool(meta["copy"]),
            int(meta.get("lines", 0)),
            str(meta.get("origin", "data")),
        )


@dataclass(frozen=True)
class Vocabularies:
    """What a shortlist needs of a model's vocabularies: their sizes, EOS, and whether one tokenizer writes both
    sides (`copy`: a source piece may stand for itself in the translation)."""

    src_size: int
    tgt_size: int
    eos_id: int
    copy: bool = False


def learn(
    sources: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    vocabularies: Vocabularies,
    top: int = TOP,
    frequent: int = FREQUENT,
    iterations: int = ITERATIONS,
    progress: Callable[[int], None] | None = None,
    origin: str = "data",
) -> Shortlist:
    """A shortlist from parallel token ids (without EOS): Model 1's p(target | source) after `iterations` of EM,
    each source piece's `top` best (at least MIN_PROBABILITY), and the `frequent` most frequent target pieces.
    `progress(1)` after each pass over the lines."""
    src_vocab_size, tgt_vocab_size = vocabularies.src_size, vocabularies.tgt_size
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} source lines but {len(targets)} target lines")
    check_sizes(top, frequent)
    null = src_vocab_size  # Model 1's empty word: every target piece may align to it
    pairs = [(s, t) for s, t in zip(sources, targets, strict=True) if t]
    if not pairs:
        raise ValueError("no line with a translation to learn a shortlist from: give parallel lines that are not empty")
    for side, lines, size in (
        ("source", [s for s, _ in pairs], src_vocab_size),
        ("target", [t for _, t in pairs], tgt_vocab_size),
    ):
        wrong = next((i for line in lines for i in line if not 0 <= i < size), None)
        if wrong is not None:
            raise ValueError(f"{side} token id {wrong} is outside the model's {size:,}-piece {side} vocabulary")
    chunks = list(_chunks(pairs))
    # every pair seen, sorted: the table's index
    keys = np.unique(np.concatenate([np.unique(_pair_keys(chunk, null, tgt_vocab_size)[0]) for chunk in chunks]))
    if progress is not None:
        progress(1)
    table = np.ones(len(keys))  # t(target | source) up to a factor per source: the first E-step is uniform
    for _ in range(iterations):
        counts = np.zeros(len(keys))
        for chunk in chunks:
            pair, group = _pair_keys(chunk, null, tgt_vocab_size)
            index = np.searchsorted(keys, pair)
            p = table[index]
            posterior = p / np.bincount(group, p)[group]  # over the source pieces each target piece may align to
            counts += np.bincount(index, posterior, minlength=len(keys))
        source = keys // tgt_vocab_size
        table = counts / np.bincount(source, counts, minlength=null + 1)[source]
        if progress is not None:
            progress(1)
    translations = _best(keys, table, null, tgt_vocab_size, top)
    counted = np.bincount(np.concatenate([np.asarray(t, dtype=np.int64) for _, t in pairs] or [np.zeros(0, int)]))
    common = np.argsort(-counted, kind="stable")[:frequent]
    common = common[counted[common] > 0]
    nulls = translations[null][translations[null] >= 0]
    always = torch.cat([torch.from_numpy(common), nulls, torch.tensor([vocabularies.eos_id])]).unique()
    return Shortlist(translations[:null], always, tgt_vocab_size, vocabularies.copy, len(pairs), origin)


def check_sizes(top: int, frequent: int) -> None:
    """A one-line ValueError unless `top` >= 1 and `frequent` >= 0."""
    if top < 1 or frequent < 0:
        raise ValueError(f"--top must be >= 1 and --frequent >= 0, got {top} and {frequent}")


def _chunks(pairs: list[tuple[Sequence[int], Sequence[int]]]):
    """The lines in runs of about PAIRS_PER_CHUNK (source piece, target piece) pairs."""
    start, size = 0, 0
    for i, (s, t) in enumerate(pairs):
        size += (len(s) + 1) * len(t)
        if size >= PAIRS_PER_CHUNK:
            yield pairs[start : i + 1]
            start, size = i + 1, 0
    if start < len(pairs):
        yield pairs[start:]


def _pair_keys(pairs, null: int, tgt_vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (source piece, target piece) pair of each line, the NULL word's included, as source * V_tgt + target;
    and for each pair the index of its target position (the E-step normalises over a position's pairs)."""
    src = [np.asarray([null, *s], dtype=np.int64) for s, _ in pairs]
    tgt = [np.asarray(t, dtype=np.int64) for _, t in pairs]
    m = np.asarray([len(s) for s in src])  # source pieces of each line, NULL's included
    n = np.asarray([len(t) for t in tgt])
    src_flat, tgt_flat = np.concatenate(src), np.concatenate(tgt)
    src_start = np.concatenate([[0], np.cumsum(m)[:-1]])
    per_target = np.repeat(m, n)  # pairs of each target position: its line's source pieces
    group = np.repeat(np.arange(len(tgt_flat)), per_target)
    first = np.concatenate([[0], np.cumsum(per_target)[:-1]])
    offset = np.arange(len(group)) - np.repeat(first, per_target)  # 0..m-1 within each target position
    src_index = np.repeat(np.repeat(src_start, n), per_target) + offset
    return src_flat[src_index] * tgt_vocab_size + tgt_flat[group], group


def _best(keys: np.ndarray, table: np.ndarray, null: int, tgt_vocab_size: int, top: int) -> Tensor:
    """Each source's `top` most probable targets, best first, -1 where fewer. Shape: (V_src + 1, top)"""
    source, target = keys // tgt_vocab_size, keys % tgt_vocab_size
    kept = table >= MIN_PROBABILITY
    source, target, p = source[kept], target[kept], table[kept]
    order = np.lexsort((-p, source))  # by source, then most probable first
    source, target = source[order], target[order]
    starts = np.searchsorted(source, source, side="left")
    rank = np.arange(len(source)) - starts
    keep = rank < top
    out = torch.full((null + 1, top), -1, dtype=torch.long)
    out[torch.from_numpy(source[keep]), torch.from_numpy(rank[keep])] = torch.from_numpy(target[keep])
    return out
