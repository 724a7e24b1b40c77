"""The config_yaml surface: the YAML recipes of `vaswani train` / `prepare` and their `--set section.key=value`
overrides, as users write them: the project's own recipes (configs/*.yaml) mutated with values of the wrong type
(strings, lists, nulls, mappings, bools, huge or negative numbers, NaN, infinity), unknown and misspelt keys at
every level, sections and documents that are not mappings, duplicate keys, broken YAML, invalid UTF-8, any Unicode.

The promise (issue 60): `Config.load` gives a Config whose every field holds a value of its type that saves and
loads back equal, or raises a one-line ConfigError naming the file, the section, the key or the override (a
misspelt key answered with the near one, a duplicate key named); never a traceback, never a hang."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import re
import signal
import tempfile
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from tests.fuzz import Surface, quiet, text

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SECTIONS = ("model", "data", "train", "decode", "finetune")
SECONDS = 10  # a case that takes longer has hung
SNIPPETS = [  # YAML's other features: tags, anchors, merges, sets, dates, several documents, deep nesting
    "train:\n  max_steps: !!float 5\n",
    "decode: &d {beam_size: 2}\nfinetune: *d\n",
    "train:\n  <<: {max_steps: 5}\n  max_steps: 6\n",
    "train: {<<: [{max_steps: 5}, {warmup_steps: 3}]}\n",
    "model:\n  d_model: 2001-12-14\n",
    "data:\n  text: !!binary aGVsbG8=\n",
    "? [a, b]\n: 1\n",
    "train: !!set {a, b}\n",
    "!!python/object/apply:os.system [ls]\n",
    "--- {}\n--- {}\n",
    "train: !!omap [{max_steps: 1}]\n",
    "train: !unknown_tag 1\n",
    "%YAML 1.1\n---\ntrain: {}\n",
    "[" * 2000,
    "a:\n" + "".join("  " * i + "b:\n" for i in range(1, 400)),
    "\ufefftrain:\n  max_steps: 5\n",
    "train:\r\n  max_steps: 5\r\n",
    "train:\n\tmax_steps: 5\n",
]
BROKEN_OVERRIDES = ["[1", "{a: 1}", "1e-3", "", "null", "- a", "{a: 1, a: 2}", ": :", "'", "&a [*a]", "\t", "%"]


@dataclasses.dataclass(frozen=True)
class Case:
    """One recipe file's bytes, the --set overrides, and what a refusal must say where the case calls for one."""

    content: bytes
    overrides: tuple[str, ...] = ()
    must_say: str | None = None  # "did you mean" for a lone misspelt key; the key for a duplicated one
    field: str | None = None  # a lone value replaced: a refusal must name its field (section.key), nothing else


@functools.cache
def _recipes() -> tuple[dict, ...]:
    """The project's recipes for `vaswani train`, read once (a YAML parse is slow next to a case); a distillation
    recipe's own `distill` section is left out (`vaswani distill` reads it, then loads the rest as these are)."""
    recipes = (yaml.safe_load(path.read_text(encoding="utf-8")) for path in sorted(CONFIGS.glob("*.yaml")))
    return tuple({name: values for name, values in recipe.items() if name != "distill"} for recipe in recipes)


def _bases() -> list[dict]:
    """The project's recipes: valid starting points, each a mapping of sections (fresh copies to mutate)."""
    return copy.deepcopy(list(_recipes()))


def _wild() -> st.SearchStrategy[Any]:
    """A value of any type, where a field expects one type: what a slip of the keyboard or a wrong copy gives."""
    words = ["1e-3", "nan", "inf", "-1", "0", "10m", "1h30m", "bpe", "auto", "true", "base", "", "yes", "0x10"]
    return st.one_of(
        text(max_size=12),
        st.sampled_from(words),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.integers(min_value=-3, max_value=5),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.none(),
        st.lists(st.one_of(st.integers(-3, 3), text(max_size=5)), max_size=3),
        st.dictionaries(text(max_size=5), st.integers(-3, 3), max_size=2),
    )


@st.composite
def _typo(draw: st.DrawFn, key: str) -> str:
    """`key` with one slip: a character dropped, doubled or changed, or its first letter capitalised."""
    if len(key) < 4:
        return key.upper()
    i = draw(st.integers(0, len(key) - 1))
    slip = draw(st.sampled_from(["drop", "double", "change", "case"]))
    if slip == "drop":
        return key[:i] + key[i + 1 :]
    if slip == "double":
        return key[:i] + key[i] + key[i:]
    if slip == "change":
        return key[:i] + draw(st.sampled_from("aeiouxz_")) + key[i + 1 :]
    return key[:1].upper() + key[1:]


