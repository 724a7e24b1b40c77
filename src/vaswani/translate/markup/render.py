"""A run rendered with its marks and atoms placed in its translation: each node clipped into its parent, siblings
kept apart, Markdown's delimiters fitted so that they read back as the pairs they were.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence

from vaswani.translate.align import word_spans
from vaswani.translate.markup.nodes import Atom, Mark, Node, Run, _first_word, url_spans


def _in_place(node: Node) -> tuple[int, int]:
    return (node.at, node.at) if isinstance(node, Atom) else (node.start, node.end)


def render_run(
    run: Run,
    text: str,
    place: Callable[[Node], tuple[int, int]],
    write: Callable[[str], str],
    lead: Callable[[str], str] | None = None,
    fits: Callable[[str, str, str, bool], bool] | None = None,
    around: tuple[str, str] = ("", ""),
) -> str:
    """`text` (a run's translation, or its own text) with the run's marks and atoms put at `place(node)`: each
    node's span clipped into its parent's, siblings in order of place and kept from overlapping, so that the
    output is well nested whatever the alignment said. A mark squeezed out by a sibling that took its words takes
    the nearest word no sibling holds (an empty pair of Markdown delimiters would not read back as one).
    `fits(delimiter, before, after, opening)`: whether a mark's delimiter between those characters opens (closes)
    its pair; where it does not, a space beside it makes it (`around`: the characters written before and after the
    run, which a delimiter at its edge sits beside)."""
    out: list[str] = []
    delimiters: list[tuple[int, bool]] = []  # where marks' opens and closes are in `out`
    pairs: list[tuple[int, int]] = []  # where each mark's open and close are in `out`
    words = word_spans(text)
    after_atom = [False]  # the last thing written was an atom

    def add(piece: str) -> None:
        """Translated text; a word right after an atom that ends in one (a URL) is kept apart from it."""
        piece = _led(write(piece), None if out else lead, run.bare)
        last = next((x for x in reversed(out) if x), "")
        glued = after_atom[0] and piece[:1].isalnum() and (last[-1:].isalnum() or bool(url_spans(last.lstrip())))
        out.append(" " + piece if glued else piece)

    def emit(nodes: Sequence[Node], lo: int, hi: int, parent: Mark | None = None) -> None:
        spans, position = _sibling_spans(nodes, lo, hi, place, text, words), lo
        other = _keep_delimiters_apart(spans, parent, lo, hi, words, place)
        for a, b, _, node in spans:
            a, b = max(a, position), max(b, a, position)
            add(text[position:a])
            after_atom[0] = after_atom[0] and a == position
            if (node.raw if isinstance(node, Atom) else node.open).startswith("["):
                _no_image(out)
            if isinstance(node, Atom):
                if node.opens is not None:
                    delimiters.append((len(out), node.opens))
                out.append(_atom_written(node, next((p for p in reversed(out) if p), ""), after_atom[0]))
                after_atom[0] = True
            else:
                swap = _other_delimiter if node in other else str
                opened = len(out)
                delimiters.append((opened, True))
                out.append(swap(node.open))
                after_atom[0] = False  # a tag between two atoms: they are not side by side
                emit(node.children, a, b, node)
                delimiters.append((len(out), False))
                pairs.append((opened, len(out)))
                out.append(swap(node.close))
                after_atom[0] = False
            position = b
        add(text[position:hi])

    emit(run.children, 0, len(text))
    return "".join(out if fits is None else _fitted(out, delimiters, pairs, around, fits))


def _led(piece: str, lead: Callable[[str], str] | None, bare: str) -> str:
    """A run's first text escaped by `lead` where it would start a block, unless its first word is the one the input
    wrote bare at that place (`Run.bare`: it started no block there)."""
    if lead is None or (bare and _first_word(piece) == bare):
        return piece
    return lead(piece)


def _fitted(
    out: list[str],
    delimiters: list[tuple[int, bool]],
    pairs: list[tuple[int, int]],
    around: tuple[str, str],
    fits: Callable[..., bool],
) -> list[str]:
    """`out` with each delimiter (its index, opening or not) given the space it needs (_space_to_fit), judged
    beside the characters around the run too; then each pair kept from CommonMark's rule of three
    (_rule_of_three)."""
    padded = [around[0], *out, around[1]]
    for k, opening in delimiters:
        _space_to_fit(padded, k + 1, opening, fits)
    for opened, closed in pairs:
        _rule_of_three(padded, opened + 1, closed + 1, fits)
    return padded[1:-1]


def _delimiter_run(out: list[str], k: int) -> tuple[int, str, str]:
    """The length of the run of out[k]'s delimiter character that out[k] is written in (its neighbours' bare
    characters joined to it, an escaped one not), and the characters before and after that run."""
    text = "".join(out)
    start = sum(len(piece) for piece in out[:k])
    start += len(out[k]) - len(out[k].lstrip())
    char = text[start]
    end = start
    while end < len(text) and text[end] == char:
        end += 1
    while start > 0 and text[start - 1] == char and not text[: start - 1].endswith("\\"):
        start -= 1
    return end - start, text[start - 1 : start], text[end : end + 1]


def _last_word_moved(out: list[str], previous: int, k: int) -> bool:
    """out[k], an opening delimiter with nothing after it in its run, put before the last word of out[previous]
    (plain text): "a b*" + a hard break opens nothing, "a *b" does. Whether it was moved."""
    text = out[previous]
    word = len(text) - len(text.rstrip())
    start = len(text.rstrip()) - len(text.rstrip().split()[-1]) if text.strip() else 0
    if not text.strip() or word or not text[start:].isalnum():
        return False
    out[previous], out[k] = text[:start], out[k] + text[start:]
    return True


def _rule_of_three(out: list[str], opened: int, closed: int, fits: Callable[..., bool]) -> None:
    """A pair of `*` or `_` whose runs could each open and close is not read as a pair where their lengths add up
    to a multiple of three (CommonMark's rule of three: "__a_ b_\\_" is no emphasis): the run that could do both
    given a space on its outer side, so that it only opens (closes)."""
    if not out[opened].strip() or out[opened].strip()[0] not in "*_":
        return
    first, before_open, after_open = _delimiter_run(out, opened)
    last, before_close, after_close = _delimiter_run(out, closed)
    if (first + last) % 3 or (first % 3 == 0 and last % 3 == 0):
        return
    char = out[opened].strip()[0]
    if fits(char, before_close, after_close, True) and fits(char, before_close, after_close, False):
        out[closed] = out[closed] + " "
    if fits(char, before_open, after_open, True) and fits(char, before_open, after_open, False):
        out[opened] = " " + out[opened]


def _atom_written(node: Atom, written: str, after_atom: bool) -> str:
    """An atom as written after `written` (the last piece out): with the whitespace it had before it, or a space
    where the placement put it right after another atom it was apart from in the source, or a URL after a word."""
    before = node.before or (" " if after_atom and not node.joined else "")
    if not before and written[-1:].isalnum() and node.raw[:1].isalnum():
        before = " "
    return ("" if written[-1:].isspace() else before) + node.raw


def _no_image(out: list[str]) -> None:
    """A "!" of the text written right before a Markdown link's "[" escaped: "![" would start an image."""
    last = next((j for j in range(len(out) - 1, -1, -1) if out[j]), None)
    if last is not None and out[last].endswith("!") and not out[last].endswith("\\!"):
        out[last] = out[last][:-1] + "\\!"


def _space_to_fit(out: list[str], k: int, opening: bool, fits: Callable[[str, str, str, bool], bool]) -> None:
    """out[k], a delimiter (a pair's, or one left unpaired), moved by a space where that makes it open (close) as
    it did in the source and it would not where the placement put it: "word_x_" opens no emphasis, "word _x_"
    does; an unpaired start put before a space ("a* b") goes onto the next word ("a *b")."""
    delimiter = out[k].lstrip()

    def same_run(j: int | None) -> bool:  # a piece of the same delimiter character right beside it ("~~" "~~")
        return j is not None and bool(out[j]) and not out[j].strip(delimiter[:1])

    def beside(j: int, step: int) -> int | None:
        return next((i for i in range(j + step, len(out) if step > 0 else -1, step) if out[i]), None)

    previous, following = beside(k, -1), beside(k, 1)
    last = following is None or following == len(out) - 1  # nothing after it in the run (`out` is padded)
    emphasis = delimiter[:1] in ("*", "_", "~")  # an HTML tag left unclosed opens wherever it is
    if opening and emphasis and last and previous is not None and previous > 0 and _last_word_moved(out, previous, k):
        return  # a start left last in its run (its pair ends in the next one) goes before the run's last word
    # a run of one character written by several pairs is read as one run: its first piece (an opening) or its last
    # (a closing) decides, looking past the others
    if (opening and same_run(previous) and out[k] == delimiter) or (not opening and same_run(following)):
        return
    while opening and same_run(following):
        following = beside(following, 1)
    while not opening and same_run(previous) and out[k] == delimiter:
        previous = beside(previous, -1)
    before = (
        out[k][-len(delimiter) - 1]
        if len(out[k]) > len(delimiter)
        else out[previous][-1]
        if previous is not None
        else ""
    )
    after = "" if following is None else out[following][0]
    if fits(delimiter, before, after, opening):
        return
    if not opening and out[k] != delimiter and previous is not None:  # the space that keeps two atoms apart
        bare = out[previous][-1]
        if fits(delimiter, bare, after, False):
            out[k] = delimiter
            return
    blank = (" ", "\t", "\n")  # a space as Markdown reads one (Python's isspace() also takes "\x1f", which is not)
    if opening and after in blank and len(out[following]) > 1:  # the space after it goes before it
        out[following] = out[following][1:]
        after = out[following][0]
    elif not opening and before in blank and previous is not None and len(out[previous]) > 1 and out[k] == delimiter:
        out[previous] = out[previous][:-1]  # the space before it goes after it
        before = out[previous][-1]
    if opening and before not in blank and fits(delimiter, " ", after, True):
        out[k] = " " + delimiter
    elif not opening and after and after not in blank and fits(delimiter, before, " ", False):
        out[k] = out[k] + " "


def _sibling_spans(
    nodes: Sequence[Node], lo: int, hi: int, place: Callable[[Node], tuple[int, int]], text: str, words
) -> list[tuple[int, int, int, Node]]:
    """(start, end, order, node) of siblings placed in [lo, hi): clipped into it, kept from overlapping in order of
    place, trimmed to words; a mark left empty takes the nearest word no sibling holds. In order of place."""
    wanted = []
    for order, node in enumerate(nodes):
        # an atom never closed goes right before the tag that ended it: text after it would fall inside it
        a, b = (hi, hi) if isinstance(node, Atom) and node.last else place(node)
        a = min(max(a, lo), hi)
        wanted.append((a, min(max(b, a), hi), order, node))
    wanted.sort(key=lambda s: (s[0], s[2]))
    spans, position = [], lo
    for a, b, order, node in wanted:
        a = max(a, position)
        spans.append((a, max(b, a), order, node))
        position = max(b, a)
    for i, (a, b, order, node) in enumerate(spans):
        blank = isinstance(node, Mark) and node.blank
        if a < b and not blank:  # a clipped span starts and ends on a word, never on the space beside it
            a += len(text[a:b]) - len(text[a:b].lstrip())
            b -= len(text[a:b]) - len(text[a:b].rstrip())
            spans[i] = (a, b, order, node)
        if a == b and isinstance(node, Mark) and node.end > node.start and not blank:
            taken = [(x, y) for x, y, _, _ in spans if x < y]
            free = [w for w in words if lo <= w[0] and w[1] <= hi and not any(x < w[1] and w[0] < y for x, y in taken)]
            if free:
                x, y = min(free, key=lambda w: abs(w[0] - a))
                spans[i] = (x, x + _core_end(text[x:y]), order, node)
            else:
                _word_given_up(spans, i, words, text)
    spans.sort(key=lambda s: (s[0], s[2]))
    return spans


def _word_given_up(spans: list[tuple[int, int, int, Node]], i: int, words, text: str) -> None:
    """spans[i], a mark left empty with no free word, takes the edge word of a sibling mark beside it that holds
    two words or more (an empty pair of delimiters would not read back as one)."""
    a, _, order, node = spans[i]
    for j in sorted(range(len(spans)), key=lambda j: abs(spans[j][0] - a)):
        x, y, other_order, other = spans[j]
        held = [w for w in words if x <= w[0] and w[1] <= y]
        if j == i or not isinstance(other, Mark) or other.children or len(held) < 2:
            continue
        w = held[-1] if a >= y else held[0]  # the word at the sibling's edge nearest to this mark
        if a >= y:
            spans[j] = (x, held[-2][1], other_order, other)
        else:
            spans[j] = (held[1][0], y, other_order, other)
        spans[i] = (w[0], w[0] + _core_end(text[w[0] : w[1]]), order, node)
        return


def _same_delimiter(outer: Mark, inner: Node) -> bool:
    """Markdown's emphasis nested in emphasis of the same character ("*" in "*"): written side by side at both
    ends ("**x**") they would read back as one pair of another kind ("***x***", emphasis around strong emphasis,
    and "~~~~x~~~~" read back as themselves)."""
    return isinstance(inner, Mark) and inner.open == outer.open and outer.open in ("*", "_")


def _keep_delimiters_apart(
    spans: list[tuple[int, int, int, Node]],
    parent: Mark | None,
    lo: int,
    hi: int,
    words: Sequence[tuple[int, int]],
    place: Callable[[Node], tuple[int, int]],
) -> list[Node]:
    """Siblings' spans adjusted (in place) so that no pair shares both ends with a pair around it written with the
    same delimiter: a pair holding one word that holds such a pair takes in the next free word (or the one
    before); a pair that would cover all of such a parent's words keeps the one at its end in the source. Returns
    the pairs left sharing both ends (their parent's one word): written with the other character ("*_x_*")."""
    inside = [(max(x, lo), min(y, hi)) for x, y in words if x < hi and lo < y]  # words clipped into [lo, hi)
    other: list[Node] = []
    for i, (a, b, order, node) in enumerate(spans):
        if parent is not None and _same_delimiter(parent, node) and len(inside) <= 1:
            if parent.open[:1] in "*_" and (not inside or (a, b) == inside[0]):
                other.append(node)
        elif parent is not None and _same_delimiter(parent, node):
            if (a, b) == (inside[0][0], inside[-1][1]):  # all of the parent's text
                x, y = inside[0] if node.start == parent.start else inside[-1]
                spans[i] = (x, y, order, node)
        elif isinstance(node, Mark) and any(
            _same_delimiter(node, child) and place(child)[0] <= a and place(child)[1] >= b for child in node.children
        ):  # a pair inside it of the same delimiter placed over all of it
            held = [w for w in inside if a <= w[0] and w[1] <= b]
            taken = [(x, y) for j, (x, y, _, _) in enumerate(spans) if j != i and x < y]
            free = [w for w in inside if not any(x < w[1] and w[0] < y for x, y in taken)]
            after = [w for w in free if w[0] >= b]
            before = [w for w in free if w[1] <= a]
            if len(held) == 1 and (after or before):
                spans[i] = (a, after[0][1], order, node) if after else (before[-1][0], b, order, node)
    return other


def _other_delimiter(delimiter: str) -> str:
    """Markdown's other emphasis character, as many times ("_" for "*", "**" for "__")."""
    return delimiter.translate(str.maketrans("*_", "_*"))


def _punctuation(char: str) -> bool:
    return unicodedata.category(char).startswith("P")


def _core_end(word: str) -> int:
    end = len(word)
    while end > 0 and _punctuation(word[end - 1]):
        end -= 1
    return end or len(word)


def _core_start(word: str) -> int:
    start = 0
    while start < len(word) and _punctuation(word[start]):
        start += 1
    return start if start < len(word) else 0
