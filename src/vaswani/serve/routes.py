"""The routes of the HTTP service, on one router: each reads what it needs from `app.state`, which create_app
(serve/app.py) fills: translator, settings, defaults (the DecodeRequest every request starts from), metrics,
info (/v1/model's answer) and, while the app runs, batcher.

A request body is checked in two steps: its shape by `TranslateRequest` (pydantic, before the route runs), then
against this server's limits and this model (`decode_request`, `sentences_of`): both end in a 422 whose one-line
`error` names the field.

No `from __future__ import annotations` here: FastAPI reads the request model's annotation at run time.
"""

import dataclasses
import json
import math
import time
from collections import Counter
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from vaswani.decode.request import DecodeRequest
from vaswani.serve.batching import BusyError
from vaswani.translate.formats import Split, detect_paragraphs, text_format
from vaswani.translate.language_policy import AUTO
from vaswani.translate.quality import flag

router = APIRouter()


class RequestError(ValueError):
    """A request that passed the schema but not this server's limits or this model (HTTP 422)."""


class TranslateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    text: list[str] = Field(
        min_length=1,
        description="texts to translate, in order: sentences or documents (at most /v1/model's limits.max_texts "
        "sentences in all)",
    )
    split_sentences: bool = Field(
        True,
        description="split each text into paragraphs, lines and sentences, translate the sentences and put "
        "the text back together (as DeepL's split_sentences); false: each text goes to the model as it is",
    )
    format: Literal["text", "html", "markdown"] = Field(
        "text",
        description="html or markdown: each text is a document whose text is translated and whose markup is kept, "
        "each inline tag around the words aligned to the ones it wrapped; code, scripts and URLs as written",
    )
    source_language: str | None = Field(
        None,
        max_length=64,  # checked against the model's codes, a near miss answered with the code it may mean
        description="an NLLB, M2M-100 or mBART-50 model's code of the text's language, e.g. deu_Latn (needed; "
        "/v1/model lists source_languages), or auto: each sentence's language detected, each text's reported as "
        "detected_language; for other models the ISO 639 code whose sentence rules split the text (default: the "
        "model's source language)",
    )
    target_language: str | None = Field(
        None,
        max_length=64,
        description="a multilingual model's target language: OPUS-MT's, e.g. fra (its >>fra<< token goes before "
        "every sentence); NLLB's, M2M-100's or mBART-50's code, e.g. fra_Latn (/v1/model lists target_languages)",
    )
    beam: int | None = Field(None, ge=1, description="beam size (default: the model's; at most limits.max_beam)")
    n_best: int = Field(1, ge=1, description="alternatives per sentence, best first (at most beam)")
    no_repeat_ngram: int | None = Field(
        None, ge=0, le=32, description="no n-gram of this many tokens twice in a translation (0: off)"
    )
    repetition_penalty: float | None = Field(
        None,
        ge=0.1,
        le=10,
        description="transformers' repetition penalty on tokens already output (1: off), from 0.1 to 10: their "
        "logits divided or multiplied by at most 10 (a penalty near 0 overflows float32 logits into NaN scores)",
    )
    attention: bool = Field(False, description="add the cross-attention of each sentence's best translation")
    glossary: list[list[str]] | None = Field(
        None,
        description="your terms as [source term, target term] pairs: where a source term occurs (whole words, any "
        "case), its target term is in that sentence's translation, exactly as written; a translation that could not "
        "hold one lists it in missing_terms (at most /v1/model's limits.max_glossary pairs)",
    )
    min_confidence: float | None = Field(
        None,
        ge=0,
        le=1,
        description="mark translations (texts, and each sentence of a split text) whose confidence is under this "
        'with "low_confidence": true: the ones to have checked',
    )
    other_languages: Literal["translate", "copy"] = Field(
        "translate",
        description="a model of one source language: a sentence detected as another language is marked "
        "other_language (its code and probability) and translated anyway, or with copy, copied unchanged",
    )

    @field_validator("text")
    @classmethod
    def _texts(cls, texts: list[str]) -> list[str]:
        for i, text in enumerate(texts):
            _check_characters(text, f"text[{i}]")
        return texts

    @field_validator("glossary")
    @classmethod
    def _terms(cls, pairs: list[list[str]] | None) -> list[list[str]] | None:
        """The terms go to the tokenizer and back into the JSON answer, as the texts do: the same characters."""
        for i, pair in enumerate(pairs or ()):
            for j, term in enumerate(pair):
                _check_characters(term, f"glossary[{i}][{j}]")
        return pairs


