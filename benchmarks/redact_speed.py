"""What redaction costs a turn and at worst: `python -m benchmarks.redact_speed` (run it on a quiet machine).

- Typical: LoCoMo dialogue (benchmarks/locomo/locomo10.json) cut into 2 KB texts; ms per text for `redact()`
  whole, for our own detectors and Kingfisher (`found=[]`: no Betterleaks call) and for the Betterleaks call
  alone (memory_proxy/redact/betterleaks.py). Aim: ≤ 1 ms a 2 KB turn.
- Worst: 16,000 characters (a job's largest text) of one repeated pattern each, the trigger words and runs that
  cost the detectors most (every script's password words, digits, long tokens, prefixes, placeholders); ms for
  `redact(found=[])`, the best of 3, and the same for 4,000 characters: linear detectors take ~4× as long for
  4× the text. Aim: ≤ 50 ms each.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from memory_proxy.redact import betterleaks, redact, warm

LOCOMO = Path(__file__).parent / "locomo" / "locomo10.json"
WORST = ["kod ", "密码 ", "pw ", "pin ", "code: ", "password ", "password is abc def ghi ", "hasło to ", "пароль ",
         "κωδικός ", "passwort Ab1! ", "密码是Abc12345 ", "door code 1234 ", "recovery codes:\n1234 5678\n",
         "ssn 123-45-6789 ", "token ", "key=", "hello world ", "abandon ", "12345678901 ", "1234 ", "1",
         "4111 1111 1111 1111 ", "eyJ", "sk-", "aB3", "://a:b@", "-----BEGIN RSA PRIVATE KEY-----",
         "[REDACTED: password] ", "a@b.com x1y2z3 ", "MIIE", "otpauth://", "Basic ", "ABCD-", "1-", "a/b "]


def _texts() -> list[str]:
    data = json.loads(LOCOMO.read_text(encoding="utf-8"))
    turns = [turn["text"] for conversation in data for key, session in conversation["conversation"].items()
             if key.startswith("session_") and isinstance(session, list) for turn in session]
    texts, current = [], ""
    for turn in turns:
        current += turn + "\n"
        if len(current) >= 2000:
            texts.append(current[:2000])
            current = ""
    return texts


def _ms(call: Callable[[str], object], texts: list[str]) -> list[float]:
    times = []
    for text in texts:
        start = time.perf_counter()
        call(text)
        times.append((time.perf_counter() - start) * 1000)
    return times


def _best(text: str) -> float:
    return min(_ms(lambda t: redact(t, found=[]), [text] * 3))


def main() -> None:
    started = time.perf_counter()
    warm()
    print(f"warm-up (Kingfisher's catalog, first redaction): {time.perf_counter() - started:.2f} s\n")
    texts = _texts()
    print(f"typical: {len(texts)} texts of 2 KB of LoCoMo dialogue, ms per text")
    print("| call | mean | p50 | p99 |\n|---|---|---|---|")
    for name, call in (("redact()", redact), ("redact(found=[]): ours + Kingfisher", lambda t: redact(t, found=[])),
                       ("Betterleaks (betterleaks.leaked)", betterleaks.leaked)):
        times = sorted(_ms(call, texts))
        print(f"| {name} | {statistics.mean(times):.3f} | {times[len(times) // 2]:.3f} "
              f"| {times[int(len(times) * 0.99)]:.3f} |")
    print("\nworst: one pattern repeated, redact(found=[]) best of 3, ms")
    print("| pattern | 4,000 chars | 16,000 chars | ratio |\n|---|---|---|---|")
    worst = 0.0
    for unit in WORST:
        small, large = (_best((unit * (n // len(unit) + 1))[:n]) for n in (4000, 16000))
        worst = max(worst, large)
        print(f"| {unit!r} | {small:.1f} | {large:.1f} | {large / max(small, 1e-6):.1f} |")
    print(f"\nslowest 16,000-character text: {worst:.1f} ms")


if __name__ == "__main__":
    sys.exit(main())
