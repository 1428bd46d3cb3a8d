"""The word "password" in 80+ languages, and sentences about passwords that hold none, from Django's translations.

`python -m tools.django_words` downloads Django's wheel from PyPI (pinned below) and reads
the gettext catalogs of `django.contrib.auth` and `django.contrib.admin` (translated by Django's Transifex
teams; BSD-3-Clause). It writes:
- memory_proxy/redact/password_words.json: every locale's translation of the msgids "password" and "Password" (lower-cased,
  deduplicated), the words beside which memory_proxy/redact/nearby.py looks for a stated password in any language;
- benchmarks/secrets_corpus/django_lookalikes.jsonl: every translation of a msgid that mentions a password
  ("Your password can't be entirely numeric.") and has no %-placeholder: real sentences about passwords, in
  every language, that must stay whole. Split like the rest of the corpus, by a hash decided before use.
Deterministic: the same wheel gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

DJANGO = "django==5.2.8"
ROOT = Path(__file__).resolve().parents[1]
CATALOG = re.compile(r"django/contrib/(auth|admin)/locale/([^/]+)/LC_MESSAGES/django\.po$")
ENTRY = re.compile(r'^msgid ((?:".*"\n)+)msgstr ((?:".*"\n)+)', re.M)


def _joined(quoted: str) -> str:
    return "".join(json.loads(line) for line in quoted.splitlines())


def _entries(po: str) -> list[tuple[str, str]]:
    return [(_joined(mid), _joined(mstr)) for mid, mstr in ENTRY.findall(po)]


def _split(text: str) -> str:
    return "test" if int(hashlib.sha256(f"django-lookalikes|{text}".encode()).hexdigest(), 16) % 3 == 0 else "dev"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", DJANGO, "-d", tmp], check=True)
        [wheel] = Path(tmp).glob("*.whl")
        catalogs = {}
        with zipfile.ZipFile(wheel) as z:
            for name in sorted(z.namelist()):
                if m := CATALOG.match(name):
                    catalogs[(m[1], m[2])] = z.read(name).decode("utf-8")
    words: set[str] = set()
    lookalikes: dict[str, str] = {}  # text -> locale
    for (app, locale), po in catalogs.items():
        for msgid, msgstr in _entries(po):
            if not msgstr or locale.startswith("en"):
                continue
            if app == "auth" and msgid in ("password", "Password"):
                words.add(msgstr.strip().lower())
            if "password" in msgid.lower() and "%" not in msgstr and "{" not in msgstr:
                lookalikes.setdefault(msgstr.strip(), locale)
    (ROOT / "memory_proxy" / "redact" / "password_words.json").write_text(json.dumps({
        "source": f"{DJANGO}: django/contrib/auth/locale/*/LC_MESSAGES/django.po, the msgstr of msgid "
                  "'password' and 'Password' (BSD-3-Clause); built by tools/django_words.py",
        "words": sorted(words)}, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    with (ROOT / "benchmarks" / "secrets_corpus" / "django_lookalikes.jsonl").open("w", encoding="utf-8") as out:
        for text, locale in sorted(lookalikes.items()):
            out.write(json.dumps({"rule": f"django-{locale}", "text": text, "source": DJANGO,
                                  "split": _split(text)}, ensure_ascii=False) + "\n")
    print(f"{len(words)} words, {len(lookalikes)} sentences from {len(catalogs)} catalogs")


if __name__ == "__main__":
    main()