def _check_characters(text: str, where: str) -> None:
    """A NUL (cut by the tokenizer) or a lone surrogate (not encodable: the answer could not be written) refused,
    naming where it is."""
    if "\x00" in text:
        raise ValueError(f"{where} contains a NUL character; remove it")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{where} is not valid Unicode (a lone surrogate); send UTF-8 text") from None


def one_line(message: str) -> str:
    """An error message on one line, whatever the client's words it quotes: a client's log keeps it whole."""
    return " ".join(message.splitlines())


def _number(n: int) -> str:
    """`n` as written, or its size where it would flood a one-line message (JSON allows any number of digits)."""
    return str(n) if n.bit_length() <= 64 else f"a number of about {int(n.bit_length() * 0.30103) + 1} digits"


def decode_request(body: TranslateRequest, state: Any) -> DecodeRequest:
    """The body's decoding request: the server's defaults with what it asks for, within the limits."""
    s, defaults = state.settings, state.defaults
    if body.beam is not None and body.beam > s.max_beam:
        raise RequestError(f"beam: {_number(body.beam)} is more than the {s.max_beam} this server allows")
    if body.n_best > s.max_beam:  # sampling's n_best is not bounded by a beam: bounded here
        raise RequestError(f"n_best: {_number(body.n_best)} is more than the {s.max_beam} this server allows")
    try:
        state.translator.languages.check(body.target_language, body.source_language)
    except ValueError as error:
        raise RequestError(f"target_language / source_language: {error}") from None
    if body.glossary and len(body.glossary) > s.max_glossary:
        raise RequestError(f"glossary: {len(body.glossary)} pairs, more than the {s.max_glossary} allowed")
    overrides = dict(no_repeat_ngram=body.no_repeat_ngram, repetition_penalty=body.repetition_penalty)
    try:  # the request's own checks (n_best within the beam, the glossary's pairs), said as a 422
        return defaults.replace(
            beam_size=body.beam,
            n_best=body.n_best,
            attention=body.attention,
            glossary=body.glossary,
            other_languages=body.other_languages,
            **overrides,
        )
    except ValueError as error:  # ConfigError and GlossaryError are ValueErrors
        raise RequestError(str(error)) from None


def sentences_of(body: TranslateRequest, state: Any) -> Split:
    """The body's texts read in its format (translate/formats.py) and cut into sentences, within the limits."""
    s = state.settings
    if len(body.text) > s.max_texts:
        raise RequestError(f"text: {len(body.text)} texts, more than the {s.max_texts} a request may have")
    for i, text in enumerate(body.text):
        if len(text) > s.max_text_chars:
            raise RequestError(f"text[{i}] has {len(text)} characters, more than the {s.max_text_chars} allowed")
    try:
        format = text_format(body.format, body.split_sentences)
    except ValueError as error:
        raise RequestError(str(error)) from None
    split = format.split(body.text, state.translator.languages.sentence_language(body.source_language))
    sentences = split.sentences
    if len(sentences) > s.max_texts:
        raise RequestError(
            f"text has {len(sentences)} sentences in all, more than the {s.max_texts} a request may have: "
            "send fewer or shorter texts per request"
        )
    for i, sentence in enumerate(sentences):
        if len(sentence) > s.max_chars:
            where = f"sentence {i + 1} of the request" if body.split_sentences else f"text[{i}]"
            raise RequestError(f"{where} has {len(sentence)} characters, more than the {s.max_chars} allowed")
    if body.attention and len(sentences) > s.max_attention_texts:
        raise RequestError(
            f"attention is returned for at most {s.max_attention_texts} sentences per request, got {len(sentences)}"
        )
    return split


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    """ "ok" while the translation worker runs (else 503), with what it has done."""
    batcher = getattr(request.app.state, "batcher", None)
    stats = dataclasses.asdict(batcher.stats) if batcher else {}
    ok = batcher is not None and batcher.alive
    return JSONResponse(
        {"status": "ok" if ok else "unavailable", "queued_sentences": batcher.queued if ok else 0, **stats},
        200 if ok else 503,
    )


@router.get("/metrics", include_in_schema=False)
async def metrics_page(request: Request) -> Response:
    body, content_type = request.app.state.metrics.render(request.headers.get("accept"))
    return Response(body, media_type=content_type)


@router.get("/v1/model")
async def model(request: Request) -> dict[str, Any]:
    return request.app.state.info


class DetectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    q: str | list[str] = Field(
        description="a text, or a list of texts (at most /v1/model's limits.max_texts), whose language to detect"
    )
    codes: Literal["iso", "nllb"] = Field(
        "iso", description="iso: ISO 639 (639-1 where there is one, e.g. de); nllb: NLLB-200's codes (deu_Latn)"
    )


