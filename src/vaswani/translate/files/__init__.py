"""The files people translate: subtitles (SRT, WebVTT), office documents (DOCX, PPTX, ODT, ODP) and e-books (EPUB),
each behind one interface (files/base.py: a format reads a file into HTML fragments and writes it back from their
translations), all translated by one engine: every fragment of a file in one call, as markup is translated.

    translate_file(translator, "talk.de.srt", "talk.en.srt")              # the format from the extension
    data = translate_bytes(translator, open("a.docx", "rb").read(), "docx", target_language="fra")

A file that cannot be translated (damaged, encrypted, a zip bomb, another format than its name says, a PDF, empty) is
refused in one line (FileError) and nothing is written; the output is written whole or not at all (atomic.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vaswani.translate.files.base import FileError, FileFormat, Parsed

if TYPE_CHECKING:
    from vaswani.decode.request import DecodeRequest
    from vaswani.translate.formats import MarkupFormat
    from vaswani.translate.translator import Translator

# each format's name (--format), its extensions and the module that holds it (imported when a file of it is read:
# lxml, vaswani[files], only then)
FILE_FORMATS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "srt": ((".srt",), "subtitles", "Srt"),
    "vtt": ((".vtt",), "subtitles", "Vtt"),
    "docx": ((".docx",), "office", "Docx"),
    "pptx": ((".pptx",), "office", "Pptx"),
    "odt": ((".odt",), "office", "Odt"),
    "odp": ((".odp",), "office", "Odp"),
    "epub": ((".epub",), "epub", "Epub"),
}
MAX_FILE_BYTES = 64 * 1024 * 1024  # what a file may weigh (the server's limit is its own setting)

__all__ = [
    "FILE_FORMATS",
    "FileError",
    "Parsed",
    "file_format",
    "format_for",
    "fragment_format",
    "read_file",
    "translate_bytes",
]


def file_format(name: str) -> FileFormat:
    """The format called `name` (a key of FILE_FORMATS); a one-line ImportError where its libraries are missing."""
    import importlib

    _, module, cls = FILE_FORMATS[name]
    try:
        return getattr(importlib.import_module(f"vaswani.translate.files.{module}"), cls)()
    except ModuleNotFoundError as error:
        raise ImportError(f"{name} files need {error.name}: pip install 'vaswani[files]'") from None


def format_for(path: str | Path | None, forced: str | None = None) -> FileFormat | None:
    """The file format `forced` names, or the one `path`'s extension says (None: a text format, or unknown)."""
    if forced:
        return file_format(forced) if forced in FILE_FORMATS else None
    suffix = Path(path).suffix.lower() if path else ""
    if suffix == ".pdf":
        raise FileError("is a PDF, which vaswani does not translate: convert it to DOCX first")
    return next((file_format(name) for name, (ends, _, _) in FILE_FORMATS.items() if suffix in ends), None)


def read_file(data: bytes, format: FileFormat) -> Parsed:
    """`data` read as `format`, refused in one line where it cannot be."""
    if not data.strip():
        raise FileError("is empty: there is nothing to translate")
    if len(data) > MAX_FILE_BYTES:
        raise FileError(f"is {len(data) >> 20} MiB, more than the {MAX_FILE_BYTES >> 20} MiB a file may be")
    return format.read(data)


def fragment_format() -> MarkupFormat:
    """How a file's fragments are read: as XHTML (an e-book's documents, the markup a reader here writes), from the
    source as written, as an e-reader parses XHTML (as XML); not repaired as a browser repairs an HTML page."""
    from vaswani.translate.formats import MarkupFormat
    from vaswani.translate.markup.html import parse_html

    return MarkupFormat("html", parse_html)


def translate_bytes(
    translator: Translator,
    data: bytes,
    format: FileFormat | str,
    request: DecodeRequest | None = None,
    target_language: str | None = None,
    source_language: str | None = None,
    parsed: Parsed | None = None,
    **options: Any,
) -> bytes:
    """The file `data` translated, as a file of the same format. `request` (or `options`: DecodeConfig fields),
    `target_language` and `source_language` as Translator.translate_with_details takes them; `warn(index, message)`
    and `progress(n)` in `options` count the file's sentences."""
    from vaswani.translate.formats import translate_split

    format = file_format(format) if isinstance(format, str) else format
    parsed = parsed or read_file(data, format)
    policy = translator.languages
    split = fragment_format().split(parsed.fragments, policy.sentence_language(source_language))
    results = translate_split(
        translator,
        split,
        request,
        target_language=target_language,
        source_language=policy.model_source(source_language),
        **options,
    )
    return parsed.write([r.text for r in results], policy.target_iso(target_language))


def translate_file(
    translator: Translator,
    source: str | Path,
    target: str | Path,
    format: str | None = None,
    progress_for: Callable[[int], Callable[[int], None]] | None = None,
    **options: Any,
) -> None:
    """The file `source` translated into `target` (written whole, or not at all), its format from `source`'s
    extension or `format`. `progress_for(sentences)`: a progress callback for the file's sentence count."""
    from vaswani.atomic import write_bytes

    handler = format_for(source, format)
    if handler is None:
        raise FileError(f"has no file format vaswani knows (give --format: {', '.join(FILE_FORMATS)})")
    data = Path(source).read_bytes()
    parsed = read_file(data, handler)
    if progress_for is not None:
        language = translator.languages.sentence_language(options.get("source_language"))
        options["progress"] = progress_for(len(fragment_format().split(parsed.fragments, language).sentences))
    write_bytes(target, translate_bytes(translator, data, handler, parsed=parsed, **options))
