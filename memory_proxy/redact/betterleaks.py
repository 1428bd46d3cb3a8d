"""Credentials by a maintained rule set: Betterleaks' 325 rules (the gitleaks authors' successor), run by its own
engine (PyPI `pybetterleaks`, a Go library called in-process; nothing is verified over the network).

Why this one: on the rule sets' published test cases (benchmarks/secrets_corpus, `python -m benchmarks.secrets`)
it caught far more of the frozen test split than our own patterns and detect-secrets did (the figures:
docs/RELIABILITY.md#secrets), and it is kept up to date for new providers by people whose job that is.

`memory_proxy/redact/betterleaks.toml` is the rule set the installed engine ships (v1.6.1, MIT, `betterleaks.LICENSE`;
tests/redact/test_betterleaks.py checks it is byte for byte the one inside the library). Run whole, the engine compiles all
325 rules on every call, the main cost of a scan. So, as gitleaks does inside one scan, a rule runs only when
one of its keywords occurs in the text (lower-cased): a scan compiles the few rules a text can match (plus the
rules they require), and a text with no keyword costs no call. On every line of the corpus this gave the
same verdict as the whole rule set (tests/redact/test_betterleaks.py checks a sample of it; the figures:
docs/RELIABILITY.md#secrets).
"""

from __future__ import annotations

import re
import threading
import tomllib
from collections.abc import Iterator
from contextlib import suppress
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple, cast
from urllib.parse import urlsplit

from pybetterleaks import BetterleaksConfig, PyBetterleaksError, scan_text

RULES_FILE = Path(__file__).with_name("betterleaks.toml")
ScanFailed = PyBetterleaksError  # the engine could not scan a text (timeout, native error)
SCAN_TIMEOUT_S = 10.0  # a pathological text fails the scan (and the job) rather than stalling a thread
# The engine's cost per match grows with the lines (and the line length) of the text it was given, so one
# call on a long text with many matches is quadratic (seconds on a long file: docs/RELIABILITY.md#secrets).
# A text is scanned in windows of SCAN_WINDOW characters, each overlapping the next by SCAN_OVERLAP: a
# credential up to that long (a PEM block of a 4096-bit RSA key is ~3.3 KB) lies whole in one window, and
# the cost stays linear.
SCAN_WINDOW = 16384
SCAN_OVERLAP = 4096
_SLACK = 1024  # how far back a window's edge may move to fall on whitespace
_UP_TO_LAST_SPACE = re.compile(r".*\s", re.S)
# Engine calls at once in one process: each takes a core (Go, without the GIL), and a text holding no
# keyword never waits here, since it makes no call.
ENGINE_CALLS = threading.BoundedSemaphore(2)


class _Rule(NamedTuple):
    id: str
    toml: str  # the rule's own [[rules]] table, as the rule set writes it
    keywords: tuple[str, ...]  # lower-case; the rule runs only when one occurs
    requires: tuple[str, ...]  # composite rules: ids whose findings this one needs


def _load() -> tuple[str, dict[str, _Rule]]:
    """The rule set's global part (filters) and its rules. Path-only rules never match a text: left out."""
    head, *tables = re.split(r"(?m)^(?=\[\[rules\]\]$)", RULES_FILE.read_text(encoding="utf-8"))
    rules = {}
    for table in tables:
        rule = tomllib.loads(table)["rules"][0]
        if "regex" in rule:
            rules[rule["id"]] = _Rule(rule["id"], table, tuple(k.lower() for k in rule.get("keywords", ())),
                                      tuple(r["id"] for r in rule.get("required", ())))
    return head, rules


_HEAD, _RULES = _load()


def _by_keyword() -> dict[str, list[str]]:
    """Each keyword once, not once per rule: many rules share one ("key", "token"), and this halves the lookup."""
    found: dict[str, list[str]] = {}
    for rule in _RULES.values():
        for keyword in rule.keywords:
            found.setdefault(keyword, []).append(rule.id)
    return found


