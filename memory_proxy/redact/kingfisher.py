"""Credentials by a second maintained rule set: MongoDB's Kingfisher (PyPI `kingfisher-secret-scanner`,
Apache-2.0), its bundled catalog run by its own engine (Rust and Vectorscan, in-process; nothing is verified
over the network: only `Scanner.scan` is called, never its validator).

Why beside Betterleaks (memory_proxy/redact/betterleaks.py): its catalog is a newer cut of the Betterleaks rules plus Google's
Veles detectors (OpenRouter, Postman, Packagist, Deno, HCP, ...), kept current by the Kingfisher team: it
catches credentials of services the rest of memory_proxy.redact misses, and changes no look-alike line
(docs/RELIABILITY.md#secrets).

Cost: its engine matches every rule at once (Vectorscan prefilters on their literals), so there is no
keyword step as in betterleaks.py, and a scan is linear in the text. The catalog compiles once per process,
on first use: seconds the first time on a machine, less after (Kingfisher keeps the compiled rules in the
user's cache directory); the figures are in docs/RELIABILITY.md#secrets.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

from kingfisher_sdk import Rules, Scanner

from .betterleaks import ScanFailed, kind_of, narrowed

SCAN_TIMEOUT_S = 10.0  # as betterleaks.py: a pathological text fails the scan (and the job) rather than stalling


@lru_cache(maxsize=1)
def _scanner() -> Scanner:
    return Scanner(Rules(confidence="low"))  # the whole catalog: a stored credential costs more than a placeholder


def warm() -> None:
    """Compile the catalog now rather than on the first scan: call it where a process that scans starts."""
    _scanner()


def _chars(raw: bytes, offset: int) -> int:
    return len(raw[:offset].decode(errors="surrogatepass"))


def found(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, kind) of each credential the catalog finds in `text`, in characters; a credential found
    inside base64 takes its whole encoded run. Raises ScanFailed if the scan fails: a caller must not keep a
    text it could not check."""
    raw = text.encode(errors="surrogatepass")
    try:
        findings = _scanner().scan(raw, timeout=SCAN_TIMEOUT_S)
    except (TimeoutError, RuntimeError, ValueError) as exc:
        raise ScanFailed(f"kingfisher: {type(exc).__name__}") from exc
    for finding in findings:
        if not finding.visible or len(finding.secret.strip()) < 4:  # invisible: a helper part of a composite
            continue
        secret, kind = narrowed(finding.secret, kind_of(finding.rule_id))  # a connection string: its password
        if finding.is_base64_encoded or secret == finding.secret:
            at = finding.location
            yield _chars(raw, at["start_offset"]), _chars(raw, at["end_offset"]), kind
        if not finding.is_base64_encoded:  # every copy of the secret goes, pasted elsewhere too
            start = text.find(secret)
            while start >= 0:
                yield start, start + len(secret), kind
                start = text.find(secret, start + len(secret))
