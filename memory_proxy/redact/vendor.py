"""Credentials by their vendor's format, by our own patterns and detect-secrets' plugins: what the maintained
rule sets (memory_proxy/redact/betterleaks.py, memory_proxy/redact/kingfisher.py) miss or match too narrowly in chat text.

Library: three plugins of Yelp's detect-secrets (pure Python, offline, maintained; see _LIBRARY). Only their
`analyze_string` is used, so nothing is ever verified over the network.

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
- Webhook URLs (Discord, Teams): the path after the host goes, the host stays. HTTP basic credentials go when
  the base64 after "Basic" decodes to user:password. A private key pasted without its BEGIN/END lines goes
  when its base64 decodes to a DER sequence that opens with a version number (or is an OpenSSH key), with
  the lines that continue it.
- Other bare hex/base64 strings (git commit hashes short or long, UUIDs, checksums) stay: a value is redacted
  only when its format is a known credential or a key/token/secret/password word introduces it.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator

from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector

from .rule import NOT_REDACTED, QUOTED, TARGET, Rule, Span, Triggers, looks_random, random_key, utf8

_VENDOR_PREFIXES = ("hf_", "api_org_", "gsk_", "r8_", "npm_", "dop_v1_", "shp", "glc_", "xai-", "pplx-",
                    "gocspx-", "sq0", "dp.", "hvs.", "hvb.", "hvr.")

# Bare keys are first looked for as runs in the text's translated bytes: ~10× cheaper than a regex scan of
# the text, which then runs only where one may be.
_ALNUM = bytes(97 if chr(b).isascii() and chr(b).isalnum() else 32 for b in range(256))  # "a" and " "
_KEY_RUN = b" " + b"a" * 32 + b" "  # exactly 32 letters and digits
_BARE_KEY = re.compile(r"(?<![\w+/.-])[A-Za-z0-9]{32}(?![\w+/=]|[.-]\w)")

def _base64(value: str, size: int | None = None) -> bytes:
    """The bytes that `value` (or its first `size` characters, a multiple of 4) encodes; b"" if it is no base64."""
    value = "".join(value.split())[:size]
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except binascii.Error:
        return b""


def _user_password(value: str) -> bool:
    decoded = _base64(value)
    user, colon, password = decoded.partition(b":")
    return bool(colon and user and password and decoded.isascii() and decoded.decode().isprintable())


def _der_private_key(value: str) -> bool:
    if value.startswith("b3BlbnNzaC1rZXktdjE"):  # "openssh-key-v1"
        return True
    der = _base64(value, 16)
    if len(der) < 8 or der[0] != 0x30:  # a SEQUENCE
        return False
    at = 2 + (der[1] & 0x7F if der[1] & 0x80 else 0)  # after its length
    return der[at:at + 2] == b"\x02\x01" and der[at + 2] in (0, 1, 3)  # INTEGER version 0, 1 or 3


# Patterns begin with a literal or a small character class and check word boundaries only after it
# (a lookbehind): that lets the regex engine skip ahead, which is most of the speed. Each one catches, on the
# published samples, tests/fixtures/secrets.json or tests/redact/test_vendor.py, a secret (or names its kind) that
# the two maintained rule sets do not; GitHub's, Slack's and Google's patterns, which did not, are theirs.
RULES = [
    Rule("private_key", ("private key",), re.compile(
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|.*)", re.DOTALL)),
    Rule("private_key", ("putty-user-key-file-",), re.compile(  # .ppk: header to Private-MAC, or to the end
        r"PuTTY-User-Key-File-\d+:(?=.*?Private-Lines:)"
        r"(?:.*?Private-(?:MAC|Hash):[ \t]*[0-9a-fA-F]*|.*)", re.DOTALL)),
    Rule("connection_string", ("://",), re.compile(  # scheme://user:PASSWORD@host — only the password goes
        r"://[^\s:/@\[\]]*:(?P<v>(?!\[REDACTED)\S{1,256})@[^\s@/:?#]+"), "v"),
    Rule("jwt", ("eyj",), re.compile(r"eyJ(?<![\w-]eyJ)[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+")),
    Rule("aws_key", ("akia", "asia", "abia", "acca", "a3t"),
          re.compile(r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b")),
    Rule("aws_key", ("aws", "AKIA", "ASIA"), re.compile(  # secret access key: after "aws … secret", a key id
        r"[wWKS](?:(?i:(?<=aw)s)[\w\s'-]{0,30}?(?i:secret)|(?<=A[KS])IA[A-Z0-9]{16})[\w\s'\",;:=/-]{0,40}?"
        r"(?<![A-Za-z0-9+])(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"), "v", check=random_key),
    Rule("api_key", ("sk-",), re.compile(r"sk-(?<![\w-]sk-)[A-Za-z0-9_-]{20,}")),  # OpenAI, Anthropic
    Rule("api_key", ("k_live_", "k_test_", "whsec_"),  # Stripe
          re.compile(r"(?:[rs]k_(?:live|test)|whsec)_[0-9A-Za-z]{24,}\b")),
    # By prefix, in a sentence too (the rule sets want most of these after an assignment): Hugging Face, Groq,
    # Replicate, npm, DigitalOcean, Shopify, Grafana, xAI, Perplexity, Google OAuth client secrets, Square, Doppler,
    # Vault.
    Rule("api_key", ("_", "xai-", "pplx-", "gocspx-", "sq0", "dp.", "hvs.", "hvb.", "hvr."), re.compile(
        r"(?<![\w-])(?:hf_[A-Za-z0-9]{30,}|api_org_[A-Za-z0-9]{30,}|gsk_[A-Za-z0-9]{48,}|r8_[A-Za-z0-9]{30,}"
        r"|npm_[A-Za-z0-9]{36,}|dop_v1_[a-f0-9]{64}|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"
        r"|glc_[A-Za-z0-9+/]{32,}=*|xai-[A-Za-z0-9]{60,}|pplx-[A-Za-z0-9]{40,}|GOCSPX-[A-Za-z0-9_-]{24,}"
        r"|sq0(?:csp|atp)-[A-Za-z0-9_-]{22,43}|dp\.(?:st|sa|ct|pt|scim|audit)\.(?:[a-z0-9_-]{2,35}\.)?[A-Za-z0-9]{40,44}"
        r"|hv[sbr]\.[A-Za-z0-9_-]{24,})"
        r"(?![\w-])"),
          gate=lambda low: any(prefix in low for prefix in _VENDOR_PREFIXES)),
    Rule("api_key", ("_authtoken",), re.compile(r":_authToken=(?P<v>[^\s\"'`]+)")),  # .npmrc, a legacy token
    Rule("bearer_token", ("bearer",),
          re.compile(r"[bB](?i:earer)(?:\s+token)?(?:\s*:)?\s+(?P<v>[A-Za-z0-9._~+/-]{16,}=*)"), "v"),
    Rule("basic_auth", ("basic",), re.compile(  # HTTP basic credentials: base64 of user:password
        r"[bB](?i:asic)\s+(?P<v>[A-Za-z0-9+/]{6,}={0,2})(?![\w+/=])"), "v", check=lambda v: _user_password(v)),
    Rule("secret", ("otpauth://",), re.compile(  # a TOTP or HOTP seed in its provisioning URI
        r"(?<![\w/])otpauth://[^\s?]*\?(?:[^\s&#]*&)*?secret=(?P<v>[A-Za-z2-7]+=*)"), "v"),
    # Webhook URLs whose path is their secret: Discord's and Microsoft Teams' (Slack's: both rule sets).
    Rule("webhook", ("/api/webhooks/", "webhook"), re.compile(
        r"(?:discord(?:app)?\.com/api/webhooks/|\.webhook\.office\.com/webhookb2/"
        r"|outlook\.office(?:365)?\.com/webhook/)(?P<v>[\w@/.%+=-]{20,})"), "v"),
    # A signed URL's signature: Azure SAS and Logic Apps triggers, S3 and Cloud Storage presigned URLs.
    Rule("api_key", ("sig=", "signature="), re.compile(
        r"[?&](?:sig|X-Amz-Signature|X-Goog-Signature)=(?P<v>[A-Za-z0-9%+/=_-]{16,})"), "v"),
    # A private key without its armour: base64 of DER (a sequence that opens with its version number: PKCS#1,
    # PKCS#8, SEC 1, PKCS#12; public keys and certificates open with a sequence) or of an OpenSSH key, with
    # the lines that continue it.
    Rule("private_key", ("MI", "MH", "MG", "MF", "MD", "MC", "b3BlbnNzaC1rZXkt"), re.compile(
        r"(?<![A-Za-z0-9+/=])(?:M[IHGFDC]|b3BlbnNzaC1rZXktdjE)[A-Za-z0-9+/]{40,}={0,2}"
        r"(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/]{16,}={0,2})*"), check=lambda v: _der_private_key(v)),
]

# Generic: a random-looking value after key/token/secret/credentials (not ":secret:" in an AWS ARN).
# It runs after the library, so a specific kind wins an exact tie.
GENERIC = Rule("secret", ("key", "token", "secret", "credential"), re.compile(
    r"[kKcC](?i:(?<=k)(?<!:k)ey|(?<=tok)(?<!:tok)en|(?<=sec)(?<!:sec)ret|(?<=c)(?<!:c)redentials?)\b"
    + TARGET    + r"(?:\s*(?::=|[:=])\s*|\s+(?:is|was)\s+)" + NOT_REDACTED
    + r"(?:" + QUOTED + r"|(?P<v>[^\s\"'`,;&()<>\[\]{}]*[^\s\"'`,;&()<>\[\]{}.:!?]))"), check=looks_random)

# detect-secrets plugins for three formats that both maintained rule sets find only after an assignment in code
# ("token = ..."), not in a sentence ("my bot token is ..."): there the generic key rule would take the value
# but not name its kind. The other plugins were dropped: on the published samples, the prose corpus and
# tests/fixtures/secrets.json none caught a line that nothing else caught, and some (OpenAI's, JWT's) take
# quadratic time on a long run of their prefix.
_LIBRARY: list[tuple[str, tuple[str, ...], RegexBasedDetector]] = [
    ("api_key", ("-us",), MailchimpDetector()),
    ("discord_token", (".",), DiscordBotTokenDetector()),
    ("telegram_token", (":AA",), TelegramBotTokenDetector()),  # bot tokens are <id>:AA…
]


_TOKEN_END = re.compile(r"[\w+/=~-]*(?:\.[\w+/=~-]+)*")  # always matches; a final "." is punctuation


def library(text: str, triggers: Triggers) -> Iterator[Span]:
    """detect-secrets' findings. A hit is a regex's capture group when it has one: the delimiters around a
    value for some plugins, only the prefix ("glpat") for others. So strip the first and extend to the token's
    end."""
    for kind, words, plugin in _LIBRARY:
        if not triggers.any(words):
            continue
        for found in set(plugin.analyze_string(text)):
            value = found.strip(" \t\r\n\"'=:")
            start = text.find(value)
            while value and start >= 0:
                tail = _TOKEN_END.match(text, start + len(value))
                end = tail.end() if tail else start + len(value)
                yield start, end, kind
                start = text.find(value, end)


def bare_keys(text: str) -> Iterator[Span]:
    """Bare 32-character keys (Mistral's format, the default provider): random-looking, no name or hash."""
    raw = utf8(text)
    runs = b" " + raw.translate(_ALNUM) + b" "
    at = runs.find(_KEY_RUN)  # the padding makes `at` the run's offset in raw
    while at >= 0:
        start = len(raw[:at].decode(errors="surrogatepass"))
        if _BARE_KEY.match(text, start) and random_key(text[start:start + 32]):
            yield start, start + 32, "api_key"
        at = runs.find(_KEY_RUN, at + 33)

