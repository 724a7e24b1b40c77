"""What a text is read as, behind one interface: lines (each text one sentence), documents (each text cut into
sentences and put back with its paragraphs), HTML and Markdown (each text's markup kept around the aligned words).
The file formats (translate/files) read a file into XHTML fragments, read as written (files.fragment_format()).

Every caller (the CLI, the server's routes, the files) does the same three things, whatever the format:

    split = text_format("markdown").split(texts, language)     # the sentences of all the texts, in order
    results = translator.translate_with_details(split.sentences, split.request(request), ...)
    translations = split.assemble(results, target)              # one translation per text, .text and .to_dict()

so that sentences of many texts (many requests, in the server) are decoded together, and no caller asks which
format it holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from vaswani.data.corpus import clean_line
from vaswani.translate.document import Document, DocumentTranslation, assemble, puts_spaces, split
from vaswani.translate.language_policy import AUTO
from vaswani.translate.markup import Markup, MarkupTranslation, assemble_markup, parse, split_run

if TYPE_CHECKING:
    from vaswani.decode.request import DecodeRequest
    from vaswani.translate.translation import Translation
    from vaswani.translate.translator import Translator

TEXT_FORMATS = ("text", "html", "markdown")


class Split(Protocol):
    """A format's texts cut into the sentences to translate, and how their translations go back together."""

    sentences: list[str]  # every sentence of every text, in order
    counts: list[int]  # how many of them each text has
    kept: list[str]  # what the format left as written, each with its reason (markup it could not read back)
    paragraphs: list[list[int]]  # the sentences of each paragraph (a line; a line of text alone), as indices

    def request(self, request: DecodeRequest) -> DecodeRequest: ...

    def assemble(self, results: Sequence[Translation], target: str | None) -> list[Any]: ...


class TextFormat(Protocol):
    name: str

    def split(self, texts: Sequence[str], language: str | None) -> Split: ...


@dataclass
class _LineSplit:
    sentences: list[str]
    counts: list[int] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    @property
    def paragraphs(self) -> list[list[int]]:
        return [[i] for i in range(len(self.sentences))]

    def request(self, request: DecodeRequest) -> DecodeRequest:
        return request

    def assemble(self, results: Sequence[Translation], target: str | None) -> list[Translation]:
        return list(results)


class Lines:
    """Each text is one sentence, translated as it is: line mode, and the API's split_sentences false."""

    name = "lines"

    def split(self, texts: Sequence[str], language: str | None) -> _LineSplit:
        return _LineSplit(list(texts), [1] * len(texts))


@dataclass
class _DocumentSplit:
    texts: Sequence[str]
    documents: list[Document]
    kept: list[str] = field(default_factory=list)

    @property
    def sentences(self) -> list[str]:
        return [s for d in self.documents for s in d.sentences]

    @property
    def counts(self) -> list[int]:
        return [len(d.sentences) for d in self.documents]

    @property
    def paragraphs(self) -> list[list[int]]:
        out, offset = [], 0
        for document in self.documents:
            out += [[offset + i for i in line] for line in document.lines()]
            offset += len(document.sentences)
        return out

    def request(self, request: DecodeRequest) -> DecodeRequest:
        return request

    def assemble(self, results: Sequence[Translation], target: str | None) -> list[DocumentTranslation]:
        return assemble(self.texts, self.documents, results, puts_spaces(target))


class Documents:
    """Each text a document: cut into sentences (translate/document.py), put back with its own layout."""

    name = "text"

    def split(self, texts: Sequence[str], language: str | None) -> _DocumentSplit:
        return _DocumentSplit(texts, [split(text, language) for text in texts])


@dataclass
class _MarkupSplit:
    texts: Sequence[str]
    format: str
    markups: list[Markup]
    runs: _DocumentSplit  # every run of every text, a document each

    @property
    def sentences(self) -> list[str]:
        return self.runs.sentences

    @property
    def counts(self) -> list[int]:
        counts, position = [], 0
        run_counts = self.runs.counts
        for markup in self.markups:
            counts.append(sum(run_counts[position : position + len(markup.runs)]))
            position += len(markup.runs)
        return counts

    @property
    def kept(self) -> list[str]:
        return [reason for markup in self.markups for reason in markup.kept]

    @property
    def paragraphs(self) -> list[list[int]]:
        return self.runs.paragraphs  # each block's lines

    def request(self, request: DecodeRequest) -> DecodeRequest:
        return request.replace(alignment=True)  # the tags go where the words are aligned

    def assemble(self, results: Sequence[Translation], target: str | None) -> list[MarkupTranslation]:
        return assemble_markup(self.texts, self.format, self.markups, self.runs.assemble(results, target))