@router.post("/v1/detect")
async def detect(body: DetectRequest, request: Request) -> JSONResponse:
    """LibreTranslate's /detect: each text's likeliest languages, best first, as {"language", "confidence"} with
    the confidence in percent (a list for `q` a text, a list of such lists for `q` a list; empty for a text without
    letters). Below translate/language_id.py's THRESHOLD (58%), `vaswani detect` says und."""
    import asyncio

    state = request.app.state
    texts = [body.q] if isinstance(body.q, str) else body.q
    try:
        if len(texts) > state.settings.max_texts:
            raise RequestError(f"q: {len(texts)} texts, more than the {state.settings.max_texts} a request may have")
        for i, text in enumerate(texts):
            if len(text) > state.settings.max_text_chars:
                limit = state.settings.max_text_chars
                raise RequestError(f"q[{i}]: {len(text)} characters, more than the {limit} a text may have")
            _check_characters(text, f"q[{i}]")
        identifier = _identifier(state, body.codes)
        found = await asyncio.to_thread(lambda: [identifier.ranked(text, 3) for text in texts])
    except (RequestError, ValueError, ImportError) as error:
        return JSONResponse({"error": one_line(str(error))}, 422)
    answers = [
        [{"language": d.language, "confidence": round(100 * d.probability, 2)} for d in ranked] for ranked in found
    ]
    return JSONResponse(answers[0] if isinstance(body.q, str) else answers)


def _identifier(state: Any, codes: str):
    """The server's language identifier for `codes`, made at its first use (translate/language_id.py)."""
    from vaswani.translate.language_id import LanguageIdentifier

    made = state.identifiers
    if codes not in made:
        identifier = LanguageIdentifier(codes=codes)
        identifier.load()  # a missing py3langid is said here, in the request's 422
        made[codes] = identifier
    return made[codes]


@router.post("/v1/translate")
async def translate(body: TranslateRequest, request: Request) -> JSONResponse:
    import asyncio

    started, state = time.perf_counter(), request.app.state
    try:
        decode = decode_request(body, state)
        split = sentences_of(body, state)
    except RequestError as error:
        return JSONResponse({"error": one_line(str(error))}, 422)
    # the only tokenization: counted here, decoded by the batcher (requests for other languages batch together)
    translator, sentences = state.translator, split.sentences
    try:  # a multilingual model refuses sentences without a target language
        source = translator.languages.model_source(body.source_language)
        detected = None
        if source == AUTO:  # each paragraph's language detected (translate/formats.py), off the event loop
            detected = await asyncio.to_thread(detect_paragraphs, translator, split)
            source = [code for code, _ in detected]
        ids = translator.encode_sources(sentences, body.target_language, source)
        # one target per sentence where the model takes one (a batch mixes requests); a 422 here, not in the batch
        languages = translator.languages.per_sentence(body.target_language, len(sentences))
    except ValueError as error:
        return JSONResponse({"error": one_line(str(error))}, 422)
    tokens, limit = sum(map(len, ids)), state.settings.max_batch_tokens
    if tokens > limit:
        message = f"text has {tokens} source tokens in all, more than the {limit} a request may have"
        return JSONResponse({"error": message + ": send fewer or shorter texts per request"}, 422)
    try:
        results = await state.batcher.translate(sentences, ids, split.request(decode), languages) if sentences else []
    except BusyError as error:
        return JSONResponse({"error": str(error)}, 503, headers={"Retry-After": "1"})
    target = translator.languages.target_iso(body.target_language)
    translations = [t.to_dict() for t in split.assemble(results, target)]
    for translation in translations:
        flag(translation, body.min_confidence)
    if detected is not None:
        for translation, found in zip(translations, _per_text(detected, split.counts), strict=True):
            if found is not None:
                translation["detected_language"] = {"language": found[0], "probability": round(found[1], 4)}
    elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
    return FiniteJSONResponse({"translations": translations, "elapsed_ms": elapsed_ms})


def _per_text(detected: list[tuple[str, float]], counts: list[int]) -> list[tuple[str, float] | None]:
    """Each text's language from its sentences' (`counts` of them in order): the one most of them were read as,
    with the highest probability among those; None for a text without sentences."""
    out, position = [], 0
    for n in counts:
        mine = detected[position : position + n]
        position += n
        if not mine:
            out.append(None)
            continue
        code = Counter(c for c, _ in mine).most_common(1)[0][0]
        out.append((code, max(p for c, p in mine if c == code)))
    return out


