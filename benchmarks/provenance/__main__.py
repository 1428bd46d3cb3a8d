"""python -m benchmarks.provenance --split dev|test [--show] [--llm-url URL --llm-model M]: leaks and losses
of the provenance step.

Scores the text the memory model sees as the user's own: by default the deterministic rules alone,
memory_proxy.formation.evidence.own_words(message).text; with `--llm-url`, the whole provenance step of a
formation job, own_words then the provenance call (memory_proxy/formation/provenance.py) on that OpenAI-compatible
server (`json` mode: a grammar on llama.cpp), and the call's cost: calls, tokens, seconds per turn.
--show prints the failing rows and is refused for test: that split is read as counts only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections import Counter
from typing import Any

from benchmarks.provenance import SPLITS, load, score, table


async def _with_model(messages: list[str], url: str, model: str, timeout_s: float) -> tuple[dict[str, str], str]:
    """Each message's own words after the provenance call, and a line on what the calls cost."""
    import httpx
    from prometheus_client import REGISTRY

    from memory_proxy.formation.evidence import own_words
    from memory_proxy.formation.memory_llm import MemoryLLM
    from memory_proxy.formation.provenance import checked
    from memory_proxy.settings import MemoryLLMSettings

    def used(kind: str) -> float:
        return REGISTRY.get_sample_value("memory_proxy_llm_tokens_total", {"purpose": "provenance", "kind": kind}) or 0.0

    settings = MemoryLLMSettings(provider="openai", model=model, base_url=url, api_key="", mode="json",
                                 timeout_s=timeout_s, max_tokens=1024)
    texts: dict[str, str] = {}
    outcomes: Counter[str] = Counter()
    seconds: list[float] = []
    before = {kind: used(kind) for kind in ("prompt", "completion")}
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        llm = MemoryLLM(settings, client)
        for message in messages:
            started = time.perf_counter()
            result = await checked(llm, own_words(message))
            outcomes[result.outcome] += 1
            if result.outcome != "not_needed":
                seconds.append(time.perf_counter() - started)
            texts[message] = result.said.text
    called = len(seconds)
    spent = {kind: int(used(kind) - n) for kind, n in before.items()}
    cost = (f"provenance calls {called} of {len(messages)} turns ({dict(outcomes)}); tokens prompt "
            f"{spent['prompt']}, completion {spent['completion']}"
            + (f"; seconds per call median {statistics.median(seconds):.1f}, max {max(seconds):.1f}"
               if seconds else ""))
    return texts, cost


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.provenance", description=__doc__)
    parser.add_argument("--split", choices=SPLITS, default="dev")
    parser.add_argument("--show", action="store_true", help="print the failing rows (dev only)")
    parser.add_argument("--llm-url", help="score own_words then the provenance call on this server (…/v1)")
    parser.add_argument("--llm-model", default="qwen", help="the model name sent to --llm-url")
    parser.add_argument("--llm-timeout", type=float, default=300.0, help="seconds one call may take")
    args = parser.parse_args(argv)
    if args.show and args.split != "dev":
        parser.error("--show reads rows case by case, which is for dev only; test is read as counts")
    from memory_proxy.formation.evidence import own_words  # imported here: the corpus loads without the proxy

    cost = ""
    if args.llm_url:
        messages = [row["message"] for row in load(args.split)]
        texts, cost = asyncio.run(_with_model(messages, args.llm_url, args.llm_model, args.llm_timeout))
        result: dict[str, Any] = score(texts.__getitem__, args.split)
    else:
        result = score(lambda message: own_words(message).text, args.split)
    print(table(result))
    if cost:
        print(cost)
    for failure in result["failures"] if args.show else []:
        print(json.dumps(failure, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