def _known(section: str) -> list[str]:
    """The keys a section takes (the model section's preset too)."""
    from vaswani.config.recipe import SECTIONS as CLASSES

    return [f.name for f in dataclasses.fields(CLASSES[section])] + (["preset"] if section == "model" else [])


@st.composite
def _mutation(draw: st.DrawFn, doc: Any) -> tuple[Any, str | None]:
    """`doc` with one mutation, and the misspelt key (section.key) when the mutation was a typo."""
    kinds = ["value", "value", "benign", "benign", "typo", "typo_section", "unknown", "section", "corpora", "top"]
    kind = draw(st.sampled_from(kinds))
    section = draw(st.sampled_from(SECTIONS))
    if kind == "benign" and isinstance(doc, dict):
        return _benign(doc, section, draw(st.integers(0, 100))), None
    if kind == "typo_section" and isinstance(doc, dict):
        typo = draw(_typo(section))
        doc[typo] = doc.pop(section, None)
        return doc, None if typo in SECTIONS else typo
    values = doc.setdefault(section, {}) if isinstance(doc, dict) else None
    if kind == "top" or values is None:
        return draw(_wild()), None
    if kind == "section":
        doc[section] = draw(_wild())
    elif not isinstance(values, dict):
        return doc, None
    elif kind == "value":
        key = draw(st.sampled_from(_known(section)))
        values[key] = draw(_wild())
        return doc, f"={section}.{key}"  # a value replaced: a refusal must name its field
    elif kind == "typo":
        key = draw(_typo(draw(st.sampled_from(_known(section)))))
        values[key] = draw(_wild())
        return doc, None if key in _known(section) else key
    elif kind == "unknown":
        key = draw(st.one_of(text(max_size=10), st.integers(), st.booleans(), st.none(), st.floats()))
        (doc if draw(st.booleans()) else values)[key] = draw(_wild())
    else:
        entry = {"src": "a.de", "tgt": "a.en"}
        entry[draw(st.sampled_from(["src", "weight", "name", "wieght", "tgt"]))] = draw(_wild())
        if not isinstance(doc.get("data"), dict):
            doc["data"] = {}
        doc["data"]["corpora"] = draw(st.sampled_from([[entry], entry, [entry, entry]]))
    return doc, None


def _benign(doc: dict, section: str, index: int) -> dict:
    """`doc` changed in a way that keeps it valid: a number written as a string (YAML reads 1e-3 so), an integral
    float as an int, an empty section (its defaults) where there was none."""
    values = doc.get(section)
    if not isinstance(values, dict) or not values:
        doc.setdefault(section, None)
        return doc
    key = list(values)[index % len(values)]
    value = values[key]
    if isinstance(value, float):
        values[key] = int(value) if value.is_integer() and index % 2 else str(value)
    return doc


@st.composite
def _mutated(draw: st.DrawFn) -> tuple[Any, str | None]:
    """A recipe with one to three mutations, and where one is its only mutation, the misspelt key of a typo or
    ("=section.key") the field whose value it replaced."""
    doc = {name: dict(values or {}) for name, values in draw(st.sampled_from(_bases())).items()}
    count = draw(st.integers(0, 3))
    typo = None
    for _ in range(count):
        doc, typo = draw(_mutation(doc))
    return doc, typo if count == 1 else None


def _duplicated(rendered: str, index: int) -> tuple[str, str | None]:
    """The document with one of its mapping lines written twice in a row (a key given twice), and that key."""
    lines = rendered.splitlines()
    keys = [i for i, line in enumerate(lines) if re.match(r"^\s*[A-Za-z_]+:", line)]
    if not keys:
        return rendered, None
    i = keys[index % len(keys)]
    lines.insert(i + 1, lines[i])
    return "\n".join(lines) + "\n", lines[i].split(":")[0].strip()


