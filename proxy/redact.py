"""Credential redaction (seed 002 §13), a leaf module: jobs, stored facts and audit reasons pass here.

`redact(text)` replaces each secret with `[REDACTED: <kind>]` and returns the new text and the kinds found.
Kinds: api_key, aws_key, github_token, gitlab_token, slack_token, discord_token, telegram_token, jwt,
bearer_token, private_key, connection_string, card_number, bank_account (a valid IBAN), seed_phrase (a
BIP-39 phrase whose checksum holds), password, pin, passphrase, national_id, card_cvv, one_time_code,
recovery_code, door_code, security_answer, and secret (a random-looking value after a key/token/secret/credentials
word). Credentials of 300+ services come from a maintained rule set (proxy/leaks.py, Betterleaks).

Library: Yelp's detect-secrets (pure Python, offline, maintained), for its vendor formats we would rather not
hand-keep (GitLab, SendGrid, Twilio, Mailchimp, PyPI, npm, Azure, Discord, Telegram, ...). Only its
`analyze_string` is used, so nothing is ever verified over the network. Our own patterns cover what it misses
or matches too narrowly: sk-proj-/sk-ant-, github_pat_, prefixes it has no plugin for (Hugging Face hf_,
Google OAuth GOCSPX-, Groq, Replicate, xAI, Perplexity, npm_, ...), bare Mistral keys, AWS secret keys after
their key id, whole PEM and PuTTY key blocks, Luhn-checked cards, connection strings, and passwords, PINs and
passphrases stated in English, German, French, Spanish, Italian or Polish.

Decisions:
- Connection strings (any `scheme://user:password@host`): only the password goes; scheme, user, host, port
  and path stay ("postgres://app:[REDACTED: connection_string]@db:5432/app" is still a useful fact).
- Private keys: a PEM key's whole BEGIN…END block, or everything after BEGIN if END is missing; a PuTTY .ppk
  from its header to Private-MAC (or to the end), if it has Private-Lines. Public keys and certificates stay.
- AWS secret access keys (40 characters) go when "aws … secret" or an access key id (AKIA…, ASIA…) comes just
  before them and they look random (mixed case), so a commit hash after a key id stays.
- Bare 32-character keys (Mistral's format, the default provider): exactly 32 ASCII letters and digits, mixed
  case, broken up by capitals and digits as no identifier is ("getUserAccountSettings2FAEnabled" stays), and
  not base64 of plain text. Hex digests have one case and stay. About 1 random key in 5,000 looks too tame and
  is missed, unless a key word introduces it.
- Other bare hex/base64 strings (git commit hashes short or long, UUIDs, checksums) stay: a value is redacted
  only when its format is a known credential or a key/token/secret/password word introduces it.
- Passwords in prose ("wifi password is X", "password: X", "changed my password to X", "Passwort lautet X",
  "mot de passe : X", "mi contraseña es X", "la mia password è X", "hasło to X", "I use X as my password"):
  only the value goes. A stop-list per language ("is required", "ist zu kurz", "est trop court"), lower-case
  -ed/-ing words after "is" ("is expiring") and French participles ("est bloqué") keep ordinary sentences
  intact. Three or more plain words to the end of the clause, none a grammar or stop word, are a passphrase
  and go whole ("my password is correct horse battery staple": a stop word may lead). Where the word is often
  not about passwords ("pass", Spanish "clave") the value must look like one (6+ characters with a digit, a
  symbol or an inner capital: "my bus pass is valid" stays); so must the password of a user/password pair
  ("login alice / hunter2": letters and a digit or symbol). Passphrases and seed phrases lose the rest of the
  clause.
- Cards: 13-19 digits, run together or grouped like a card by spaces, dashes or dots (4-4-4-4[-3], 4-6-5,
  4-6-4), Luhn-valid, first digit 2-6 (a 2 only for Mastercard's 2221-2720). Phone numbers, timestamps,
  order numbers don't fit.
- Overlapping hits merge into one placeholder, named by the first hit's kind unless that is a generic one
  (api_key, secret) and a later hit names it (slack_token); `kinds` lists each kind once. Redacting again changes nothing.

Speed (2-core dev box): 0.37 ms for 2 KB of plain prose (0.11 ms before the BIP-39 scan of its words), 0.2 ms for 2 KB of look-alikes or secrets, 0.016 ms
for 100 characters; a rule runs only when one of its trigger words occurs. Importing detect-secrets: ~0.1 s.
The maintained rule set adds ~0.3-2 ms to a text holding one of its keywords (7 % of LoCoMo turns), none otherwise.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, NamedTuple

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector
from mnemonic import Mnemonic
from stdnum import iban

from .leaks import leaked, occurrences
from .observability import REDACTIONS


@dataclass(frozen=True, slots=True)
class Redaction:
    """The text with secrets replaced, and what was found (empty: the text is unchanged)."""

    text: str
    kinds: tuple[str, ...]  # each kind found, once, in order of first appearance

    @property
    def redacted(self) -> bool:
        return bool(self.kinds)


def _entropy(s: str) -> float:  # Shannon entropy, bits per character
    return -sum(n / len(s) * math.log2(n / len(s)) for n in Counter(s).values())


def _looks_random(value: str) -> bool:
    """Long, varied, with digits, and mixed-case or digit-dense: a token, not a word ("hard-work-2024")."""
    digits = sum(c.isdigit() for c in value)
    mixed_case = any(c.isupper() for c in value) and any(c.islower() for c in value)
    return (len(value) >= 12 and _entropy(value) >= 3.0 and digits > 0 and any(c.isalpha() for c in value)
            and (mixed_case or digits >= 0.2 * len(value)))


def _random_key(value: str) -> bool:
    """Mixed case, and broken up as no name is: a third of its characters are capitals, digits or symbols, or
    letters right after one (a random 32-character key: ~20; "getUserAccountSettings2FAEnabled": 7). Hex
    digests have one case; base64 of plain text is not a key."""
    breaks = sum(not (b.islower() and a.isalpha()) for a, b in pairwise(value))
    if value.lower() == value or value.upper() == value or breaks < len(value) // 3:
        return False
    try:
        return not base64.b64decode(value, validate=True).decode("ascii").isprintable()
    except (binascii.Error, UnicodeDecodeError):
        return True


def _card(value: str) -> bool:
    """Luhn-valid, and a card starting with 2 is a 16-digit Mastercard 2221-2720 (not a 2017… timestamp)."""
    digits = [int(c) for c in value if c.isdigit()]
    first4 = int("".join(map(str, digits[:4])))
    if not 13 <= len(digits) <= 19 or (digits[0] == 2 and (len(digits) != 16 or not 2221 <= first4 <= 2720)):
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


# Not a credential when it is the first word after "password is" ("the password is required", "ist falsch",
# "est trop court", "jest za krótkie").
_STOP = (r"(?:(?i:a|an|the|not|no|also|my|your|his|her|their|our|its|this|that|same|different|kept|written"
         r"|set|reset|wrong|incorrect|correct|weak|strong|secure|long|short|too|very|easy|hard|simple|complex"
         r"|unknown|hidden|in|on|at|under|with|from|for|of|to|by|and|or|empty|blank|case|be|it|one|now|still"
         r"|nicht|kein|zu|falsch|richtig|sicher|unsicher|schwach|stark|leer|abgelaufen|geheim|ein|eine"
         r"|der|die|das|mein|meine|dein|sehr|auch|noch|jetzt|immer|gleich|lang|kurz|seit|mit|ohne|bei|für"
         r"|von|auf|im|am|gültig|ungültig|gesperrt|geändert|gespeichert"
         r"|trop|pas|faux|vide|le|la|les|un|une|mon|ma|ton|très|aussi|toujours|maintenant|sur|dans|même"
         r"|depuis|avec|pour|chez|en|valide|invalide"
         r"|demasiado|muy|el|mi|tu|incorrecta|correcta|segura|débil|vacía|también|olvidada|caducada|igual"
         r"|ahora|desde|con|sin|para|hasta|válida|inválida|errónea|misma"
         r"|troppo|non|il|lo|mia|tua|sbagliata|corretta|scaduta|scaduto|molto|anche|vuota|debole|dimenticata"
         r"|sul|uguale|ora|ancora|stata|stato|bloccata|cambiata|valida|errata"
         r"|za|nie|zbyt|złe|błędne|poprawne|bardzo|też|moje|twoje|puste|słabe|krótkie|długie|takie"
         r"|nieprawidłowe|prawidłowe|ważne|nieważne|zmienione|zablokowane))\b")
# Grammar words: a run of words without any, after "password is", is a passphrase, not a sentence.
_FUNC = (r"(?i:a|an|the|and|or|but|nor|so|yet|for|to|of|in|on|at|by|with|from|into|than|then|as|is|are"
         r"|was|were|be|been|am|do|does|did|has|have|had|can|will|would|should|must|not|no|too|very|also"
         r"|just|only|still|now|again|already|always|never|ever|soon|today|yesterday|really|quite|rather"
         r"|pretty|since|because|until|while|when|where|which|who|that|this|these|those|it|its|my|your|his"
         r"|her|our|their|me|him|us|them|i|you|he|she|we|they|same|something|anything|nothing|everything"
         r"|else|here|there|all|any|some|each|every|more|most|less|much|many|enough|if"
         r"|und|oder|aber|mit|seit|mehr|der|die|das|den|dem|ein|eine|et|ou|mais|avec|depuis|plus|le|la|les"
         r"|un|une|du|des|que|qui|y|o|pero|con|desde|el|los|las|del|al|e|ma|più|da|il|lo|che|di|ale|lub"
         r"|już|dla|że)\b")
_PHRASE_WORD = r"(?!" + _FUNC + r"|" + _STOP + r")[A-Za-z]+"
_PHRASE = (  # 3+ plain words to the clause's end, maybe after a stop word ("correct horse battery staple")
    r"(?P<p>(?:(?!" + _FUNC + r")[A-Za-z]+ +)?" + _PHRASE_WORD + r"(?: +" + _PHRASE_WORD
    + r"){2,6})(?=[ \t]*(?:[.,;:!?)\n]|$))")
_NOT_REDACTED = r"(?![\"'`]?\[REDACTED)"
_QUOTED = r"\"(?P<dq>[^\"\n]{1,128})\"|'(?P<sq>[^'\n]{1,128})'|`(?P<bq>[^`\n]{1,128})`"
_WORD = r"[^\s\"'`]*[^\s\"'`.,;:)]"  # one token, trailing sentence punctuation left out
_STRONG = (r"(?=[^\s\"'`]{6})"  # 6+ characters with a digit, a symbol or a capital inside: "Hunter22!x"
           r"(?=[^\s\"'`]*(?:[\d!@#$%^&*+=~_]|[^\s\"'`][A-Z]))")
_TARGET = (  # "password for my Netflix account", "Passwort für das WLAN", "hasło do wifi"
    r"(?:\s+(?:for|to|of|on|at|f[üu]r|vo[mn]|zu[mr]|beim?|du|de|des|pour|del|para|della?|dello|di|per|do|od"
    r"|na)\s+[^.,;:!?\n\"'\[\]]{1,40}?)?")
_SEP = (r"(?:(?:\s*(?::=|[:=])\s*|\s+(?:is|was)(?:\s+(?:now|still))?(?:\s*:)?\s+)"
        r"(?![a-z]+(?:ed|ing)\b)"  # then not a lower-case -ed/-ing word: "was leaked", "is expiring"
        r"|\s+(?:ist|lautet|war|est|était|c'est|es|era|è|e'|é)"  # de, fr, es, it
        r"(?:\s+(?:jetzt|noch|maintenant|toujours|ahora|ora|ancora))?(?:\s*:)?\s+"
        r"(?![a-zàâçéèêîôû]+é(?:es?|s)?\b)"  # then not a French participle: "est bloqué"
        r"|\s+(?:(?:is|was|got)\s+)?(?:set|changed|reset|updated)\s+to\s+"  # "was changed to"
        r"|\s+to\s+(?=\S*[^\sa-z.,;:!?]))")  # "set my password to X": X needs a digit, capital or symbol
_SEP_PL = r"(?:\s*[:=]\s*|\s+(?:to|jest|brzmi)(?:\s*:)?\s+)"  # Polish: "hasło to X"
_PASSWORD = r"(?i:pass(?:word|wort|wd|code)|pwd?|kennwort|mot de passe|mdp|contrase[ñn]a|has[łl][oa])\b"
_PASSWORD_TRIGGERS = ("pass", "pw", "kennwort", "mdp", "mot de passe", "contrase", "hasł", "hasl")
_PASSWORD_VALUE = (  # after a weak word (group "weak"): no passphrase, and a bare value must look like one
    _NOT_REDACTED + r"(?:(?(weak)(?!)|" + _PHRASE + r")|(?!" + _STOP + r")(?:" + _QUOTED + r"|(?P<v>(?(weak)"
    + _STRONG + r")" + _WORD + r")))")
_AS_PASSWORD = re.compile(  # the gate of "I use X as my password" (on the lower-cased text)
    r" (?:as|als|comme|como|come|jako) (?:\S+ ){0,2}?(?:pass|pw|kennwort|mot de passe|mdp|contrase|has[łl])")
_VENDOR_PREFIXES = ("hf_", "api_org_", "gsk_", "r8_", "npm_", "dop_v1_", "shp", "glc_", "xai-", "pplx-",
                    "gocspx-")

# Cards and bare keys are first looked for as runs in the text's translated bytes: ~10× cheaper than a
# regex scan of the text, which then runs only where one may be.
_ALNUM = bytes(97 if chr(b).isascii() and chr(b).isalnum() else 32 for b in range(256))  # "a" and " "
_DIGITS = bytes(48 if 48 <= b <= 57 else 45 if b in b" .-" else 120 for b in range(256))  # "0", "-", "x"
_KEY_RUN = b" " + b"a" * 32 + b" "  # exactly 32 letters and digits
_BARE_KEY = re.compile(r"(?<![\w+/.-])[A-Za-z0-9]{32}(?![\w+/=]|[.-]\w)")


def _bytes(text: str) -> bytes:
    return text.encode(errors="surrogatepass")  # a lone surrogate (bad input) too


def _card_runs(low: str) -> bool:
    """13+ digits, or digits grouped 4-4 or 4-6 (Amex) by spaces, dashes or dots."""
    digits = _bytes(low).translate(_DIGITS)
    return any(run in digits for run in (b"0" * 13, b"0000-0000", b"0000-000000"))


class _Rule(NamedTuple):
    kind: str
    triggers: tuple[str, ...]  # substrings, one of which must occur for the pattern to run (see _spans)
    pattern: re.Pattern[str]
    group: str | None = None  # the group to replace; None: the whole match, or the quoted/bare value
    check: Callable[[str], bool] | None = None
    gate: Callable[[str], bool] | None = None  # given the lower-cased text, when triggers are not enough


# Patterns begin with a literal or a small character class and check word boundaries only after it
# (a lookbehind): that lets the regex engine skip ahead, which is most of the speed.
_RULES = [
    _Rule("private_key", ("private key",), re.compile(
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|.*)", re.DOTALL)),
    _Rule("private_key", ("putty-user-key-file-",), re.compile(  # .ppk: header to Private-MAC, or to the end
        r"PuTTY-User-Key-File-\d+:(?=.*?Private-Lines:)"
        r"(?:.*?Private-(?:MAC|Hash):[ \t]*[0-9a-fA-F]*|.*)", re.DOTALL)),
    _Rule("connection_string", ("://",), re.compile(  # scheme://user:PASSWORD@host — only the password goes
        r"://[^\s:/@\[\]]*:(?P<v>(?!\[REDACTED)\S{1,256})@[^\s@/:?#]+"), "v"),
    _Rule("jwt", ("eyj",), re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+")),
    _Rule("aws_key", ("akia", "asia", "abia", "acca", "a3t"),
          re.compile(r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b")),
    _Rule("aws_key", ("aws", "AKIA", "ASIA"), re.compile(  # secret access key: after "aws … secret", a key id
        r"[wWKS](?:(?i:(?<=aw)s)[\w\s'-]{0,30}?(?i:secret)|(?<=A[KS])IA[A-Z0-9]{16})[\w\s'\",;:=/-]{0,40}?"
        r"(?<![A-Za-z0-9+])(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"), "v", check=_random_key),
    _Rule("github_token", ("gh", "github_pat_"),
          re.compile(r"(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b")),
    _Rule("slack_token", ("xox",), re.compile(r"xox[abposre]-[A-Za-z0-9-]{10,}")),
    _Rule("api_key", ("sk-",), re.compile(r"sk-(?<![\w-]sk-)[A-Za-z0-9_-]{20,}")),  # OpenAI, Anthropic
    _Rule("api_key", ("aiza",), re.compile(r"AIza[0-9A-Za-z_-]{35,}")),  # Google
    _Rule("api_key", ("k_live_", "k_test_", "whsec_"),  # Stripe
          re.compile(r"(?:[rs]k_(?:live|test)|whsec)_[0-9A-Za-z]{24,}\b")),
    # By prefix (detect-secrets 1.5 has no plugin for these): Hugging Face, Groq, Replicate, npm,
    # DigitalOcean, Shopify, Grafana, xAI, Perplexity, Google OAuth client secrets.
    _Rule("api_key", ("_", "xai-", "pplx-", "gocspx-"), re.compile(
        r"(?<![\w-])(?:hf_[A-Za-z0-9]{30,}|api_org_[A-Za-z0-9]{30,}|gsk_[A-Za-z0-9]{48,}|r8_[A-Za-z0-9]{30,}"
        r"|npm_[A-Za-z0-9]{36,}|dop_v1_[a-f0-9]{64}|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"
        r"|glc_[A-Za-z0-9+/]{32,}=*|xai-[A-Za-z0-9]{60,}|pplx-[A-Za-z0-9]{40,}|GOCSPX-[A-Za-z0-9_-]{24,})"
        r"(?![\w-])"),
          gate=lambda low: any(prefix in low for prefix in _VENDOR_PREFIXES)),
    _Rule("bearer_token", ("bearer",),
          re.compile(r"[bB](?i:earer)(?:\s+token)?(?:\s*:)?\s+(?P<v>[A-Za-z0-9._~+/-]{16,}=*)"), "v"),
    _Rule("card_number", (), re.compile(  # grouped by spaces, dashes or dots
        r"[2-6](?<![\w+.,/-].)(?<!\d[ .-].)(?:\d{12,18}|\d{3}(?:[ .-]\d{4}){3}(?:[ .-]\d{3})?"
        r"|\d{3}[ .-]\d{6}[ .-]\d{4,5})(?!\w|[ .-]\d)"), check=_card,
          gate=_card_runs),
    _Rule("pin", ("pin", "geheimzahl"), re.compile(
        r"[pPzZ](?i:(?<!\wp)(?<=p)in(?:[\s-]+(?:code|number|nummer))?|(?<=geheimz)ahl)" + _TARGET
        + r"(?:\s*[:=]\s*|\s+(?:is|was|ist|lautet|war|est|es|era|è|to|jest)\s+)(?P<v>\d{4,8})\b"), "v"),
    _Rule("passphrase", ("phrase", "mnemonic", "frase", "fraza"), re.compile(  # the rest of the clause goes
        r"(?:(?i:pass\s?phrase|seed[\s-]?phrase|recovery\s+phrase|mnemonic|wiederherstellungsphrase"
        r"|phrase\s+(?:secr[eè]te|de\s+(?:passe|r[ée]cup[ée]ration))|frase\s+(?:semilla|de\s+recuperaci[oó]n"
        r"|segreta|di\s+recupero))" + _TARGET + _SEP
        + r"|(?i:fraza\s+(?:odzyskiwania|seed))" + _TARGET + _SEP_PL + r")"
        + _NOT_REDACTED + r"(?!" + _STOP + r")(?:" + _QUOTED + r"|(?P<v>[^\s.,;:\"'`][^.,;\n\"'`]*))")),
    # "password is X", "Passwort: X", "la mia password è X"; weak: "my gmail pass is X"
    _Rule("password", ("pass", "pw"), re.compile(
        r"[pP](?<![^\W\d_][pP])(?i:ass(?:word|wort|wd|code|(?<![\w-]pass)(?P<weak>))|wd?)\b"
        + _TARGET + _SEP + _PASSWORD_VALUE)),
    # "Kennwort: X", "mot de passe : X", "mi contraseña es X", "hasło to X"; weak: "la clave del wifi es X"
    _Rule("password", ("kennwort", "mdp", "mot de passe", "contrase", "clave", "hasł", "hasl"), re.compile(
        r"[kKmMcChH](?<![^\W\d_].)(?:(?i:(?<=k)ennwort|(?<=m)dp|(?<=m)ot de passe|(?<=c)ontrase[ñn]a"
        r"|(?<=c)lave(?P<weak>))\b" + _TARGET + _SEP + r"|(?i:(?<=h)as[łl]o)\b" + _TARGET + _SEP_PL + r")"
        + _PASSWORD_VALUE)),
    _Rule("password", _PASSWORD_TRIGGERS, re.compile(  # "I use X as my password", "uso X como contraseña"
        r"[uUcCpPbBvVnN](?<![^\W\d_].)(?i:(?<=u)s(?:e[ds]?|ing|o)|(?<=u)tili(?:se|zo|zzo)|(?<=u)żywam"
        r"|(?<=c)hose|(?<=p)icked|(?<=b)enutze|(?<=v)erwende|(?<=n)utze)\s+" + _NOT_REDACTED
        + r"(?!" + _STOP + r"|" + _FUNC + r")(?:" + _QUOTED + r"|(?P<v>" + _WORD + r"))"
        + r" (?i:as|als|comme|como|come|jako) (?:[\w'-]+ ){0,2}?" + _PASSWORD
        + r"(?![\s-]*(?i:manager|generator|hint|reset|policy|vault|safe))"),
          gate=lambda low: _AS_PASSWORD.search(low) is not None),
    _Rule("password", ("login", "cred"), re.compile(  # "login alice / hunter2", "creds: admin:Adm1n!"
        r"[gGcC](?i:(?<=\blog)in|(?<!\wc)(?<=c)red(?:s|entials?|enciales|enziali))\b(?:\s+is)?(?:\s*:)?\s+"
        r"[^\s/:,]+\s*[/:]\s*" + _NOT_REDACTED + r"(?!/)(?P<v>(?=[^\s\"'`]*[A-Za-z])"
        r"(?=[^\s\"'`]*[\d!@#$%^&*+=~_])" + _WORD + r")"),
          "v"),
]

# Generic: a random-looking value after key/token/secret/credentials (not ":secret:" in an AWS ARN).
# It runs after the library, so a specific kind wins an exact tie.
_GENERIC = _Rule("secret", ("key", "token", "secret", "credential"), re.compile(
    r"[kKcC](?i:(?<=k)(?<!:k)ey|(?<=tok)(?<!:tok)en|(?<=sec)(?<!:sec)ret|(?<=c)(?<!:c)redentials?)\b"
    + _TARGET    + r"(?:\s*(?::=|[:=])\s*|\s+(?:is|was)\s+)" + _NOT_REDACTED
    + r"(?:" + _QUOTED + r"|(?P<v>[^\s\"'`,;&()<>\[\]{}]*[^\s\"'`,;&()<>\[\]{}.:!?]))"), check=_looks_random)

# detect-secrets plugins (with their triggers) for formats not above; the overlapping ones are a second net.
# Left out on purpose: IP addresses, keyword and high-entropy plugins (code-oriented, flag commit hashes).
_LIBRARY: list[tuple[str, tuple[str, ...], RegexBasedDetector]] = [
    (kind, triggers, plugin()) for kind, triggers, plugin in [
        ("aws_key", ("akia", "asia", "abia", "acca", "a3t", "aws"), AWSKeyDetector),
        ("github_token", ("gh",), GitHubTokenDetector),
        ("gitlab_token", ("gl", "gr1348941"), GitLabTokenDetector),
        ("slack_token", ("xox", "hooks.slack.com"), SlackDetector),
        ("jwt", ("eyj",), JwtTokenDetector),
        ("api_key", ("sk-",), OpenAIDetector),
        ("api_key", ("k_live_",), StripeDetector),
        ("api_key", ("sg.",), SendGridDetector),
        ("api_key", ("AC", "SK"), TwilioKeyDetector),
        ("api_key", ("-us",), MailchimpDetector),
        ("api_key", ("sq0csp-",), SquareOAuthDetector),
        ("api_key", ("pypi-",), PypiTokenDetector),
        ("api_key", ("_authtoken",), NpmDetector),
        ("api_key", ("accountkey=",), AzureStorageKeyDetector),
        ("discord_token", (".",), DiscordBotTokenDetector),
        ("telegram_token", (":AA",), TelegramBotTokenDetector),  # bot tokens are <id>:AA…
    ]
]


_VALUE_GROUPS = ("dq", "sq", "bq", "v", "p")  # quoted, bare, passphrase
_TOKEN_END = re.compile(r"[\w+/=~-]*(?:\.[\w+/=~-]+)*")  # always matches; a final "." is punctuation


def _matches(rule: _Rule, text: str) -> Iterator[tuple[int, int, str]]:
    for m in rule.pattern.finditer(text):
        name = rule.group or next((g for g in _VALUE_GROUPS if g in m.re.groupindex and m[g]), None)
        start, end = m.span(name) if name else m.span()
        if rule.check is None or rule.check(text[start:end]):
            yield start, end, rule.kind


def _bare_keys(text: str) -> Iterator[tuple[int, int, str]]:
    """Bare 32-character keys (Mistral's format, the default provider): random-looking, no name or hash."""
    raw = _bytes(text)
    runs = b" " + raw.translate(_ALNUM) + b" "
    at = runs.find(_KEY_RUN)  # the padding makes `at` the run's offset in raw
    while at >= 0:
        start = len(raw[:at].decode(errors="surrogatepass"))
        if _BARE_KEY.match(text, start) and _random_key(text[start:start + 32]):
            yield start, start + 32, "api_key"
        at = runs.find(_KEY_RUN, at + 33)


_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b")
_SEED = Mnemonic("english")
_BIP39 = frozenset(_SEED.wordlist)
_SEED_LENGTHS = (24, 21, 18, 15, 12)  # words in a BIP-39 phrase, longest first
_LOWER_WORD = re.compile(r"[a-z]+")


def _checksummed(text: str) -> Iterator[tuple[int, int, str]]:
    """Values whose format carries a checksum, so a match is no accident: IBANs (country length and mod-97,
    by python-stdnum) and BIP-39 wallet seed phrases (12–24 words of its wordlist whose last word checks,
    by Trezor's `mnemonic`), with or without a word that introduces them. A bank account is injected into
    every later prompt if stored: it is a secret here (issue 25), as a card number is."""
    if any(c.isdigit() for c in text):
        for found in _IBAN.finditer(text):
            if iban.is_valid(found.group(0)):
                yield found.start(), found.end(), "bank_account"
    words = [w for w in _LOWER_WORD.finditer(text) if w.group(0) in _BIP39]
    if len(words) < _SEED_LENGTHS[-1]:
        return
    run: list[re.Match[str]] = []
    for word in [*words, None]:
        if word is not None and (not run or text[run[-1].end():word.start()].isspace()):
            run.append(word)
            continue
        i = 0
        while len(run) - i >= _SEED_LENGTHS[-1]:
            n = next((n for n in _SEED_LENGTHS if len(run) - i >= n
                      and _SEED.check(" ".join(w.group(0) for w in run[i:i + n]))), 0)
            if n:
                yield run[i].start(), run[i + n - 1].end(), "seed_phrase"
            i += n or 1
        run = [word] if word is not None else []


# Secrets stated in a sentence: a word names it, the value follows in the same sentence. No grammar per
# language: the value is looked for in the sentence after the word (80 characters), by its shape.
# - password: the word in 70+ more languages (Django's translations: proxy/password_words.json says where
#   from), those the patterns above do not read; the first of the next five tokens that looks like a password
#   ("lösenordet är Sommar2024!", "пароль: Qwerty-42", "密码是Abc12345"): 6+ characters with a digit, a symbol or
#   an inner capital, and not a number, date, version, URL or e-mail address. "Heslo musí mít alespoň 8
#   znaků" stays.
# - personal secrets (issue 25), named in English and a few other languages: a national ID, tax or passport
#   number (6+ digits, or letters and 3+ digits); a card's CVV (3-4 digits); a one-time or 2FA code; recovery
#   and backup codes (all of them, to the end of the sentence); a door, gate, alarm or safe code; the answer to
#   a security question (the rest of the clause). Bare numbers without such a word stay (orders, phones).
_WORDS = [w for w in json.loads(Path(__file__).with_name("password_words.json").read_text(encoding="utf-8"))["words"]
          if not re.fullmatch(_PASSWORD, w)]
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|[\n。！？]")
_TOKEN = re.compile(r"[^\s\"'`«»“”„‚‘’,;，、]+")
_CJK_LEAD = re.compile(r"^[:=：\-—–(\[]*[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]*[:=：\-—–]*")
_LOOKS_STRONG = re.compile(_STRONG)  # the shape a bare value needs after a weak password word, above
_NOT_A_PASSWORD = re.compile(r"[\d.,:/+\-]+|\w+://\S*|www\.\S*|[^@\s]+@[^@\s]+\.[a-z]{2,}|\[REDACTED: \w+\]",
                             re.IGNORECASE)


def _password_value(window: str) -> Iterator[tuple[int, int]]:
    for token in list(_TOKEN.finditer(window))[:5]:
        lead = _CJK_LEAD.match(token[0])
        value = token[0][lead.end() if lead else 0:].rstrip(".,;:!?)]")
        if _LOOKS_STRONG.match(value) and not _NOT_A_PASSWORD.fullmatch(value):
            start = token.start() + token[0].find(value)
            yield start, start + len(value)
            return


def _shaped(pattern: str, every: bool = False, check: Callable[[str], bool] | None = None,
            ) -> Callable[[str], Iterator[tuple[int, int]]]:
    """The first value of this shape in the sentence (or every one), group `v` if the pattern has it."""
    regex = re.compile(pattern)

    def values(window: str) -> Iterator[tuple[int, int]]:
        for m in regex.finditer(window):
            group = "v" if "v" in regex.groupindex else 0
            if check is None or check(m[group]):
                yield m.span(group)
                if not every:
                    return

    return values


class _Stated(NamedTuple):
    kind: str
    words: re.Pattern[str]
    triggers: tuple[str, ...]  # lower-case; one must occur for `words` to run
    value: Callable[[str], Iterator[tuple[int, int]]]
    reach: int = 80
    end: re.Pattern[str] = _SENTENCE_END


def _named(kind: str, words: tuple[str, ...], value: Callable[[str], Iterator[tuple[int, int]]],
           reach: int = 80, end: re.Pattern[str] = _SENTENCE_END) -> _Stated:
    pattern = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    return _Stated(kind, re.compile(rf"(?<!\w)(?:{pattern})(?!\w)", re.IGNORECASE), words, value, reach, end)


_CODE = r"(?<![\w-])(?=[A-Za-z0-9-]*\d)[A-Za-z0-9]{4,10}(?:-[A-Za-z0-9]{3,6}){0,3}(?![\w-])"
_STATED = [
    _Stated("password", re.compile("|".join(re.escape(w) for w in sorted(_WORDS, key=len, reverse=True)),
                                   re.IGNORECASE), tuple(_WORDS), _password_value),
    _named("national_id", (
        "social security number", "social security no", "ssn", "national id", "national identity number",
        "id number", "id card number", "identity card number", "passport number", "passport no", "tax id",
        "tax number", "taxpayer id", "national insurance number", "ni number", "nino", "driver's license number",
        "driving licence number", "bsn", "burgerservicenummer", "pesel", "cpf", "aadhaar", "personnummer",
        "henkilötunnus", "cpr", "dni", "nif", "codice fiscale", "steuer-id", "steueridentifikationsnummer",
        "sozialversicherungsnummer", "personalausweisnummer", "ausweisnummer", "numéro de sécurité sociale",
        "numéro fiscal", "nir", "curp", "rfc", "rut", "cuil", "cuit", "número de identidad", "carta d'identità",
        "tc kimlik", "snils", "инн", "снилс", "номер паспорта"),
        _shaped(r"(?<![\w-])(?:[A-Z]{0,4}\d[\d \-./]{3,20}\d[A-Z]{0,2}|(?=[A-Z]*\d)[A-Z0-9]{8,20})(?![\w-])",
                check=lambda v: sum(c.isdigit() for c in v) >= (6 if v[:1].isdigit() else 3))),
    _named("card_cvv", ("cvv", "cvv2", "cvc", "cvc2", "card verification code", "card security code",
                        "security code on the back", "kartenprüfnummer", "cryptogramme"),
           _shaped(r"(?<![\d/.-])\d{3,4}(?![\d/.-])")),
    _named("one_time_code", ("otp", "one-time code", "one time code", "one-time password", "verification code",
                             "2fa code", "two-factor code", "mfa code", "login code", "sign-in code", "sms code",
                             "authentication code", "auth code", "security code", "bestätigungscode",
                             "code de vérification", "código de verificación", "codice di verifica"),
           _shaped(_CODE)),
    _named("recovery_code", ("recovery code", "recovery codes", "backup code", "backup codes", "recovery key",
                             "backup key", "wiederherstellungscode", "codes de récupération",
                             "códigos de recuperación", "codici di recupero"), _shaped(_CODE, every=True), 400,
           re.compile(r"[.!?](?=\s|$)|\n\s*\n")),  # a list of codes, one a line, to a blank line
    _named("door_code", ("door code", "gate code", "alarm code", "entry code", "keypad code", "garage code",
                         "lock code", "lockbox code", "key safe", "safe code", "safe combination", "lock combination",
                         "building code", "digicode", "code de la porte", "türcode", "haustürcode", "tor-code",
                         "código de la puerta", "codice del portone"),
           _shaped(r"(?<![\w.])[#*]?(?:\d{3,8}|\d{1,2}(?:[- ]\d{1,2}){2,3})[#*]?(?![\w.])")),
    _named("security_answer", ("mother's maiden name", "mothers maiden name", "maiden name", "first pet",
                               "first pet's name", "security question", "security answer", "first car",
                               "childhood best friend", "city where i was born"),
           _shaped(r"^[^.!?\n]{0,40}?(?:\bis|\bwas|:|=)\s+(?P<v>[^\s.,;!?\n][^.,;!?\n]{1,39})")),
]


def _stated(text: str, low: str) -> Iterator[tuple[int, int, str]]:
    for rule in _STATED:
        if not any(w in low for w in rule.triggers):
            continue
        for word in rule.words.finditer(text):
            after = text[word.end():word.end() + rule.reach]
            stop = rule.end.search(after)
            for start, end in rule.value(after[:stop.start()] if stop else after):
                yield word.end() + start, word.end() + end, rule.kind


def _spans(text: str) -> Iterator[tuple[int, int, str]]:
    low = text.lower()
    seen: dict[str, bool] = {}  # several rules share a trigger: look for each once

    def triggered(triggers: tuple[str, ...]) -> bool:
        """Lower-case triggers match any case, others match exactly; no triggers: always run."""
        for t in triggers:
            if t not in seen:
                seen[t] = t in (low if t.islower() else text)
            if seen[t]:
                return True
        return not triggers

    for rule in _RULES:
        if triggered(rule.triggers) and (rule.gate is None or rule.gate(low)):
            yield from _matches(rule, text)
    yield from _bare_keys(text)
    yield from _checksummed(text)
    yield from _stated(text, low)
    for kind, triggers, plugin in _LIBRARY:
        if not triggered(triggers):
            continue
        # A hit is a regex's capture group when it has one: the delimiters around a value for some
        # plugins, only the prefix ("glpat") for others. So strip the first and extend to the token's end.
        for found in set(plugin.analyze_string(text)):
            value = found.strip(" \t\r\n\"'=:")
            start = text.find(value)
            while value and start >= 0:
                tail = _TOKEN_END.match(text, start + len(value))
                end = tail.end() if tail else start + len(value)
                yield start, end, kind
                start = text.find(value, end)
    if triggered(_GENERIC.triggers):
        yield from _matches(_GENERIC, text)


_GENERIC_KINDS = ("api_key", "secret")
PLACEHOLDER = re.compile(r"\[REDACTED: (\w+)\]")  # what redact() leaves


def redact(text: str, found: list[tuple[str, str]] | None = None) -> Redaction:
    """`text` with every detected secret replaced by `[REDACTED: kind]`, and the kinds found. `found`: what the
    maintained rule set found in a text that holds this one (scanned here when not given)."""
    done = [m.span() for m in PLACEHOLDER.finditer(text)]  # a placeholder is never redacted again
    spans = [s for s in (*_spans(text), *occurrences(text, leaked(text) if found is None else found))
             if not any(s[0] < end and start < s[1] for start, end in done)]
    merged: list[tuple[int, int, str]] = []  # overlapping spans become one, with the first one's kind
    for start, end, kind in sorted(spans, key=lambda s: (s[0], -s[1])):  # stable: rule order wins
        if merged and start < merged[-1][1]:  # one placeholder; a named kind wins over a generic one
            first = merged[-1][2]
            merged[-1] = (merged[-1][0], max(merged[-1][1], end),
                          kind if first in _GENERIC_KINDS and kind not in _GENERIC_KINDS else first)
        else:
            merged.append((start, end, kind))
    out, pos = [], 0
    for start, end, kind in merged:
        out += [text[pos:start], f"[REDACTED: {kind}]"]
        pos = end
        REDACTIONS.labels(kind).inc()
    out.append(text[pos:])
    return Redaction("".join(out), tuple(dict.fromkeys(kind for _, _, kind in merged)))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | dict):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _strings(item)


def redact_strings(value: Any) -> Any:
    """A JSON-like value (a formation job's payload) with every string in it redacted; the maintained rule
    set scans all of them in one call (its cost is mostly per call)."""
    found = leaked("\n".join(_strings(value)))

    def each(item: Any) -> Any:
        if isinstance(item, str):
            return redact(item, found).text
        if isinstance(item, list):
            return [each(i) for i in item]
        if isinstance(item, dict):
            return {key: each(i) for key, i in item.items()}
        return item

    return each(value)
