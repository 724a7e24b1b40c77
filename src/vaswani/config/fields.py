"""What every section shares: the error, building a section from a mapping (unknown keys named, values
checked against the field types), durations, and the fields a section writes."""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from typing import Any


class ConfigError(ValueError):
    """A configuration value or key that cannot be used; the message says which and how to fix it."""


def closest(name: str, choices: list[str]) -> str:
    """' (did you mean ...?)' naming the closest of `choices`, or nothing."""
    match = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


def build(section: str, cls: type, values: Any) -> Any:
    """The section `cls` from a mapping; an unknown key is an error naming the closest valid key."""
    if not isinstance(values, dict):
        raise ConfigError(f"section '{section}' must be a mapping of keys to values")
    known = [f.name for f in dataclasses.fields(cls)]
    for key in values:
        if key not in known:
            raise ConfigError(f"unknown key '{section}.{key}'{closest(key, known)}")
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
        elif base is float and not isinstance(value, bool) and isinstance(value, int | float | str):
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{section}.{key} must be a number, got {value!r}") from None
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


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def parse_duration(value: Any, name: str = "duration") -> float:
    """Seconds in "90s", "10m", "1h30m", "2h", "1.5h", or a plain number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.fullmatch(str(value).strip().replace(" ", "")) if isinstance(value, str) else None
        if not match or not any(match.groups()):
            raise ConfigError(f"{name} must be a duration such as 90s, 10m or 1h30m, got {value!r}")
        hours, minutes, secs = (float(g) if g else 0.0 for g in match.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    if seconds <= 0:
        raise ConfigError(f"{name} must be positive, got {value!r}")
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