@st.composite
def _override(draw: st.DrawFn) -> str:
    """One --set string: a known key with a value of any type, a misspelt key, or any text."""
    section = draw(st.sampled_from(SECTIONS))
    key = draw(st.one_of(st.sampled_from(_known(section)), _typo("max_steps")))
    value = draw(st.one_of(st.sampled_from(BROKEN_OVERRIDES), text(max_size=10), st.integers().map(str)))
    return draw(
        st.sampled_from([f"{section}.{key}={value}", f"{section}={value}", f"{key}={value}"]) | text(max_size=20)
    )


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """A recipe as users bring it: mutated, then perhaps garbled, given a duplicate key, or replaced outright."""
    doc, typo = draw(_mutated())
    rendered = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
    overrides = tuple(draw(st.lists(_override(), max_size=2)))
    kind = draw(st.sampled_from(["mutated"] * 5 + ["duplicate", "garbled", "unicode", "bytes", "snippet"]))
    if kind == "mutated" and typo and typo.startswith("=") and not overrides:
        return Case(rendered.encode(), overrides, field=typo[1:])
    if kind == "mutated":
        return Case(rendered.encode(), overrides, "did you mean" if typo and not overrides else None)
    if kind == "duplicate":
        base = yaml.safe_dump(draw(st.sampled_from(_bases())), allow_unicode=True, sort_keys=False)
        twice, key = _duplicated(base, draw(st.integers(0, 200)))
        return Case(twice.encode(), (), key)
    if kind == "unicode":
        return Case(draw(text(max_size=200)).encode(), overrides)
    if kind == "snippet":
        return Case((draw(st.sampled_from(["", rendered])) + draw(st.sampled_from(SNIPPETS))).encode(), overrides)
    at = draw(st.integers(0, len(rendered)))
    if kind == "garbled":
        return Case((rendered[:at] + draw(text(max_size=8)) + rendered[at:]).encode(), overrides)
    raw = rendered.encode()
    inserted = draw(
        st.sampled_from([b"\xff", b"\xc3", b"\xef\xbb\xbf", b"\x00", b"\xed\xa0\x80"]) | st.binary(max_size=4)
    )
    return Case(raw[:at] + inserted + raw[at:], overrides)


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """A case still running after `seconds` has hung: an AssertionError there, not a suite that never ends."""

    def expire(*_: Any) -> None:
        raise AssertionError(f"still running after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _fits(value: Any, hint: Any) -> bool:
    """Whether `value` is of the annotated type `hint` (no bool for an int, no NaN or infinity for a float)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if origin is typing.Literal:
        return any(type(value) is type(a) and value == a for a in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return type(value) is float and math.isfinite(value)
    if hint in (bool, int, str):
        return type(value) is hint
    return not isinstance(hint, type) or isinstance(value, hint)


def _well_typed(config: Any) -> None:
    """Every field of every section holds a value of its type (a duration: a string or number it parses)."""
    from vaswani.config import parse_duration

    for name in SECTIONS:
        section = getattr(config, name)
        hints = typing.get_type_hints(type(section))
        for field in dataclasses.fields(section):
            value = getattr(section, field.name)
            if field.metadata.get("duration") and value is not None:
                assert math.isfinite(parse_duration(value)), f"{name}.{field.name}={value!r} loaded"
            else:
                assert _fits(value, hints[field.name]), f"{name}.{field.name}={value!r} loaded as a {hints[field.name]}"


NAMED = re.compile(r"\b(model|data|train|decode|finetune)\b|override|section|config")


def _refused(error: Exception, path: Path, case: Case) -> str:
    """A one-line message naming the file, the section, the key or the override, and what the case needs said."""
    message = str(error)
    assert len(message.splitlines()) == 1 and message.strip(), f"not one line: {message!r}"
    assert str(path) in message or NAMED.search(message), f"names nothing: {message!r}"
    if case.must_say is not None:
        assert case.must_say in message, f"{message!r} does not say {case.must_say!r}"
    if case.field is not None:
        assert case.field in message, f"{message!r} does not name {case.field}, the one value changed"
    return "refused"


def check(case: Case, directory: Path) -> str:
    """Load the recipe as `vaswani train` does; a Config must be well typed and load back equal once saved."""
    from vaswani.config import Config, ConfigError

    path = directory / "recipe.yaml"
    path.write_bytes(case.content)
    with quiet(), deadline(SECONDS):
        try:
            config = Config.load(path, list(case.overrides))
        except ConfigError as error:
            return _refused(error, path, case)
        assert case.must_say is None, f"loaded, though a refusal saying {case.must_say!r} was due"
        _well_typed(config)
        config.save(directory / "saved.yaml")
        assert Config.load(directory / "saved.yaml") == config, "saved and loaded back, the config differs"
    return "loaded"


@contextlib.contextmanager
def workspace() -> Iterator[Path]:
    """A temporary folder the cases write their recipe into."""
    with tempfile.TemporaryDirectory(prefix="fuzz-config-") as directory:
        yield Path(directory)


SURFACE = Surface("config_yaml", cases, check, workspace)
