"""The multilingual_api surface: `vaswani serve` on imported many-to-many checkpoints (NLLB-200, mBART-50 and
M2M-100 fixtures laid out as the hub lays them out: save_pretrained beside the tokenizer's files, NLLB's 202 codes
in its current and its legacy source layout, mBART-50's 52, M2M-100's 100), called by several clients at once:
texts of any Unicode, in any language, writing language codes and special tokens as text ("eng_Latn", "__en__",
"</s>", "<pad>"), markup, glossaries, beams and n-best; each request naming its source and its target language by
one of the model's codes, a near miss of one (another case, spaces or underscores around it, its ISO 639 language:
deu_latn, " deu_Latn", de, DEU), other text, or nothing.

The promise (issues 60 and 61): a request whose two languages are the model's codes (or its defaults) is a 200
with one translation per text in the documented shape, equal to the same request's answer sent alone (requests for
other pairs decode in one batch: nothing of one leaks into another); any other is a 422 whose one-line error names
the field, and for a near miss the code it may mean; never a 5xx. Outcomes: "200", "422", "200 and 422" (a round's
requests answered both ways)."""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.fuzz import Surface, quiet, text
from tests.fuzz.http_api import GERMAN, MARKUP, _check_error, _check_translations

KINDS = ("nllb", "nllb_legacy", "mbart50", "m2m100")  # nllb_legacy: NLLB's sources as `text </s> code`
# what texts copied from logs, markup and other models' inputs write: codes and special tokens as text
WRITTEN = ["eng_Latn", "deu_Latn", "zho_Hans", "en_XX", "de_DE", "__en__", "__de__", ">>fra<<", "en", "</s>", "<s>"]
WRITTEN += ["<pad>", "<unk>", "<mask>", "madeupword0", "▁", "\u200b", "\ufeff", "ß", "İ", "ﬁ", "🇩🇪", "שלום", "日本語"]
# a near miss of a code, as users mistype them: (name, how the code is written)
NEAR = {
    "lower": str.lower,
    "upper": str.upper,
    "spaced": lambda code: f" {code} ",
    "underscored": lambda code: f"__{code}__",
    "language": lambda code: code.strip("_").split("_")[0],  # deu of deu_Latn, de of de_DE
}
GLOSSARIES = [None, [["Hund", "Zebrastreifen"]], [["Mann", "Quittung"], ["Frau", "Bank"]], [["日本", "Japan"]]]


@dataclass(frozen=True)
class Language:
    """How a request names a language: `how` is "pair" (the fixture's trained de, en or fr), "code" (any of the
    model's codes, by index), a NEAR key (a near miss of the code at index), "other" (`value` as it is) or "none"."""

    how: str
    value: Any = None


@dataclass(frozen=True)
class Ask:
    texts: tuple[str, ...]
    source: Language
    target: Language
    options: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Round:
    """Requests sent at once to one model."""

    kind: str
    asks: tuple[Ask, ...]


def _language() -> st.SearchStrategy[Language]:
    index = st.integers(0, 10**6)
    return st.one_of(
        st.builds(Language, st.just("pair"), st.sampled_from(["de", "en", "fr"])),
        st.builds(Language, st.just("code"), index),
        st.builds(Language, st.sampled_from(sorted(NEAR)), index),
        st.builds(Language, st.just("other"), st.one_of(text(max_size=12), st.sampled_from(WRITTEN))),
        st.just(Language("none")),
    )


def _texts() -> st.SearchStrategy[tuple[str, ...]]:
    """Texts with any Unicode, sentences, markup and codes written as text (NUL, which is refused, made a space)."""
    pieces = st.one_of(text(max_size=16), st.sampled_from(GERMAN + MARKUP + WRITTEN))
    one = st.lists(pieces, max_size=10).map(lambda parts: " ".join(parts).replace("\x00", " "))
    return st.lists(st.one_of(one, st.sampled_from(GERMAN)), min_size=1, max_size=4).map(tuple)