class MarkupFormat:
    """Each text an HTML or Markdown document: its runs cut into sentences, its tags placed by alignment
    (translate/markup)."""

    def __init__(self, name: str, read: Callable[[str], Markup] | None = None) -> None:
        self.name = name
        self.read = read or (lambda text: parse(text, name))

    def split(
        self, texts: Sequence[str], language: str | None, markups: Sequence[Markup] | None = None
    ) -> _MarkupSplit:
        markups = list(markups) if markups is not None else [self.read(text) for text in texts]
        runs = [run.text for markup in markups for run in markup.runs]
        documents = [split_run(run, language) for run in runs]
        return _MarkupSplit(texts, self.name, markups, _DocumentSplit(runs, documents))


def text_format(name: str, sentences: bool = True) -> TextFormat:
    """The format called `name` (text, html, markdown); plain text read line by line where `sentences` is false."""
    if name == "text":
        return Documents() if sentences else Lines()
    if name in ("html", "markdown"):
        if not sentences:
            raise ValueError(f"format: {name} is split into sentences; leave split_sentences true")
        return MarkupFormat(name)
    raise ValueError(f"format must be one of {', '.join(TEXT_FORMATS)}, got {name!r}")


def translate_split(
    translator: Translator, split: Split, request: DecodeRequest | None = None, **options: Any
) -> list[Any]:
    """Every sentence of `split` translated in one `translate_with_details` call, as line mode translates lines,
    and put back into its texts. `request`, and `options` as translate_with_details takes them: its own
    (`target_language`, `source_language`, `warn(index, message)` counting sentences, `progress`) and, without a
    request, n_best=, attention= and DecodeConfig fields."""
    passed = {k: options.pop(k) for k in ("target_language", "source_language", "warn", "progress") if k in options}
    request = split.request(request or translator.request(**options))
    sentences = [clean_line(s) for s in split.sentences]  # NUL: as in line mode
    detected = None
    if passed.get("source_language") == AUTO:  # each paragraph's language, for its sentences
        detected = detect_paragraphs(translator, split)
        passed["source_language"] = [code for code, _ in detected]
    results = translator.translate_with_details(sentences, request, **passed)
    if detected is not None:
        results = [dataclasses.replace(r, detected=d) for r, d in zip(results, detected, strict=True)]
    return split.assemble(results, translator.languages.target_iso(passed.get("target_language")))


def detect_paragraphs(translator: Translator, split: Split) -> list[tuple[str, float]]:
    """Each sentence's source language (the model's code) and its probability, detected once for its whole
    paragraph (`Translator.detect_sources`): a paragraph says more than its shortest sentence."""
    sentences = split.sentences
    groups = split.paragraphs
    found = translator.detect_sources([" ".join(sentences[i] for i in group) for group in groups])
    out: list[tuple[str, float]] = [("", 0.0)] * len(sentences)
    for group, language in zip(groups, found, strict=True):
        for i in group:
            out[i] = language
    return out


def translate_documents(
    translator: Translator,
    texts: Sequence[str],
    language: str | None = None,
    request: DecodeRequest | None = None,
    **options: Any,
) -> list[DocumentTranslation]:
    """Each text split into sentences (`language`: the source's; default: what the model was trained on), all
    sentences of all texts translated in one call, and the translations put back in the texts' layout
    (`request` and `options` as `translate_split` takes them)."""
    language = language or translator.languages.sentence_language(None)
    return translate_split(translator, Documents().split(texts, language), request, **options)


def translate_markup(
    translator: Translator,
    texts: Sequence[str],
    format: str,
    language: str | None = None,
    request: DecodeRequest | None = None,
    **options: Any,
) -> list[MarkupTranslation]:
    """Each text parsed as `format` (html, markdown), every sentence of every run translated in one call with its
    word alignment, and each text written back with its markup in place (`request` and `options` as
    `translate_split` takes them)."""
    language = language or translator.languages.sentence_language(None)
    return translate_split(translator, MarkupFormat(format).split(texts, language), request, **options)
