"""The http_api surface: `vaswani serve`'s HTTP API (serve/app.py, serve/routes.py) as clients call it: valid
requests to POST /v1/translate with any Unicode and every option (documents, html and markdown markup, glossaries,
beams, n-best, attention, languages), the same with one field of a wrong type (numbers for strings, lists, nulls,
nested objects), unknown keys, huge, zero and negative numbers, 10**5 texts, a 1 MiB string, bodies that are not
JSON, wrong or missing content types, empty bodies; and the other routes with wrong methods and unknown paths.

The promise (issue 60): a 200 whose body keeps the documented shape (one translation per text, in order, each a
str) and the texts the Python API gives (Translator.translate_with_details on the same sentences), or a 4xx whose JSON
`error` is one line naming the field (or the body, the header, the path) with no traceback; a 413 names the limit;
never a 5xx. Outcomes are the status codes ("200", "422", "413", ...)."""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.fuzz import Surface, quiet, text

GERMAN = [
    "Ein Mann fährt Fahrrad.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau liest. Kinder lachen.",
    "Ein kleines Mädchen in einem rosa Kleid klettert auf eine Treppe.",
    "Dr. Müller kam am 3. Oktober an.",
]
MARKUP = ["<b>", "</b>", "<a href='x'>", "</a>", "<br>", "<p>", "</p>", "<script>", "</script>", "&amp;", "<!--"]
MARKUP += ["-->", "**", "_", "`", "```", "[x](http://y)", "# ", "> ", "- ", "1. ", "\n\n", "\n", "  ", "<", ">"]
FIELDS = ("text", "split_sentences", "format", "source_language", "target_language", "beam", "n_best")
FIELDS += ("no_repeat_ngram", "repetition_penalty", "attention", "glossary")
NUMERIC = ("beam", "n_best", "no_repeat_ngram", "repetition_penalty")
EDGES = [0, -1, -(10**9), 1, 2, 4, 16, 17, 32, 33, 10**9, 10**30, 2**63, 2**64, -0.0, 0.5, 0.05, 1e-300, 10.5, 1e300]
LIMIT = 1 << 20  # the server's body limit (Settings.max_body)
JSON_TYPE = {"content-type": "application/json"}


@dataclass(frozen=True)
class Call:
    """One HTTP request, the translate request it carries (when it is one), and what it may get: "ok" (a 200),
    "refused" (a 4xx) or "either"; `words`: one of them names the field in a 4xx's error."""

    method: str
    path: str
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    request: dict | None = None
    expect: str = "either"
    words: tuple[str, ...] = ()
    chunked: bool = False


def _post(request: dict, expect: str = "either", words: tuple[str, ...] = ()) -> Call:
    """A JSON POST to /v1/translate (encoded here, so that what is sent is exactly what is checked)."""
    body = json.dumps(request, ensure_ascii=False).encode("utf-8")
    return Call("POST", "/v1/translate", body, dict(JSON_TYPE), request, expect, words)


def _texts() -> st.SearchStrategy[str]:
    """A text users send: any Unicode, sentences of the model's language, or markup mixed with Unicode."""
    markup = st.lists(st.one_of(text(max_size=12), st.sampled_from(MARKUP + GERMAN)), max_size=12).map("".join)
    return st.one_of(text(), st.sampled_from(GERMAN), markup)


def _safe() -> st.SearchStrategy[dict]:
    """Requests well within the limits, all of whose options are valid: each must be a 200."""
    options = {
        "split_sentences": st.just(True),
        "format": st.sampled_from(["text", "html", "markdown"]),
        "source_language": st.sampled_from(["de", "en", "xx", None]),
        "beam": st.integers(1, 4),
        "no_repeat_ngram": st.integers(0, 3),
        "repetition_penalty": st.floats(0.1, 10),
        "attention": st.booleans(),
        "glossary": st.just([["Mann", "man"], ["Hund", "dog"]]),
    }
    texts = st.lists(st.sampled_from(GERMAN), min_size=1, max_size=4)
    return st.fixed_dictionaries({"text": texts}, optional=options)


