"""The words that name a secret, by group: what memory_proxy/redact/nearby.py looks for a value beside.

From maintained translations, each built by a script under tools/ that says where from:
- password_words.json: Django's translations of "password" (80+ locales);
- secret_words.json: django-allauth's (code, recovery codes, key, password) and Home Assistant's (code, door,
  gate, lock, unlock, disarm) translations;
- the names of personal identity and tax numbers in python-stdnum's modules, short and native ("PESEL",
  "Rodné číslo", "Αριθμός Μητρώου Κοινωνικής Ασφάλισης", "РНОКПП", "個人番号"): each module's first line.
Beside them, a few words of chat that no catalog holds: loanwords used in every language ("pin", "otp", "pw"),
and English names of personal secrets (a CVV, a one-time code, a security question) with their most common
European forms.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from contextlib import suppress
from pathlib import Path

import stdnum

_HERE = Path(__file__).parent

_STDNUM_TITLE = re.compile(r"([^(]+)\(([^)]*)\)")
_PERSONAL = re.compile(r"personal|identity|identification number|social security|citizen|resident|birth number"
                       r"|national identifier|individual|insurance|taxpayer|tax code for individuals", re.I)
_NOT_PERSONAL = re.compile(r"vat|compan|business|organi|legal entit", re.I)
_NOT_AN_ID = re.compile(r"imei|imsi|cusip|isin|vatin|accise|lithuanian|number$|^pin$", re.I)


def _identity_names() -> set[str]:
    """python-stdnum's names of personal identity and tax numbers."""
    names: set[str] = set()
    for module in pkgutil.walk_packages(stdnum.__path__, "stdnum."):
        if module.ispkg:
            continue
        with suppress(ImportError):
            doc = " ".join((importlib.import_module(module.name).__doc__ or "").split("\n\n")[0].split())
            m = _STDNUM_TITLE.match(doc)
            if m and _PERSONAL.search(m[2]) and not _NOT_PERSONAL.search(m[2]):
                names.update(n.strip() for n in (*m[1].split(","), *m[2].split(",")[:-1]))
    return {n.lower() for n in names if len(n) >= 3 and not _NOT_AN_ID.search(n)}


_IDENTITY = (  # English, and the European names no stdnum module gives
    "social security number", "social security no", "national id", "national identity number", "id number",
    "id card number", "identity card number", "passport number", "passport no", "tax id", "tax number",
    "taxpayer id", "national insurance number", "ni number", "nino", "driver's license number",
    "driving licence number", "steuer-id", "steueridentifikationsnummer", "sozialversicherungsnummer",
    "personalausweisnummer", "ausweisnummer", "numéro de sécurité sociale", "numéro fiscal", "rfc", "rut", "cuil",
    "cuit", "carta d'identità", "tc kimlik", "snils", "инн", "снилс", "номер паспорта")
_CVV = ("cvv", "cvv2", "cvc", "cvc2", "card verification code", "card security code", "security code on the back",
        "kartenprüfnummer", "cryptogramme")
_ONE_TIME = ("otp", "one-time code", "one time code", "one-time password", "verification code", "2fa code",
             "two-factor code", "mfa code", "login code", "sign-in code", "sms code", "authentication code",
             "auth code", "security code", "bestätigungscode", "code de vérification", "código de verificación",
             "codice di verifica")
_RECOVERY = ("recovery code", "recovery codes", "backup code", "backup codes", "recovery key", "backup key",
             "wiederherstellungscode", "codes de récupération", "códigos de recuperación", "codici di recupero")
_DOOR = ("door code", "gate code", "alarm code", "entry code", "keypad code", "garage code", "lock code",
         "lockbox code", "key safe", "safe code", "combination", "key box", "keybox", "lockbox", "building code",
         "digicode", "code de la porte", "türcode", "haustürcode", "tor-code", "código de la puerta",
         "codice del portone")
_ANSWER = ("mother's maiden name", "mothers maiden name", "maiden name", "first pet", "first pet's name",
           "security question", "security answer", "first car", "childhood best friend", "city where i was born")


# Words of one language that are a technical term in English, where a number after them is no code: a network
# port ("port 8080", Swedish for a gate) or a slot ("slot 2048", Dutch for a lock).
NOT_IN_ENGLISH = frozenset({"port", "slot"})


def groups() -> dict[str, list[str]]:
    """Each group's words (nearby.py says what value each group takes)."""
    catalogs: dict[str, list[str]] = json.loads((_HERE / "secret_words.json").read_text(encoding="utf-8"))["groups"]
    django = json.loads((_HERE / "password_words.json").read_text(encoding="utf-8"))["words"]
    return {
        "password": [*catalogs["password"], *django, "pw"],  # "pw": a loanword of chat in many languages
        "code": [*catalogs["code"], "pin", "пин"],  # the same word in every Latin and Cyrillic locale
        "door": [*(w for w in catalogs["door"] if w not in NOT_IN_ENGLISH), *_DOOR],
        "recovery": [*catalogs["recovery"], *_RECOVERY],
        "key": catalogs["key"],
        "one_time": list(_ONE_TIME),
        "identity": [*_identity_names(), *_IDENTITY],
        "cvv": list(_CVV),
        "answer": list(_ANSWER),
    }


WHOLE = ("identity", "cvv", "one_time", "answer")  # acronyms and phrases: "ssn", "cvv" match whole tokens only
