"""Glossaries: a user's terms translated their way, every time.

    glossary = Glossary.read("terms.tsv")          # lines "source term<TAB>target term"
    glossary.targets("Der Hund schläft.")           # ["canine"]: one target term per occurrence in the sentence

A source term occurs where it stands as whole words (not inside a longer word), compared by Unicode case folding
("STRASSE" is "Straße", "İstanbul" is "istanbul", the Kelvin sign is K; the dotless ı stays its own letter), runs of
spaces inside it matching any run of spaces; where terms overlap, the leftmost wins and at one place the longest.
Each occurrence asks for its target term, exactly as written, in that sentence's translation, as a word of its own in
the place of the model's own word for it (translate/term_placement.py, decode/terms.py). A glossary is frozen and
hashable, so it belongs to a DecodeRequest (decode/request.py) and requests with the same glossary are
batched together by a server.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

_SPACE = re.compile(r"\s+")


class GlossaryError(ValueError):
    """A glossary that cannot be used; the message names the line (or pair) and the fix."""


def fold(text: str) -> str:
    """`text` for comparing without case: NFKC, Unicode case folding, and the dotted capital I's dot dropped
    ("İ" folds to "i" and a combining dot above)."""
    return unicodedata.normalize("NFKC", text).casefold().replace("i\u0307", "i")


def _key(term: str) -> str:
    return fold(_SPACE.sub(" ", term.strip()))


def folded_with_offsets(text: str) -> tuple[str, list[int]]:
    """`fold(text)` and, for each of its characters and one past its end, the index in `text` it comes from."""
    out, offsets = [], []
    for i, char in enumerate(text):
        folded = fold(char)
        out.append(folded)
        offsets += [i] * len(folded)
    offsets.append(len(text))
    return "".join(out), offsets


@dataclass(frozen=True)
class Glossary:
    pairs: tuple[tuple[str, str], ...]  # (source term, target term), each source term once

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]] | Mapping[str, str], where: str = "glossary") -> Glossary:
        """A glossary from (source, target) pairs (a mapping too). One-line GlossaryError naming the pair for an
        empty side, a line break or tab inside a term, or a source term given twice with different targets."""
        items = list(pairs.items()) if isinstance(pairs, Mapping) else list(pairs)
        return cls._checked([(f"{where}: pair {i + 1}", pair) for i, pair in enumerate(items)])

    @classmethod
    def read(cls, path: str | Path) -> Glossary:
        """A glossary file: UTF-8, one `source term<TAB>target term` per line; empty lines and lines starting
        with # are skipped. A one-line GlossaryError names the file and line of anything else."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (Windows editors) is not the first term's
        except UnicodeDecodeError as error:
            raise GlossaryError(f"{path}: not UTF-8 text (byte {error.start}); save it as UTF-8") from None
        entries = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            where = f"{path}, line {number}"
            if "\t" not in line:
                raise GlossaryError(f"{where}: no tab; write 'source term<TAB>target term' ({line[:60]!r})")
            source, _, target = line.partition("\t")
            entries.append((where, (source, target)))
        if not entries:
            raise GlossaryError(f"{path}: no terms; write one 'source term<TAB>target term' per line")
        return cls._checked(entries)

    @classmethod
    def _checked(cls, entries: list[tuple[str, tuple[str, str]]]) -> Glossary:
        seen: dict[str, tuple[str, str]] = {}
        pairs = []
        for where, pair in entries:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(isinstance(x, str) for x in pair):
                raise GlossaryError(f"{where}: a pair of two strings, source term and target term, expected")
            source, target = pair[0].strip(), pair[1].strip()
            if not source or not target:
                side = "source" if not source else "target"
                raise GlossaryError(f"{where}: the {side} term is empty; give both terms")
            if any(ch in term for term in (source, target) for ch in "\t\n\r\ufeff"):
                raise GlossaryError(f"{where}: a tab or line break inside a term; one pair per line, tab-separated")
            key = _key(source)
            if key in seen:
                first_where, (_, first_target) = seen[key]
                if first_target != target:
                    raise GlossaryError(
                        f"{where}: {source!r} is already in the glossary ({first_where}) as {first_target!r}, "
                        f"here as {target!r}; keep one"
                    )
                continue
            seen[key] = (where, (source, target))
            pairs.append((source, target))
        return cls(tuple(pairs))

    def __len__(self) -> int:
        return len(self.pairs)

    @functools.cached_property
    def _pattern(self) -> re.Pattern[str]:
        # over folded text; longest first, so that at any place the longest term matching there wins; one named
        # group per term tells which matched
        order = sorted(range(len(self.pairs)), key=lambda i: len(_key(self.pairs[i][0])), reverse=True)
        words = {i: _key(self.pairs[i][0]).split(" ") for i in order}
        body = "|".join(f"(?P<t{i}>" + r"\s+".join(re.escape(w) for w in words[i]) + ")" for i in order)
        return re.compile(rf"(?<!\w)(?:{body})(?!\w)")

    def matches(self, sentence: str) -> list[tuple[int, int, str]]:
        """(start, end, target term) of each occurrence of a source term in `sentence`, left to right."""
        if not self.pairs:
            return []
        folded, offsets = folded_with_offsets(sentence)
        return [
            (offsets[m.start()], offsets[m.end()], self.pairs[int(m.lastgroup[1:])][1])
            for m in self._pattern.finditer(folded)
        ]

    def targets(self, sentence: str) -> list[str]:
        """The target term of each occurrence of a source term in `sentence`, left to right."""
        return [target for _, _, target in self.matches(sentence)]


def occurrences(term: str, text: str) -> int:
    """How often `term` stands in `text` as whole words (not inside a longer word: "hound" is not in "hounding"),
    compared by case folding."""
    words = r"\s+".join(re.escape(w) for w in _key(term).split(" "))
    return len(re.findall(rf"(?<!\w){words}(?!\w)", fold(text)))


def missing(terms: Iterable[str], text: str) -> list[str]:
    """The target terms (one per occurrence asked for) that `text` does not hold, as whole words, as often as
    asked."""
    wanted: dict[str, int] = {}
    for term in terms:
        wanted[term] = wanted.get(term, 0) + 1
    return [term for term, count in wanted.items() if occurrences(term, text) < count]