def _valid() -> st.SearchStrategy[dict]:
    """Requests of the right types with any Unicode and any option: a 200, or a 4xx at a limit (too many
    sentences, n_best above the beam, markup without splitting, a glossary's bad pair)."""
    pairs = st.lists(st.lists(text(1, 20), min_size=2, max_size=2), max_size=4)
    options = {
        "split_sentences": st.booleans(),
        "format": st.sampled_from(["text", "html", "markdown"]),
        "source_language": st.sampled_from(["de", "en", "fr", "xx", "zzz", None]),
        "target_language": st.one_of(st.none(), st.just(""), text(max_size=10)),  # no >>lang<< tokens: a 422
        "beam": st.one_of(st.none(), st.integers(1, 16)),
        "n_best": st.integers(1, 5),
        "no_repeat_ngram": st.one_of(st.none(), st.integers(0, 32)),
        "repetition_penalty": st.one_of(st.none(), st.floats(0.1, 10)),
        "attention": st.booleans(),
        "glossary": st.one_of(st.none(), pairs),
    }
    return st.fixed_dictionaries({"text": st.lists(_texts(), min_size=1, max_size=6)}, optional=options)


def _any_json() -> st.SearchStrategy[Any]:
    """Any JSON value: what a wrong field holds."""
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        text(max_size=12),
    )
    return st.recursive(
        leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text(0, 5), inner, max_size=3)
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fits(name: str, value: Any) -> bool:
    """Whether `value` has the schema's type for field `name` (TranslateRequest, strict): the rest must be refused."""
    if name == "text":
        return isinstance(value, list) and bool(value) and all(isinstance(x, str) for x in value)
    if name in ("split_sentences", "attention"):
        return isinstance(value, bool)
    if name == "format":
        return value in ("text", "html", "markdown")
    if value is None:
        return name in (
            "source_language",
            "target_language",
            "beam",
            "no_repeat_ngram",
            "repetition_penalty",
            "glossary",
        )
    if name == "source_language":
        return isinstance(value, str) and re.fullmatch(r"[a-z]{2,3}", value) is not None
    if name == "target_language":
        return isinstance(value, str) and len(value) <= 64
    if name in ("beam", "n_best"):
        return _is_int(value) and value >= 1
    if name == "no_repeat_ngram":
        return _is_int(value) and 0 <= value <= 32
    if name == "repetition_penalty":
        return isinstance(value, int | float) and not isinstance(value, bool) and 0.1 <= value <= 10
    return isinstance(value, list) and all(isinstance(p, list) and all(isinstance(t, str) for t in p) for p in value)


@st.composite
def _wrong_field(draw: st.DrawFn) -> Call:
    """A safe request with one field's value replaced by one of another type (or out of range)."""
    request, name = draw(_safe()), draw(st.sampled_from(FIELDS))
    value = draw(st.one_of(_any_json(), st.sampled_from(EDGES)) if name in NUMERIC else _any_json())
    request[name] = value
    if _fits(name, value):
        return _post(request, "either", (name,))
    return _post(request, "refused", (name,))


@st.composite
def _unknown_key(draw: st.DrawFn) -> Call:
    """A safe request with a key the API does not have: refused, naming it (quoted where it is not a word)."""
    request = draw(_safe())
    key = draw(st.one_of(text(max_size=30), st.sampled_from(["bean", "Text", "texts", "nbest", "", "\n", "a\nb"])))
    if key in FIELDS:
        key += "_"
    request[key] = draw(_any_json())
    words = (key[:64], json.dumps(key[:64])[1:-1]) if key else ('""',)
    return _post(request, "refused", words)