_BY_KEYWORD = _by_keyword()
_ALWAYS = [r.id for r in _RULES.values() if not r.keywords]


class _Config(str):
    """A rule set as TOML text: what `scan_text` reads from a config (it only calls `to_toml`)."""

    def to_toml(self) -> str:
        return str(self)


@lru_cache(maxsize=512)
def _config(ids: frozenset[str]) -> BetterleaksConfig:
    return cast(BetterleaksConfig, _Config(_HEAD + "".join(_RULES[i].toml for i in sorted(ids))))


def _rules_for(text: str) -> frozenset[str]:
    low = text.lower()
    chosen = {*_ALWAYS, *(i for keyword, ids in _BY_KEYWORD.items() if keyword in low for i in ids)}
    todo = list(chosen)
    while todo:
        for required in _RULES[todo.pop()].requires:
            if required not in chosen:
                chosen.add(required)
                todo.append(required)
    return frozenset(chosen)


_KINDS = (("private-key", "private_key"), ("jwt", "jwt"), ("password", "password"), ("aws-", "aws_key"),
          ("github-", "github_token"), ("gitlab-", "gitlab_token"), ("slack-", "slack_token"),
          ("discord-", "discord_token"), ("telegram-", "telegram_token"),
          ("generic-", "secret"))  # a random value after a key word, no vendor named (as memory_proxy.redact's "secret")


def kind_of(rule_id: str) -> str:
    """Our kinds (memory_proxy.redact's list), so that metrics keep a handful of labels: the rule id's family, or
    api_key. Kingfisher's rule ids (memory_proxy/redact/kingfisher.py) are named the same way."""
    return next((kind for part, kind in _KINDS if part in rule_id), "api_key")


def leaked(text: str) -> list[tuple[str, str]]:
    """(secret, kind) for each credential the rule set finds in `text`. Raises if the scan fails: a caller
    must not keep a text it could not check."""
    return list(dict.fromkeys(found for window in _windows(text) for found in _leaked_in(window)))


def _windows(text: str) -> Iterator[str]:
    """`text` in overlapping windows that end and start at whitespace, so that no token is cut in two (a cut
    one could be "found" as a shorter secret)."""
    start = 0
    while len(text) - start > SCAN_WINDOW:
        end = _space_before(text, start + SCAN_WINDOW)
        yield text[start:end]
        start = _space_before(text, end - SCAN_OVERLAP)
    yield text[start:]


def _space_before(text: str, at: int) -> int:
    """`at` moved back to just after the last whitespace of the _SLACK characters before it (`at` if none)."""
    found = _UP_TO_LAST_SPACE.match(text, max(at - _SLACK, 0), at)
    return found.end() if found else at


def _leaked_in(text: str) -> list[tuple[str, str]]:
    ids = _rules_for(text)
    if not ids:
        return []
    with ENGINE_CALLS:
        result = scan_text(text, config=_config(ids), redact=False, timeout_seconds=SCAN_TIMEOUT_S,
                           raise_on_error=True)
    return [narrowed(f.secret, kind_of(f.rule_id)) for f in result.findings if f.secret and len(f.secret.strip()) >= 4]


def narrowed(secret: str, kind: str) -> tuple[str, str]:
    """A connection string loses only its password, as in memory_proxy.redact ("postgres://app:[REDACTED]@db/app")."""
    if "://" in secret and "@" in secret:
        with suppress(ValueError):
            password = urlsplit(secret).password
            if password and len(password) >= 4:
                return password, "connection_string"
    return secret, kind


def occurrences(text: str, found: list[tuple[str, str]]) -> Iterator[tuple[int, int, str]]:
    """Where each found secret stands in `text` (every place: a secret pasted twice goes twice). Each (secret,
    kind) is looked for once: the engine reports a secret once per place, and n places looked for n times
    each would be n² spans."""
    for secret, kind in dict.fromkeys(found):
        start = text.find(secret)
        while start >= 0:
            yield start, start + len(secret), kind
            start = text.find(secret, start + len(secret))