@st.composite
def _options(draw: st.DrawFn) -> tuple[tuple[str, Any], ...]:
    """Valid options: markup (split into sentences), beams with n-best within them, a glossary, a ban."""
    beam = draw(st.integers(1, 3))
    options = {
        "format": draw(st.sampled_from(["text", "text", "html", "markdown"])),
        "beam": beam,
        "n_best": draw(st.integers(1, beam)),
        "glossary": draw(st.sampled_from(GLOSSARIES)),
        "no_repeat_ngram": draw(st.integers(0, 3)),
    }
    options["split_sentences"] = options["format"] != "text" or draw(st.booleans())
    return tuple(sorted((k, v) for k, v in options.items() if v is not None))


@st.composite
def _round(draw: st.DrawFn) -> Round:
    """1-4 requests to one model, sharing their options more often than not (so that they batch together)."""
    shared, n = draw(_options()), draw(st.integers(1, 4))
    asks = []
    for _ in range(n):
        options = shared if draw(st.booleans()) or n == 1 else draw(_options())
        asks.append(Ask(draw(_texts()), draw(_language()), draw(_language()), options))
    return Round(draw(st.sampled_from(KINDS)), tuple(asks))


def inputs() -> st.SearchStrategy[Round]:
    return _round()


@dataclass
class Model:
    """One imported model behind the app: its client, codes (sorted), trained codes and defaults."""

    client: Any
    codes: list[str]
    pair: dict[str, str]
    defaults: dict[str, str | None]


def _named(language: Language, model: Model) -> tuple[str | None, str | None]:
    """What the request sends for `language`, and the code it means (None: none given, or not a code)."""
    if language.how == "none":
        return None, None
    if language.how == "pair":
        return model.pair[language.value], model.pair[language.value]
    if language.how == "other":
        return language.value, None
    code = model.codes[language.value % len(model.codes)]
    return (code, code) if language.how == "code" else (NEAR[language.how](code), code)


def _expect(ask: Ask, model: Model) -> tuple[dict, list[tuple[str, str | None]]]:
    """The request's body and, per role refused (the target's first: it is checked first), the role and the code a
    near miss means (or None)."""
    body: dict[str, Any] = {"text": list(ask.texts), **dict(ask.options)}
    faults = []
    for role, language in (("target", ask.target), ("source", ask.source)):
        sent, meant = _named(language, model)
        if sent is not None:
            body[f"{role}_language"] = sent
        if (sent or model.defaults[role]) not in model.codes:
            faults.append((role, meant if language.how in NEAR else None))
    return body, faults


def _same(batched: Any, alone: Any) -> bool:
    """Two answers equal: every text, record and count exactly; scores within the float32 rounding a batch of
    other shapes gives (a sentence's score is written to 4 decimals: 1e-4 from its neighbour's rounding)."""
    if isinstance(batched, float) and isinstance(alone, float):
        return math.isclose(batched, alone, rel_tol=1e-5, abs_tol=2e-4)
    if isinstance(batched, dict) and isinstance(alone, dict):
        return batched.keys() == alone.keys() and all(_same(batched[k], alone[k]) for k in batched)
    if isinstance(batched, list) and isinstance(alone, list):
        return len(batched) == len(alone) and all(map(_same, batched, alone))
    return type(batched) is type(alone) and batched == alone


def check(round_: Round, models: dict[str, Model]) -> str:
    """The round's requests sent at once, then each one answered 200 sent again alone; AssertionError where a
    promise broke."""
    model = models[round_.kind]
    bodies = [_expect(ask, model) for ask in round_.asks]
    with quiet(), ThreadPoolExecutor(len(bodies)) as pool:
        responses = list(pool.map(lambda b: model.client.post("/v1/translate", json=b[0]), bodies))
    statuses = set()
    for (body, faults), response in zip(bodies, responses, strict=True):
        what = f"{response.status_code} for {json.dumps(body, ensure_ascii=False)[:400]}: {response.text[:400]}"
        assert response.status_code < 500, what
        statuses.add(response.status_code)
        if not faults:
            assert response.status_code == 200, what
            _check_translations(body, response.json())
            with quiet():
                alone = model.client.post("/v1/translate", json=body)
            batched, by_itself = response.json()["translations"], alone.json()["translations"]
            assert alone.status_code == 200 and _same(batched, by_itself), f"batched != alone: {what}: {alone.text}"
            continue
        assert response.status_code == 422, what
        _check_error(_Named(("target_language", "source_language")), response)
        _check_fault(response.json()["error"], *faults[0], what)
    return " and ".join(str(s) for s in sorted(statuses))