def _huge() -> st.SearchStrategy[Call]:
    """Requests past each limit, bounded so that a case stays fast: 10**5 texts, a 1 MiB string, a streamed body
    over the limit, a 20,001-character text, 100 sentences, 1,001 glossary pairs, attention for 9 sentences, a
    beam of 10**9, numbers of 5,000 digits, JSON nested 10,000 deep; and 64 sentences, the most a request may have."""
    many = {"text": ["Hallo"] * 10**5}
    return st.sampled_from(
        [
            _post(many, "refused", ("text",)),
            _post({"text": ["a" * LIMIT]}, "refused", (str(LIMIT),)),
            Call("POST", "/v1/translate", b"a" * (LIMIT + 1), dict(JSON_TYPE), None, "refused", (str(LIMIT),), True),
            _post({"text": ["x" * 20001]}, "refused", ("text[0]",)),
            _post({"text": ["Ein Hund. " * 100]}, "refused", ("text",)),
            _post({"text": ["a"], "glossary": [[f"w{i}", "x"] for i in range(1001)]}, "refused", ("glossary",)),
            _post({"text": ["Ein Hund. Eine Katze."] * 5, "attention": True}, "refused", ("attention",)),
            _post({"text": ["a"], "beam": 10**9}, "refused", ("beam",)),
            _post({"text": ["a"], "n_best": 10**4000}, "refused", ("n_best",)),
            Call(
                "POST",
                "/v1/translate",
                b'{"text": ["a"], "beam": ' + b"9" * 5000 + b"}",
                dict(JSON_TYPE),
                None,
                "refused",
                ("JSON",),
            ),
            Call("POST", "/v1/translate", b"[" * 10**4 + b"]" * 10**4, dict(JSON_TYPE), None, "refused", ("JSON",)),
            _post({"text": ["Ein Hund."] * 64}, "ok"),
            _post({"text": ["Ein Hund."] * 8, "attention": True, "beam": 16, "n_best": 16}, "ok"),
        ]
    )


def _bodies() -> st.SearchStrategy[Call]:
    """Bodies that are not a JSON object: bytes, broken JSON, JSON of another shape, invalid UTF-8, an empty one."""
    broken = [b'{"text": ["a"', b'{"text": ["\xff\xfe"]}', b"\xff\xfe", b'{"text": ["\\ud800"]}', b"NaN", b"{}"]
    broken += [b'{"\\ud800": 1}', b'{"text": ["a"], "repetition_penalty": NaN}', b'{"text": ["a"], "beam": 1e400}']
    shapes = _any_json().filter(lambda v: not isinstance(v, dict)).map(lambda v: json.dumps(v).encode())
    content = st.one_of(st.binary(max_size=40), st.sampled_from(broken), shapes, st.just(b""))
    return content.map(
        lambda body: Call(
            "POST",
            "/v1/translate",
            body,
            dict(JSON_TYPE),
            None,
            "refused",
            ("body", "JSON", "text", "repetition_penalty", "beam"),
        )
    )


def _content_types() -> st.SearchStrategy[Call]:
    """A valid body under another content type (or none): refused naming Content-Type, unless it is JSON's."""
    named = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/xml"]
    named += ["", "application/json; charset=utf-8", "application/vnd.api+json", "APPLICATION/JSON", "json"]
    printable = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30)
    kinds = st.one_of(st.sampled_from(named), printable, st.none())
    empty = st.booleans()

    def call(request: dict, kind: str | None, no_body: bool) -> Call:
        body = b"" if no_body else json.dumps(request).encode()
        headers = {} if kind is None else {"content-type": kind}
        return Call("POST", "/v1/translate", body, headers, request, "either", ("Content-Type", "body"))

    return st.builds(call, _safe(), kinds, empty)