class FiniteJSONResponse(JSONResponse):
    """JSON has no infinities or NaN: a score the search left so (a repetition rule that banned every token) is
    written null, rather than the translations being lost to a 500."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except ValueError:  # "Out of range float values are not JSON compliant": rare, so checked only then
            return super().render(_finite(content))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


@router.get("/", include_in_schema=False)
async def page(request: Request) -> FileResponse:
    return FileResponse(request.app.state.static / "index.html")


@router.post("/v1/translate_file")
async def translate_file(request: Request) -> Response:
    """A file (multipart field `file`; optional fields `format`, `target_language`, `source_language`, `beam`, and
    `glossary`: a JSON list of [source, target] pairs)
    translated into a file of its format (translate/files), sent back with its media type as NAME.LANG.EXT; a file
    that cannot be translated gets a 422 naming what is wrong, one larger than the server's max_file a 413."""
    import asyncio
    from pathlib import PurePath

    from vaswani.translate.files import FileError, format_for, fragment_format, read_file

    state = request.app.state
    try:
        form = await request.form()
    except Exception as error:  # a body that is no multipart form: python-multipart's own message
        return JSONResponse({"error": one_line(f"send the file as multipart/form-data (field 'file'): {error}")}, 422)
    upload = form.get("file")
    if upload is None or isinstance(upload, str):
        return JSONResponse({"error": "send the file as multipart/form-data, in the field 'file'"}, 422)
    fields = {k: form.get(k) or None for k in ("format", "target_language", "source_language", "beam", "glossary")}
    name = PurePath(upload.filename or "file").name
    data = await upload.read()
    translator = state.translator
    try:
        if len(data) > state.settings.max_file:
            raise FileError(f"has {len(data)} bytes, more than the {state.settings.max_file} allowed")
        handler = format_for(name, fields["format"])
        if handler is None:
            raise FileError("has no file format this server translates (srt, vtt, docx, pptx, odt, odp, epub)")
        translator.languages.check(fields["target_language"], fields["source_language"])
        beam = int(fields["beam"]) if fields["beam"] else None
        if beam is not None and not 1 <= beam <= state.settings.max_beam:
            raise FileError(f"beam: {beam} is not between 1 and the {state.settings.max_beam} this server allows")
        decode = state.defaults.replace(beam_size=beam, glossary=_glossary_field(fields["glossary"], state.settings))
        parsed = await asyncio.to_thread(read_file, data, handler)
    except (ValueError, ImportError) as error:  # FileError, a language or a beam refused
        return JSONResponse({"error": one_line(f"{name}: {error}")}, 422)
    # the file's fragments read as markup and decoded by the batcher, beside other requests' sentences
    language = translator.languages.sentence_language(fields["source_language"])
    split = await asyncio.to_thread(fragment_format().split, parsed.fragments, language)
    sentences = split.sentences
    try:
        source = translator.languages.model_source(fields["source_language"])
        if source == AUTO:  # each sentence's language detected
            source = [code for code, _ in await asyncio.to_thread(detect_paragraphs, translator, split)]
        ids = translator.encode_sources(sentences, fields["target_language"], source)
        languages = translator.languages.per_sentence(fields["target_language"], len(sentences))
        results = await state.batcher.translate(sentences, ids, split.request(decode), languages)
    except ValueError as error:
        return JSONResponse({"error": one_line(f"{name}: {error}")}, 422)
    except BusyError as error:
        return JSONResponse({"error": str(error)}, 503, headers={"Retry-After": "1"})
    target = translator.languages.target_iso(fields["target_language"])
    texts = [t.text for t in split.assemble(results, target)]
    out = await asyncio.to_thread(parsed.write, texts, target)
    return _attachment(out, name, target, handler.media_type)


def _attachment(data: bytes, name: str, target: str | None, media_type: str) -> Response:
    """A translated file sent as NAME.LANG.EXT (an ASCII name, and the name itself as RFC 5987 says)."""
    from pathlib import PurePath
    from urllib.parse import quote

    path = PurePath(name)
    filename = f"{path.stem}.{target}{path.suffix}"
    plain = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename)
    headers = {"Content-Disposition": f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(filename)}"}
    return Response(data, media_type=media_type, headers=headers)


def _glossary_field(value: str | None, settings) -> list[list[str]] | None:
    """A form's glossary field: the JSON list of [source, target] pairs /v1/translate takes (a ValueError naming it)."""
    if not value:
        return None
    try:
        pairs = json.loads(value)
    except json.JSONDecodeError:
        raise ValueError('glossary: send a JSON list of [source, target] pairs, e.g. [["Hund", "hound"]]') from None
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(t, str) and t.strip() for t in p) for p in pairs
    ):
        raise ValueError('glossary: send a JSON list of [source, target] pairs, e.g. [["Hund", "hound"]]')
    if len(pairs) > settings.max_glossary:
        raise ValueError(f"glossary: {len(pairs)} pairs, more than the {settings.max_glossary} allowed")
    return pairs or None
