"""How a setting is declared and read, knowing no particular setting.

`env(name, default, doc, parser)` puts a `Spec` on the dataclass field it fills: the one place that field's
default lives. A default that depends on other settings (a provider's model, a key's fallback) is the Spec's
`unset` rule, and a section built in code (`RankingSettings()`) gets what an empty environment gives, so the
code never repeats a default. `Declarations(root)` collects the Specs below a tree of dataclasses, reads an
environment into every field's value, reporting every mistake at once, and builds the tree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from copy import copy
from dataclasses import dataclass, field, fields, is_dataclass
from functools import partial
from typing import Any, get_type_hints
from urllib.parse import urlparse


class SettingsError(ValueError):
    """One or more settings are invalid; `str()` lists every problem, one per line."""


def rule(convert: Callable[[str], Any], ok: Callable[[Any], Any], message: str) -> Callable[[str], Any]:
    """A parser: `convert` the text (a ValueError it raises is reported too), then refuse it unless `ok`."""
    def parse(value: str) -> Any:
        converted = convert(value)
        if not ok(converted):
            raise ValueError(message)
        return converted
    return parse


def choice(*allowed: str) -> Callable[[str], str]:
    return rule(lambda v: v.strip().lower(), lambda v: v in allowed, f"must be one of: {', '.join(allowed)}")


positive_int = rule(int, lambda n: 1 <= n <= 2**62, "must be a positive integer")
port = rule(int, lambda n: 1 <= n <= 65535, "must be a TCP port between 1 and 65535")
positive_float = rule(float, lambda n: n > 0, "must be a positive number")
non_negative_float = rule(float, lambda n: n >= 0, "must be zero or a positive number")
score = rule(float, lambda n: -1 <= n <= 1, "must be a cosine similarity between -1 and 1")
fraction = rule(float, lambda n: 0 <= n <= 1, "must be a number between 0 and 1")
url = rule(lambda v: v.rstrip("/"), lambda v: (u := urlparse(v)).scheme in ("http", "https") and u.netloc,
           "must be an http(s) URL such as https://api.mistral.ai/v1")
postgres_url = rule(str, lambda v: v.startswith(("postgres://", "postgresql://")) or "=" in v,
                    "must be a postgresql:// URL or a libpq key=value string")
header_name = rule(lambda v: v.strip().lower(), lambda v: v and all(c.isalnum() or c in "-_" for c in v),
                   "must be an HTTP header name (letters, digits, '-' and '_')")
key_list = rule(lambda v: tuple(k.strip() for k in v.split(",") if k.strip()),
                lambda ks: all(len(k) >= 16 for k in ks), "every key must be at least 16 characters long")
_BOOLS = dict.fromkeys(("1", "true", "yes", "on"), True) | dict.fromkeys(("0", "false", "no", "off"), False)
boolean = rule(lambda v: _BOOLS.get(v.strip().lower()), lambda b: b is not None, "must be true or false")
jwt_secret = rule(str, lambda v: len(v.encode()) >= 32,
                  "must be at least 32 bytes: a shorter HS256 secret can be guessed by brute force")
text = str.strip

Values = Mapping[str, Any]  # every field's value by "section.field" ("ranking.rrf_k": a nested section by name)


@dataclass(frozen=True, eq=False)  # a declaration: equal only to itself
class Spec:
    """One environment variable: its default ('' = unset), meaning, parser, the variable it falls back to,
    and `unset`: the value when none of these gives one, from the values of the fields declared before."""

    name: str
    default: str
    doc: str
    parse: Callable[[str], Any] = text
    fallback: Spec | None = None
    unset: Callable[[Values], Any] | None = None


# What an empty environment gives every Spec of the declared tree: the defaults of sections built in code.
_DECLARED: list[Declarations] = []


def _in_code_default(spec: Spec) -> Any:
    return copy(_DECLARED[0].empty_environment()[spec])


def env(spec: str | Spec, default: str = "", doc: str = "", parse: Callable[[str], Any] = text, /, *,
        fallback: Spec | None = None, unset: Callable[[Values], Any] | None = None, in_code: bool = False,
        **field_options: Any) -> Any:
    """A dataclass field filled from an environment variable, its `Spec` in the field's metadata. `in_code`:
    a section built in code gets the value an empty environment gives; `repr=False` (to `dataclasses.field`)
    keeps a secret out of every log line."""
    spec = spec if isinstance(spec, Spec) else Spec(spec, default, doc, parse, fallback, unset)
    if in_code:
        field_options["default_factory"] = partial(_in_code_default, spec)
    return field(metadata={"env": spec}, **field_options)


def declarations(root: type) -> tuple[dict[str, Spec], tuple[Spec, ...]]:
    """The `Spec` of every field below `root` by "section.field" and every variable once, in field order.
    `TypeError`: a field without a variable, or a variable declared twice."""
    by_field: dict[str, Spec] = {}

    def collect(cls: type, section: str) -> None:
        hints = get_type_hints(cls)
        for f in fields(cls):
            if is_dataclass(hints[f.name]):
                collect(hints[f.name], f.name)
            elif "env" not in f.metadata:
                raise TypeError(f"{cls.__name__}.{f.name}: no environment variable fills it (use env())")
            else:
                by_field[f"{section}.{f.name}"] = f.metadata["env"]

    collect(root, "")
    specs = tuple(dict.fromkeys(s for spec in by_field.values() for s in (spec, spec.fallback) if s))
    names = [spec.name for spec in specs]
    if twice := sorted({name for name in names if names.count(name) > 1}):
        raise TypeError(f"environment variables declared more than once: {', '.join(twice)}")
    return by_field, specs


class Declarations:
    """The settings tree below `root`: its Specs, reading an environment, building the tree. The one
    declared with `in_code=True` fields gives those fields their defaults (`declare`)."""

    def __init__(self, root: type) -> None:
        self.root = root
        self.fields, self.specs = declarations(root)
        self._empty: dict[Spec, Any] | None = None

    def declare(self) -> Declarations:
        """Make this tree the one whose empty environment gives the defaults of sections built in code."""
        _DECLARED[:] = [self]
        return self

    def parse(self, environ: Mapping[str, str]) -> tuple[dict[Spec, Any], list[str]]:
        """Every variable parsed (None: unset, no default) and the problems found, one per variable."""
        parsed: dict[Spec, Any] = {}
        problems: list[str] = []
        for spec in self.specs:
            raw = environ.get(spec.name, "").strip() or spec.default
            try:
                parsed[spec] = spec.parse(raw) if raw else None
            except ValueError as exc:
                detail = str(exc) if str(exc) and not str(exc).startswith(("invalid literal", "could not")) else (
                    "is not a number")
                hidden = spec.name.endswith(("_KEY", "_KEYS", "_SECRET"))  # a secret never reaches the message
                problems.append(f"{spec.name}={'(hidden)' if hidden else repr(raw)}: {detail}")
        return parsed, problems

    def values(self, parsed: Mapping[Spec, Any]) -> dict[str, Any]:
        """Every field's value by "section.field": its variable's, else its fallback's, else its `unset`
        rule's (from the fields before it), else None."""
        values: dict[str, Any] = {}
        for path, spec in self.fields.items():
            value = parsed[spec]
            if value is None and spec.fallback:
                value = parsed[spec.fallback]
            if value is None and spec.unset:
                value = spec.unset(values)
            values[path] = value
        return values

    def empty_environment(self) -> dict[Spec, Any]:
        if self._empty is None:
            values = self.values(self.parse({})[0])
            self._empty = {spec: values[path] for path, spec in self.fields.items()}
        return self._empty

    def build(self, values: Values, cls: type | None = None, section: str = "") -> Any:
        """`cls` (the root) with each field from `values` and each nested section built alike."""
        cls = cls or self.root
        hints = get_type_hints(cls)
        return cls(**{f.name: self.build(values, hints[f.name], f.name) if is_dataclass(hints[f.name])
                      else values[f"{section}.{f.name}"] for f in fields(cls)})

    def markdown_table(self) -> str:
        rows = [f"| `{s.name}` | {f'`{s.default}`' if s.default else '—'} | {s.doc} |" for s in self.specs]
        return "\n".join(["| variable | default | meaning |", "|---|---|---|", *rows])
