"""What every section shares: the error, building a section from a mapping (unknown keys named, values
checked against the field types), durations, and the fields a section writes."""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from typing import Any


class ConfigError(ValueError):
    """A configuration value or key that cannot be used; the message says which and how to fix it."""


def closest(name: Any, choices: list[str]) -> str:
    """' (did you mean ...?)' naming the closest of `choices`, or nothing (a key that is not a string, YAML's
    `1:` or `null:`, is compared as it is written)."""
    match = difflib.get_close_matches(str(name), choices, n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


def shown(key: Any) -> str:
    """A key as a one-line message shows it: as written when printable, escaped otherwise (a newline in a quoted
    YAML key would split the message)."""
    text = str(key)
    return text if text.isprintable() else repr(text)[1:-1]


def check_keys(section: str, values: Any, known: list[str]) -> None:
    """A ConfigError unless `values` is a mapping whose keys are all in `known`; the message names the key and
    suggests the closest known one."""
    if not isinstance(values, dict):
        raise ConfigError(f"section '{section}' must be a mapping of keys to values, got {type(values).__name__}")
    for key in values:
        if key not in known:
            raise ConfigError(f"unknown key '{section}.{shown(key)}'{closest(key, known)}")


def build(section: str, cls: type, values: Any) -> Any:
    """The section `cls` from a mapping; an unknown key is an error naming the closest valid key."""
    check_keys(section, values, [f.name for f in dataclasses.fields(cls)])
    return cls(**coerce(section, cls, values))


def coerce(section: str, cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """Check each value against the field's type; numbers written as strings (YAML reads 1e-3 as a
    string) become floats."""
    hints = typing.get_type_hints(cls)
    out = {}
    for key, value in values.items():
        hint = hints[key]
        optional = isinstance(hint, types.UnionType) and type(None) in hint.__args__
        base = next((a for a in hint.__args__ if a is not type(None)), hint) if optional else hint
        if (value is None and optional) or (optional and len(hint.__args__) > 2):
            pass  # None where allowed; a union of types is checked by its section (data.text)
        elif base is float:
            value = number(value, f"{section}.{key}")
        elif base is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{section}.{key} must be an integer, got {value!r}")
        elif base is bool and not isinstance(value, bool):
            raise ConfigError(f"{section}.{key} must be true or false, got {value!r}")
        elif cls.__dataclass_fields__[key].metadata.get("duration"):
            parse_duration(value, f"{section}.{key}")
        elif base is list:
            pass  # checked by the section itself (data.corpora)
        elif base is str and not isinstance(value, str):
            raise ConfigError(f"{section}.{key} must be a string, got {value!r}")
        out[key] = value
    return out


def number(value: Any, name: str) -> float:
    """A finite float from a number or a string holding one (YAML reads 1e-3 as a string); a bool, a list, NaN or
    infinity is a ConfigError naming the key (NaN passes every range check, and poisons a run)."""
    try:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError
        result = float(value)
    except (ValueError, OverflowError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(result):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    return result


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def parse_duration(value: Any, name: str = "duration") -> float:
    """Seconds in "90s", "10m", "1h30m", "2h", "1.5h", or a plain number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value) if abs(value) < 1e300 else math.inf  # an int past a float's range: no OverflowError
    else:
        match = _DURATION.fullmatch(str(value).strip().replace(" ", "")) if isinstance(value, str) else None
        if not match or not any(match.groups()):
            raise ConfigError(f"{name} must be a duration such as 90s, 10m or 1h30m, got {value!r}")
        hours, minutes, secs = (float(g) if g else 0.0 for g in match.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    if not 0 < seconds < math.inf:  # NaN and infinity too: leave the key out for no budget
        raise ConfigError(f"{name} must be positive and finite, got {value!r}")
    return seconds


def every_field(cls: type) -> frozenset[str]:
    """All the field names of a section: what `unused` gives for a section nothing reads."""
    return frozenset(f.name for f in dataclasses.fields(cls))


def written(section: Any, unused: frozenset[str]) -> dict[str, Any]:
    """The section's fields as config.yaml writes them: those in `unused` left out, and those holding None
    (every optional field's default: "not set") too; loading fills both back in with their defaults."""
    values = dataclasses.asdict(section)
    return {name: value for name, value in values.items() if name not in unused and value is not None}


def reset(section: Any, names: frozenset[str]) -> Any:
    """The section with the fields `names` at their defaults."""
    defaults = {
        f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(section)
        if f.name in names
    }
    changed = {name: value for name, value in defaults.items() if getattr(section, name) != value}
    return dataclasses.replace(section, **changed) if changed else section
