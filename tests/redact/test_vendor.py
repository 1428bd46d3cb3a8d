"""Vendor formats that the maintained rule sets miss in chat text (memory_proxy/redact/vendor.py): our own examples, with
values made up here (a seeded generator), never a real credential."""

from __future__ import annotations

import base64
import random
import string

import pytest

from memory_proxy.redact import redact

_RNG = random.Random(33)
_B64 = string.ascii_letters + string.digits + "+/"


def _random(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


def _guid() -> str:
    return "-".join(_random(n, "0123456789abcdef") for n in (8, 4, 4, 4, 12))


DISCORD_TOKEN = _random(68, string.ascii_letters + string.digits + "_-")
TEAMS_PATH = f"{_guid()}@{_guid()}/IncomingWebhook/{_random(32, '0123456789abcdef')}/{_guid()}"
BASIC = base64.b64encode(b"deploy:" + _random(14).encode()).decode()
TOTP = "JBSWY3DPEHPK3PXPQ7RZ4T2W"
RSA_DER = "MIIEpAIBAAKCAQEA" + _random(120, _B64)
PKCS8_DER = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC" + _random(40, _B64)
OPENSSH = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW" + _random(80, _B64)

FOUND = [  # (text, the secret that must go, its kind)
    (f"alerts: https://discord.com/api/webhooks/1203948571203948571/{DISCORD_TOKEN}", DISCORD_TOKEN, "webhook"),
    (f"the teams hook is https://contoso.webhook.office.com/webhookb2/{TEAMS_PATH} ok", TEAMS_PATH, "webhook"),
    (f"old one: https://outlook.office.com/webhook/{TEAMS_PATH}", TEAMS_PATH, "webhook"),
    (f"curl -H 'Authorization: Basic {BASIC}' https://api.example.com", BASIC, "basic_auth"),
    (f"the header was authorization: basic {BASIC}", BASIC, "basic_auth"),
    (f"otpauth://totp/Example:alice@example.com?secret={TOTP}&issuer=Example", TOTP, "secret"),
    (f"my 2fa seed: otpauth://totp/GitHub:bob?issuer=GitHub&secret={TOTP}", TOTP, "secret"),
    (f"the key body, no header: {RSA_DER}", RSA_DER, "private_key"),
    (f"private key:\n{PKCS8_DER}\n{_random(64, _B64)}\n{_random(40, _B64)}==", PKCS8_DER, "private_key"),
    (f"{OPENSSH} (my ed25519 key)", OPENSSH, "private_key"),
    (f"SAS url https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&sp=r&sig={_random(43)}%3D",
     None, "api_key"),
    (f"vault: hvs.{_random(24)} expires tonight", None, "api_key"),
    (f"doppler token dp.st.prd.{_random(43)}", None, "api_key"),
    (f"npmrc: //registry.npmjs.org/:_authToken={_guid()}", None, "api_key"),
]


@pytest.mark.parametrize(("text", "secret", "kind"), FOUND, ids=[f[0][:32] for f in FOUND])
def test_a_vendor_format_goes_and_is_named(text: str, secret: str | None, kind: str) -> None:
    result = redact(text)
    assert kind in result.kinds, result.text
    if secret is not None:
        assert secret[:12] not in result.text and secret[-12:] not in result.text


def test_a_webhook_keeps_its_host_and_a_multiline_key_loses_every_line() -> None:
    result = redact(FOUND[0][0])
    assert result.text == "alerts: https://discord.com/api/webhooks/[REDACTED: webhook]"
    text = FOUND[8][0]
    assert redact(text).text == "private key:\n[REDACTED: private_key]"


@pytest.mark.parametrize("text", [
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJRTESMBAGA1UE\n"
    "-----END CERTIFICATE-----",  # a certificate: a sequence of sequences, no version number first
    "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0",
    "the basic plan costs 10 dollars",  # "basic" and no base64 of user:password
    "Basic auth is off: Basic realm=api",
    "https://discord.com/channels/1203948571203948571/1203948571203948572",  # a channel link, no webhook
    "MIT license, MIDI files, MHz bands",
])
def test_look_alikes_of_those_formats_stay(text: str) -> None:
    assert not redact(text).redacted