def _check_fault(error: str, role: str, meant: str | None, what: str) -> None:
    """The error, past the fields it names, says which language is wrong (the option's name in the CLI and the
    field's in the API), and for a near miss offers the code it means."""
    said = error.split(": ", 1)[-1]
    assert f"{role} language" in said or f"--{role}-language" in said, f"{role} not named: {what}"
    if meant is not None:
        offered = said.split("did you mean ", 1)[-1].split("?")[0] if "did you mean " in said else ""
        assert meant in offered.split(), f"{meant} not offered: {what}"


@dataclass(frozen=True)
class _Named:
    """What _check_error reads of a call: the words one of which its error names."""

    words: tuple[str, ...]


@contextlib.contextmanager
def context() -> Iterator[dict[str, Model]]:
    """Each family's fixture (untrained: nonsense of at most 12 tokens, fast) imported by `vaswani import` and
    served by an app of its own with the server's defaults, as http_api serves its model."""
    with (
        tempfile.TemporaryDirectory(prefix="vaswani-fuzz-multilingual-") as tmp,
        quiet(),
        contextlib.ExitStack() as stack,
    ):
        yield {kind: _served(kind, Path(tmp), stack) for kind in KINDS}


def _served(kind: str, tmp: Path, stack: contextlib.ExitStack) -> Model:
    """The `kind` fixture imported and behind its app, which decodes on a compute thread of its own (its batcher
    holds it) with one torch thread; both stopped when `stack` closes."""
    import torch
    import yaml
    from fastapi.testclient import TestClient

    from tests.helpers.multilingual_models import CODES, save_multilingual
    from vaswani.pretrained import import_pretrained
    from vaswani.serve.app import Settings, create_app
    from vaswani.serve.compute import ComputeThread
    from vaswani.translate.translator import Translator

    family = kind.removesuffix("_legacy")
    src = save_multilingual(tmp / kind, family, steps=0)
    if kind.endswith("_legacy"):  # tokenizer_config.json as NllbTokenizer wrote sources until 2023
        settings = json.loads((src / "tokenizer_config.json").read_text("utf-8"))
        (src / "tokenizer_config.json").write_text(json.dumps({**settings, "legacy_behaviour": True}), "utf-8")
    directory = import_pretrained(src, tmp / f"{kind}.vaswani")
    config = yaml.safe_load((directory / "config.yaml").read_text("utf-8"))
    config["decode"]["max_len_b"] = 12
    (directory / "config.yaml").write_text(yaml.safe_dump(config), "utf-8")
    compute = ComputeThread(f"fuzz-{kind}-compute")
    stack.callback(compute.close)
    compute.call(torch.set_num_threads, 1)  # this thread's OpenMP setting only
    translator = compute.call(Translator.load, directory, "cpu", "fp32")
    app = create_app(translator, directory, Settings(), compute=compute)
    client = stack.enter_context(TestClient(app, raise_server_exceptions=False))
    info, languages = client.get("/v1/model").json(), translator.tokenizer.languages
    assert info["source_languages"] == info["target_languages"] == sorted(languages.codes), info
    defaults = {"source": languages.default_source, "target": languages.default_target}
    assert languages.source == ("suffix" if kind.endswith("_legacy") else "prefix"), languages.source
    return Model(client, sorted(languages.codes), CODES[family], defaults)


SURFACE = Surface("multilingual_api", inputs, check, context)