def _routes() -> st.SearchStrategy[Call]:
    """The other routes, with wrong methods and unknown paths (any characters, escaped as URLs do)."""
    paths = ["/", "/health", "/metrics", "/v1/model", "/v1/translate", "/docs", "/openapi.json", "/static/app.js"]
    paths += ["/static/nope.js", "/static/..%2f..%2fetc/passwd", "/v2/translate", "/%00", "/static/%00", "//"]
    segment = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="?#"), max_size=20)
    path = st.one_of(st.sampled_from(paths), segment.map(lambda s: "/" + urllib.parse.quote(s)))
    methods = st.sampled_from(["GET", "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
    accept = st.one_of(st.none(), st.sampled_from(["application/openmetrics-text", "text/plain", "*/*", "x"]))

    def call(method: str, where: str, kind: str | None) -> Call:
        return Call(
            method, where, None, {} if kind is None else {"accept": kind}, None, "either", ("/", method, "body")
        )

    return st.builds(call, methods, path, accept)


def inputs() -> st.SearchStrategy[Call]:
    """Every kind of request, valid ones most often (they exercise the decoding, where 5xx would hide)."""
    valid = st.one_of(_valid(), _safe()).map(_post)
    safe = _safe().map(lambda r: _post(r, "ok"))
    return st.one_of(valid, safe, _wrong_field(), _unknown_key(), _huge(), _bodies(), _content_types(), _routes())


def _send(client: Any, call: Call) -> Any:
    """The call through the app (a chunked body streamed in 64 KiB pieces, with no Content-Length)."""
    kwargs: dict[str, Any] = {"headers": call.headers}
    if call.content is not None:
        pieces = [call.content[i : i + 65536] for i in range(0, len(call.content), 65536)]
        kwargs["content"] = iter(pieces) if call.chunked else call.content
    return client.request(call.method, call.path, **kwargs)


def _check_error(call: Call, response: Any) -> None:
    """A 4xx: JSON whose `error` is one line, no traceback, naming the field (or body, header, path); a 413 names
    the limit."""
    assert response.headers.get("content-type", "").startswith("application/json"), response.headers
    error = response.json()["error"]
    assert isinstance(error, str) and error.strip(), response.text
    assert len(error.splitlines()) == 1, f"a multi-line error: {error!r}"
    for words in ("Traceback", "Internal Server Error", "internal error", 'File "'):
        assert words not in error, error
    if response.status_code == 413:
        assert str(LIMIT) in error, error
    if call.words:
        assert any(word in error for word in call.words), f"{error!r} names none of {call.words}"


def _check_sentences(source: str, translation: dict, request: dict) -> None:
    """Document mode: each sentence's record holds its source, found in the text in order, and its own text."""
    at = 0
    for sentence in translation["sentences"]:
        assert isinstance(sentence["text"], str) and isinstance(sentence["source"], str), sentence
        if request.get("format", "text") == "text":
            found = source.find(sentence["source"], at)
            assert found >= 0, f"{sentence['source']!r} is not in {source!r} after character {at}"
            at = found + len(sentence["source"])
        if request.get("attention"):
            assert "attention" in sentence, sentence.keys()


def _check_translations(request: dict, payload: Any) -> None:
    """A 200's body: one translation per text, in order, each a str, with the documented keys of its mode."""
    assert set(payload) == {"translations", "elapsed_ms"}, payload.keys()
    translations, texts = payload["translations"], request["text"]
    assert isinstance(translations, list) and len(translations) == len(texts), (len(translations), len(texts))
    markup, split = request.get("format", "text") != "text", request.get("split_sentences", True)
    keys = {"text", "format", "confidence", "truncated", "sentences"} if markup else {"text", "score", "log_prob"}
    keys |= set() if markup else {"confidence", "truncated", "n_best"} | ({"sentences"} if split else set())
    for source, translation in zip(texts, translations, strict=True):
        assert isinstance(translation, dict) and keys <= set(translation), (keys, translation)
        assert isinstance(translation["text"], str), translation
        if markup:
            assert translation["format"] == request["format"], translation
        else:
            assert len(translation["n_best"]) <= request.get("n_best", 1), translation["n_best"]
        if split:
            _check_sentences(source, translation, request)
        else:
            wanted = request.get("attention", False) and bool(translation["n_best"])  # an empty text has none
            assert "sentences" not in translation and ("attention" in translation) == wanted, translation.keys()


def _check_as_the_python_api(request: dict, payload: Any, client: Any) -> None:
    """A 200's texts are the Python API's: the same sentences (serve/routes.py's reading of the body) translated by
    `Translator.translate_with_details` in one call, bypassing the batcher and its continuous batch, and put back
    together in the request's format."""
    from vaswani.serve.routes import RequestError, TranslateRequest, decode_request, sentences_of

    state = client.app.state
    try:
        body = TranslateRequest(**request)
        decode, split = decode_request(body, state), sentences_of(body, state)
    except (RequestError, ValueError):  # the route's 200 says the body is valid: a disagreement here is a defect
        raise AssertionError(f"the API answered 200 where its own reading refuses {request!r}") from None
    translator = state.translator
    if body.source_language == "auto" or not split.sentences:
        return
    languages = translator.languages.per_sentence(body.target_language, len(split.sentences))
    # on this thread (the compute thread is the batcher's until the app stops), with as many torch threads (one)
    results = translator.translate_with_details(split.sentences, split.request(decode), target_language=languages)
    expected = [t.text for t in split.assemble(results, translator.languages.target_iso(body.target_language))]
    assert [t["text"] for t in payload["translations"]] == expected, (request, payload["translations"], expected)


def _check_page(call: Call, response: Any) -> None:
    """A 200 from another route: its documented content."""
    path = urllib.parse.unquote(call.path)
    if path == "/health":
        assert response.json()["status"] == "ok", response.text
    elif path == "/v1/model":
        assert {"name", "limits", "decode"} <= set(response.json()), response.text
    elif path == "/metrics":
        assert "vaswani_requests_total" in response.text, response.text[:300]
    else:
        assert response.content, path


def check(call: Call, client: Any) -> str:
    """The call's status as its outcome; AssertionError where the promise broke (a 5xx, a 200 of the wrong shape,
    an error of several lines or naming nothing, a 200 where a refusal was due, or the reverse)."""
    with quiet():
        response = _send(client, call)
    status, what = response.status_code, f"{call.method} {call.path} {(call.content or b'')[:200]!r}"
    assert status < 500, f"{status} for {what}: {response.text[:500]}"
    assert call.expect != "ok" or status == 200, f"{status} for {what}: {response.text[:500]}"
    assert call.expect != "refused" or 400 <= status < 500, f"{status} for {what}: {response.text[:500]}"
    if call.method == "HEAD":  # no body to check
        return str(status)
    if status >= 400:
        _check_error(call, response)
    elif call.path == "/v1/translate" and call.method == "POST":
        assert status == 200 and call.request is not None, (status, what)
        _check_translations(call.request, response.json())
        _check_as_the_python_api(call.request, response.json(), client)
    else:
        _check_page(call, response)
    return str(status)


@contextlib.contextmanager
def context() -> Iterator[Any]:
    """The app on a tiny model (a real BPE tokenizer, untrained weights: nonsense translations of at most 8
    tokens, fast), with the server's default limits, behind FastAPI's TestClient (a 500 is a status, not an
    exception). It decodes on a compute thread of its own, as `vaswani serve` does, with one torch thread: on
    shared cores a tiny model's OpenMP threads wait on each other far longer than they compute."""
    import torch
    from fastapi.testclient import TestClient

    from tests.helpers.common import write_tiny_model_directory
    from vaswani.serve.app import Settings, create_app
    from vaswani.serve.compute import ComputeThread
    from vaswani.translate.translator import Translator

    compute = ComputeThread("fuzz-http-compute")
    compute.call(torch.set_num_threads, 1)  # this thread's OpenMP setting only
    try:
        with tempfile.TemporaryDirectory(prefix="vaswani-fuzz-http-") as tmp, quiet():
            directory = write_tiny_model_directory(Path(tmp), max_len_a=0.0, max_len_b=8)
            translator = compute.call(Translator.load, directory, "cpu", "fp32")
            app = create_app(translator, directory, Settings(), compute=compute)
            assert app.state.settings.max_body == LIMIT
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # the Python API's calls in the check, as the compute thread runs
            try:
                with TestClient(app, raise_server_exceptions=False) as client:
                    yield client
            finally:
                torch.set_num_threads(threads)
    finally:
        compute.close()


SURFACE = Surface("http_api", inputs, check, context)
