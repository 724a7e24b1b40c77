"""Subtitles: SubRip (SRT) and WebVTT.

Every block is written back as it was (an SRT cue's index and timing, a VTT cue's identifier, timing and settings,
the WEBVTT header, NOTE, STYLE and REGION blocks, the blank lines and line ends between them); only cue text changes.
A sentence that runs over several cues (a cue not ending in . ! ? … ♪ or a closing quote goes on into the next) is
translated as one sentence, and its translation spread over the same cues by the source's share of each, cut between
words, so that no cue is empty while there are words for it. A cue of speaker lines ("- Wer?" / "- Ich.") has each
line translated alone, its dash kept. Tags (`<i>`, `<b>`, `<u>`, `<font …>`, VTT's `<c.x>`, `<v Name>`) go back on the
words they wrapped, closed and reopened where a cue or line ends; `{\\an8}` stays at its cue's start. Each cue is
wrapped into at most `max_lines` lines of at most `max_chars` characters where its text fits (Netflix's 2 x 42).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vaswani.translate.files.base import FileError, Fragment, Parsed, segments, sniff

MAX_CHARS, MAX_LINES = 42, 2
_LINE_END = re.compile(r"\r\n|\n|\r")
_TIMING = {
    "srt": re.compile(r"\s*\d+:\d{1,2}:\d{1,2}[,.]\d{1,3}\s*-->\s*\d+:\d{1,2}:\d{1,2}[,.]\d{1,3}.*"),
    "vtt": re.compile(r"\s*(\d+:)?\d{2}:\d{2}\.\d{3}\s+-->\s+(\d+:)?\d{2}:\d{2}\.\d{3}([ \t].*)?"),
}
_STAMP = {"srt": re.compile(r"\d+:\d{1,2}:\d{1,2}[,.]\d{1,3}"), "vtt": re.compile(r"(?:\d+:)?\d{2}:\d{2}\.\d{3}")}
_TAG = re.compile(r"<(/?)([a-zA-Z]+)([.\s][^<>]*)?>|<\d[\d:.]*>|\{\\[^{}]*\}")
_ENDS_SENTENCE = re.compile(r"[.!?…♪。！？][\"'”’»)\]]*\s*$")
_DASH = re.compile(r"^(-\s*)")
_LEAD = re.compile(r"^(\{\\[^{}]*\})*")  # {\an8} and other overrides at a line's start


@dataclass
class Cue:
    """A cue's text lines, where they are in the file's lines, and its pieces once read."""

    first: int  # index in the file's lines of its first text line
    lines: list[str]
    tags: dict[int, tuple[str, str]]  # the file's marks and atoms by number: opening and closing tag ("": an atom)
    prefix: str = ""  # {\an8} and the like, kept at the cue's start
    out: list[str] = field(default_factory=list)


def _read_text(data: bytes, kind: str) -> tuple[str, bool]:
    what = sniff(data)
    if what is not None:
        name = {"zip": "a ZIP package", "ole": "an Office 97-2003 or encrypted file", "pdf": "a PDF"}[what]
        raise FileError(f"is {name}, not {kind} subtitles: give the file its own extension, or --format")
    bom = data.startswith(b"\xef\xbb\xbf")
    try:
        return data.decode("utf-8-sig"), bom
    except UnicodeDecodeError as error:
        raise FileError(
            f"is not UTF-8 text (byte {error.start}): save the subtitles as UTF-8 (e.g. iconv -f cp1252 -t utf-8)"
        ) from None


class _Subtitles:
    name = ""
    extensions: tuple[str, ...] = ()
    media_type = ""

    def __init__(self, max_chars: int = MAX_CHARS, max_lines: int = MAX_LINES) -> None:
        self.max_chars, self.max_lines = max_chars, max_lines

    def blocks(self, lines: list[str]) -> list[list[int]]:
        """The file's blocks as the indices of their lines (blank lines between them left out). A line a player reads
        as a timing (`timing_like`) inside a cue starts a new one (an SRT cue's index line before it goes with it): a
        file whose blank line between two cues was lost keeps both, and a broken timing is refused, not translated."""
        blocks: list[list[int]] = []
        for i, line in enumerate(lines):
            if not line.strip():
                if blocks and blocks[-1]:
                    blocks.append([])
                continue
            if not blocks:
                blocks.append([])
            block = blocks[-1]
            timed = next((k for k, j in enumerate(block[:2]) if self.timing_like(lines[j])), None)
            if timed is not None and self.timing_like(line):
                index = self.name == "srt" and len(block) > timed + 1 and lines[block[-1]].strip().isdigit()
                blocks.append([block.pop()] if index else [])
            blocks[-1].append(i)
        return [b for b in blocks if b]

    example = ""  # a timing line, for messages

    def _untimed(self, line: str) -> list[str]:
        """A written line as lines no player reads as a timing: an arrow the translation wrote made plain, a line of
        two timestamps (karaoke tags brought together by wrapping) broken before the second."""
        line = line.replace("-->", "->")
        stamps = list(_STAMP[self.name].finditer(line))
        if len(stamps) < 2:
            return [line]
        cut = stamps[1].start()
        cut = line.rfind("<", 0, cut + 1) if line[max(0, cut - 1)] == "<" else cut
        return [line[:cut].rstrip(), *self._untimed(line[cut:])]

    def timing_like(self, line: str) -> bool:
        """Whether a player would read `line` as a timing, well-formed or not (an arrow, or two timestamps)."""
        return "-->" in line or len(_STAMP[self.name].findall(line)) >= 2

    def cue(self, lines: list[str], block: list[int], tags: dict[int, tuple[str, str]]) -> Cue | None:
        """A block's cue: its timing line checked (first or second line), its text lines after it (None: none)."""
        timing = next((j for j, i in enumerate(block) if self.timing_like(lines[i])), None)
        if timing is None or timing > 1:
            raise FileError(f"line {block[0] + 1}: a cue without its timing ({self.example})")
        if not _TIMING[self.name].fullmatch(lines[block[timing]]):
            line = lines[block[timing]].strip()[:60]
            said = f"is not a timing as {self.name.upper()} writes one ({self.example})"
            raise FileError(f"line {block[timing] + 1}: {line!r} {said}")
        text = block[timing + 1 :]
        return Cue(text[0], [lines[i] for i in text], tags) if text else None

    def read(self, data: bytes) -> Parsed:
        text, bom = _read_text(data, self.name.upper())
        pieces = _LINE_END.split(text)
        ends = _LINE_END.findall(text)
        tags: dict[int, tuple[str, str]] = {}
        cues = [c for c in (self.cue(pieces, b, tags) for b in self.blocks(pieces)) if c is not None]
        units = self._units(cues)
        worth = [u for u in units if _worth(u)]

        def write(translations: list[str], target: str | None) -> bytes:
            given = dict(zip(map(id, worth), translations, strict=True))
            for unit in units:
                self._place(*unit, given.get(id(unit)))
            out = list(pieces)
            for cue in cues:
                if cue.out:
                    out[cue.first] = "\n".join(line for text in cue.out for line in self._untimed(text))
                    for i in range(cue.first + 1, cue.first + len(cue.lines)):
                        out[i] = None  # type: ignore[call-overload]
            joined = []
            for i, line in enumerate(out):
                if line is None:
                    continue
                end = ends[i] if i < len(ends) else ""
                joined.append(line.replace("\n", end or "\n") + end)
            return ("\ufeff" if bom else "").encode() + "".join(joined).encode("utf-8")

        return Parsed([" ".join(f.html for _, _, f in members) for _, members in worth], write)

    def _units(self, cues: list[Cue]) -> list[tuple[str, list[tuple[Cue, int | None, Fragment]]]]:
        """The translation units: a run of cues one sentence goes on through, or one speaker line of a dialogue."""
        units: list[tuple[str, list[tuple[Cue, int | None, Fragment]]]] = []
        running: list[tuple[Cue, int | None, Fragment]] = []
        for cue in cues:
            texts = [line for line in cue.lines if line.strip()]
            if len(texts) > 1 and all(_DASH.match(_LEAD.sub("", line)) for line in texts):
                if running:
                    units.append(("run", running))
                    running = []
                for i, line in enumerate(texts):
                    lead = _LEAD.match(line).group()
                    units.append(("dash", [(cue, i, _fragment(cue, [lead + _DASH.sub("", line[len(lead) :])]))]))
                continue
            fragment = _fragment(cue, texts)
            running.append((cue, None, fragment))
            if _ENDS_SENTENCE.search(_plain(" ".join(texts))):
                units.append(("run", running))
                running = []
        if running:
            units.append(("run", running))
        return units

    def _place(self, kind: str, members: list[tuple[Cue, int | None, Fragment]], translated: str | None) -> None:
        """A unit's translation in its cues (None: a unit with nothing to translate, kept as it was)."""
        if kind == "dash":
            cue, i, _ = members[0]
            line = [line for line in cue.lines if line.strip()][i or 0]
            if translated is None:
                cue.out.append(line)
                return
            dash = _DASH.match(_LEAD.sub("", line))
            lines = self._wrap(_words(translated), cue.tags, len(dash.group(1)) if dash else 2)
            cue.out += [(dash.group(1) if dash else "- ") + lines[0], *lines[1:]]
            if i == 0:
                cue.out[0] = cue.prefix + cue.out[0]
            return
        if translated is None:
            return
        shares = [max(len(_plain(f.html)), 1) for _, _, f in members]
        for (cue, _, _), mine in zip(members, _spread(_words(translated), shares), strict=True):
            mine = mine or [[((), "…")]]  # fewer words than cues: never an empty cue (it would end the block)
            cue.out = [cue.prefix + line if j == 0 else line for j, line in enumerate(self._wrap(mine, cue.tags))]

    def _wrap(self, words: list[Word], tags: dict[int, tuple[str, str]], lead: int = 0) -> list[str]:
        """The cue's words as lines: one where they fit, else two balanced, else as many as `max_chars` needs
        (`lead`: characters before the first line, a speaker's dash)."""
        lengths = [sum(len(t) for _, t in w) for w in words]
        lengths[:1] = [length + lead for length in lengths[:1]]
        total = sum(lengths) + max(len(words) - 1, 0)
        if total <= self.max_chars or len(words) < 2:
            return [_render(words, tags)]
        best = None
        for cut in range(1, len(words)):
            left = sum(lengths[:cut]) + cut - 1
            right = total - left - 1
            if max(left, right) <= self.max_chars and (best is None or abs(left - right) < best[0]):
                best = (abs(left - right), cut)
        if best is not None and self.max_lines >= 2:
            return [_render(words[: best[1]], tags), _render(words[best[1] :], tags)]
        lines, current, width = [], [], 0
        for word, length in zip(words, lengths, strict=True):
            if current and width + 1 + length > self.max_chars:
                lines.append(current)
                current, width = [], 0
            width += length + (1 if current else 0)
            current.append(word)
        return [_render(line, tags) for line in [*lines, current]]


def _worth(unit: tuple[str, list[tuple[Cue, int | None, Fragment]]]) -> bool:
    return any(f.worth_translating() for _, _, f in unit[1])


def _fragment(cue: Cue, texts: list[str]) -> Fragment:
    """A cue's (or a speaker line's) text as a fragment: its tags as marks, `{\\an8}` at its start as its prefix."""
    fragment, open_ = Fragment(start=len(cue.tags)), []
    text = " ".join(line.strip() for line in texts)
    lead = re.match(r"(\{\\[^{}]*\})+", text)
    if lead and not cue.prefix:
        cue.prefix, text = lead.group(), text[lead.end() :]
    position = 0
    for tag in _TAG.finditer(text):
        fragment.text(text[position : tag.start()])
        position = tag.end()
        name = (tag.group(2) or "").lower()
        if tag.group(2) and not tag.group(1):
            k = fragment.open(None)
            cue.tags[k] = (tag.group(), f"</{tag.group(2)}>")
            open_.append((name, k))
        elif tag.group(2) and any(n == name for n, _ in open_):
            while open_:
                n, k = open_.pop()
                cue.tags[k] = (cue.tags[k][0], tag.group() if n == name else cue.tags[k][1])
                fragment.close()
                if n == name:
                    break
        else:  # a timestamp, an override, a closing tag without its opening: kept as written where it is
            cue.tags[fragment.atom(None)] = (tag.group(), "")
    fragment.text(text[position:])
    for _ in open_:
        fragment.close()
    return fragment


def _plain(fragment: str) -> str:
    return "".join(t for _, t in segments(fragment) if isinstance(t, str))


Word = list[tuple[tuple[int, ...], str]]  # a word's pieces: the marks around each, and its text (or an atom: "")


def _words(translated: str) -> list[Word]:
    """The translation's words, each with the marks around its pieces; atoms as pieces of their own."""
    words: list[Word] = [[]]
    for marks, piece in segments(translated):
        if isinstance(piece, int):
            words[-1].append(((*marks, piece), ""))
            continue
        for i, part in enumerate(re.split(r"\s+", piece)):
            if i > 0 and words[-1]:
                words.append([])
            if part:
                words[-1].append((marks, part))
    return [w for w in words if w]


def _spread(words: list[Word], shares: list[int]) -> list[list[Word]]:
    """`words` cut into len(shares) consecutive parts in proportion to `shares`, cut between words; no part empty
    while there are as many words as parts."""
    n, total = len(shares), sum(shares)
    lengths = [sum(len(t) + 1 for _, t in w) for w in words]
    whole, bounds, acc = sum(lengths) or 1, [], 0
    for share in shares[:-1]:
        acc += share
        target, run, cut = acc / total * whole, 0, 0
        while cut < len(words) and run + lengths[cut] / 2 < target:
            run += lengths[cut]
            cut += 1
        bounds.append(cut)
    bounds = [0, *bounds, len(words)]
    if len(words) >= n:  # every part at least one word, in order
        for i in range(1, n):
            bounds[i] = min(max(bounds[i], bounds[i - 1] + 1), len(words) - (n - i))
    return [words[bounds[i] : bounds[i + 1]] for i in range(n)]


def _render(words: list[Word], tags: dict[int, tuple[str, str]]) -> str:
    """Words joined by spaces, each mark's tags around its words: every tag opened in the line closed in it."""
    out, opened = [], []
    for i, word in enumerate(words):
        for j, (marks, text) in enumerate(word):
            atom = text == "" and marks and tags.get(marks[-1], ("", "x"))[1] == ""
            marks = marks[:-1] if atom else marks
            common = 0
            while common < len(opened) and common < len(marks) and opened[common] == marks[common]:
                common += 1
            closing = "".join(tags[k][1] for k in reversed(opened[common:]) if k in tags)
            out.append(closing)
            del opened[common:]
            if i > 0 and j == 0:
                out.append(" ")
            for k in marks[common:]:
                out.append(tags.get(k, ("", ""))[0])
                opened.append(k)
            out.append(tags[word[j][0][-1]][0] if atom else text)
    out.append("".join(tags[k][1] for k in reversed(opened) if k in tags))
    return "".join(out)


class Srt(_Subtitles):
    name, extensions, media_type = "srt", (".srt",), "application/x-subrip"
    example = "00:00:01,000 --> 00:00:02,500"


class Vtt(_Subtitles):
    name, extensions, media_type = "vtt", (".vtt",), "text/vtt"
    example = "00:01.000 --> 00:02.500"

    def blocks(self, lines: list[str]) -> list[list[int]]:
        if not lines or not re.match(r"WEBVTT([ \t].*)?$", lines[0].lstrip("\ufeff")):
            raise FileError("is not WebVTT: its first line must be WEBVTT")
        return super().blocks(lines)[1:]  # the header block as it was

    def cue(self, lines: list[str], block: list[int], tags: dict[int, tuple[str, str]]) -> Cue | None:
        if re.match(r"(NOTE|STYLE|REGION)([ \t]|$)", lines[block[0]]):
            return None  # kept as it was
        return super().cue(lines, block, tags)
