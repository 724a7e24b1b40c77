"""Word alignment from the model's own cross-attention: which words of a translation came from which source words.

    [result] = translator.translate_with_details(["Ein Hund läuft."], alignment=True)
    result.alignment.links[1]      # (1,): source word 1 ("Hund") went to target word 1 ("dog")

As Garg et al. (2019) read alignments off a Transformer trained only to translate: the heads of the last layers
averaged (the penultimate, which they found best, with the last), a source piece aligned to the target piece that
attends to it most where that target piece also attends to it most of all the source (both directions agree), else
to that piece alone, so that every source word has a place; pieces grouped into whitespace-separated words. A
decoder step looks at the source word it is about to translate, so the agreed word may be the one before its
translation ("is" before "cutting"): the next word is taken where it looks at the source word nearly as hard.
Markup uses it to put tags around the right words (translate/markup/__init__.py). Chosen by benchmarks/markup.py
(docs/benchmarks.md, "Markup").
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

Span = tuple[int, int]
FOLLOW = 0.7  # chosen on Multi30k's validation set, 0.6 to 0.8 alike (benchmarks/markup.py --test val)
WORD_START = "\u2581"  # SentencePiece's mark of a piece that begins a word


@dataclass(frozen=True)
class Alignment:
    """A sentence's words (character spans in the source sentence and in its translation) and, for each source
    word, the target words aligned to it, in order (none where the translation is empty)."""

    source: tuple[Span, ...]
    target: tuple[Span, ...]
    links: tuple[tuple[int, ...], ...]


def word_spans(text: str) -> tuple[Span, ...]:
    """(start, end) of each whitespace-separated word of `text`."""
    spans, start = [], None
    for i, char in enumerate(text):
        if char.isspace():
            if start is not None:
                spans.append((start, i))
                start = None
        elif start is None:
            start = i
    if start is not None:
        spans.append((start, len(text)))
    return tuple(spans)


def piece_words(pieces: Sequence[str], words: int, codes: Collection[str] = ()) -> list[int | None]:
    """The word of each piece (None: a language token, OPUS-MT's >>fra<< or one of `codes`, a many-to-many model's);
    where the pieces' words do not come out as `words` (a normalisation that split or joined words), spread evenly
    over them."""
    out: list[int | None] = []
    count = -1
    for piece in pieces:
        if (piece.startswith(">>") and piece.endswith("<<")) or piece in codes:
            out.append(None)
            continue
        if piece.startswith(WORD_START) or count < 0:  # a lone mark begins its word too: its next piece continues it
            count += 1
        out.append(count)
    found = count + 1
    if found != words and found > 0 and words > 0:
        out = [None if w is None else min(words - 1, w * words // found) for w in out]
    return out


def align(cross: torch.Tensor, src_words: list[int | None], tgt_words: list[int | None], n_src: int) -> list[set[int]]:
    """Per source word, the target words aligned to it: for each of its pieces, the target piece that attends to it
    most, where that piece attends to it most of all the source (both directions agree); else that piece alone.
    `cross`: attention averaged over the heads (rows: the target pieces, then EOS; columns: the source pieces, then
    EOS). Shape: cross (T + 1, S + 1)"""
    links: list[set[int]] = [set() for _ in range(n_src)]
    columns = [j for j, w in enumerate(src_words) if w is not None]
    rows = [i for i, w in enumerate(tgt_words) if w is not None]
    if not columns or not rows:
        return links
    weights = cross[rows][:, columns]  # (rows, columns): the words' pieces only, EOS and language tokens left out
    # A decoder step attends to the source it is about to translate: "A" and "is" look at "Hund" and "schneidet"
    # before "dog" and "cutting" are written. Where both directions agree on a word and the next target word looks
    # at the same source word nearly as hard (FOLLOW), the next word is its translation ("is" -> "cutting").
    by_row = weights.argmax(dim=1).tolist()
    by_column = weights.argmax(dim=0).tolist()
    looks_at: dict[int, set[int]] = {}  # target word -> the source words its pieces look at most
    pieces_of: dict[int, list[int]] = {}  # target word -> its rows in `weights`
    for r, c in enumerate(by_row):
        looks_at.setdefault(tgt_words[rows[r]], set()).add(src_words[columns[c]])
        pieces_of.setdefault(tgt_words[rows[r]], []).append(r)
    for c, r in enumerate(by_column):
        word, target = src_words[columns[c]], tgt_words[rows[r]]
        if by_row[r] == c:
            if word in looks_at.get(target + 1, ()):
                following = max(float(weights[i, c]) for i in pieces_of[target + 1])
                target += following >= FOLLOW * float(weights[r, c])
            links[word].add(target)
    for c, r in enumerate(by_column):
        word = src_words[columns[c]]
        if not links[word]:
            links[word].add(tgt_words[rows[r]])
    return links


def layers_of(n_layers: int) -> list[int]:
    """The layers whose heads are read: the last two (the penultimate, Garg et al. 2019, with the last), averaged."""
    return list(range(max(0, n_layers - 2), n_layers))


class Aligned(Protocol):
    """What an alignment reads of a translation (translate/translator.py's Translation): its source, its text and its
    candidates, the first of which has the tokens."""

    source: str
    text: str
    candidates: Sequence


@torch.inference_mode()
def alignments(
    model, tokenizer, translations: Sequence[Aligned], encoded: Sequence[list[int]], batch: int = 32
) -> list[Alignment]:
    """The alignment of each translation's best candidate with its source, from teacher-forced passes of the
    torch `model` (whatever engine found the translation) with its `tokenizer`, `batch` sentences at a time.
    `encoded`: the sources' ids as they were translated."""
    c, device = model.config, next(model.parameters()).device
    layers = layers_of(len(model.decoder.layers))
    pairs = []
    for translation, src_ids in zip(translations, encoded, strict=True):
        tokens = translation.candidates[0].tokens if translation.candidates and src_ids else []
        pairs.append((src_ids[: c.max_positions - len(c.source_end)], tokens[: c.max_positions - 1]))
    crosses: list[torch.Tensor | None] = [None] * len(pairs)
    todo = sorted((i for i, (s, t) in enumerate(pairs) if s and t), key=lambda i: len(pairs[i][0]))
    for first in range(0, len(todo), batch):
        chosen = todo[first : first + batch]
        src = _padded([[*pairs[i][0], *c.source_end] for i in chosen], c.pad_id, device)  # (B, S + 1)
        tgt_in = _padded([[c.bos_id, *pairs[i][1]] for i in chosen], c.pad_id, device)  # (B, T + 1)
        weights = model.attention_weights(src, tgt_in).cross
        cross = torch.stack([weights[i] for i in layers]).float().mean(dim=(0, 2)).cpu()  # (B, T + 1, S + 1)
        for row, i in enumerate(chosen):
            s, t = len(pairs[i][0]) + len(c.source_end), len(pairs[i][1]) + 1
            crosses[i] = cross[row, :t, :s]
    out = []
    for translation, (src_ids, tgt_ids), cross in zip(translations, pairs, crosses, strict=True):
        source, target = word_spans(translation.source), word_spans(translation.text)
        if cross is None or not target:
            out.append(Alignment(source, target, tuple(() for _ in source)))
            continue
        src_pieces = [tokenizer.src.id_to_piece(i) for i in src_ids]
        tgt_pieces = [tokenizer.tgt.id_to_piece(i) for i in tgt_ids]
        links = align(
            cross,
            [*piece_words(src_pieces, len(source), tokenizer.code_pieces), *(None for _ in c.source_end)],
            [*piece_words(tgt_pieces, len(target), tokenizer.code_pieces), None],
            len(source),
        )
        out.append(Alignment(source, target, tuple(tuple(sorted(x)) for x in links)))
    return out


def _padded(rows: list[list[int]], pad: int, device: torch.device) -> torch.Tensor:
    """Rows of ids padded to one length, as the teacher-forced pass reads them. Shape: (B, longest)"""
    out = torch.full((len(rows), max(map(len, rows))), pad, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out.to(device)
