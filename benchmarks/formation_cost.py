"""What formation costs the server it runs on: memory-LLM calls and tokens per chat turn.

    python -m benchmarks.formation_cost [--mode json|tools] [--only id,id] [--out cost.json]

With no memory LLM configured, formation asks the chat upstream (MEMORY_LLM_PROVIDER=upstream): the user's
own server then answers these calls besides the chat. This runs the development users of the formation
benchmark (benchmarks/formation_quality: users.toml, holdout.toml and dev/; never the frozen test split) through a running
proxy exactly as `python -m benchmarks.formation_quality --llm oracle` does (the turn's real path: chat,
job, worker), the memory LLM being the oracle (each call answered with the turn's ideal answer: a perfect
model). Each formation call is recorded with the tokens a server would count, estimated with
memory_proxy.tokens.count_tokens (UTF-8 bytes / 3.5, a slight over-count for English): the prompt is every
message sent (instructor's `json` mode puts the schema in a message; in `tools` mode the tool definition
is counted too), the completion is the answer's JSON.

Reported per scripted turn (seeds, the probe and the questions are not turns): calls, prompt and completion
tokens, mean and p95; and per call by purpose (every call, the probe's and the questions' included). A real model may answer with more facts or relations than
the ideal and so make more calls (a relate per fact, a check per proposal): read these as the cost of the
pipeline when the model is right, not as a bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memory_proxy.testing.fake_memory_llm import FakeMemoryLLM
from memory_proxy.testing.prompt_reader import call_purpose
from memory_proxy.tokens import count_tokens

from .formation_quality import proxy_runner
from .formation_quality.scenarios import load_users, split_files


@dataclass
class CountingLLM(FakeMemoryLLM):
    """The scripted memory LLM, reporting in `usage` the tokens of each formation call, and keeping them."""

    recorded: list[dict[str, Any]] = field(default_factory=list)  # {"purpose", "prompt", "completion"}

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        reply = super().answer(body)
        purpose = call_purpose(body["messages"])
        if purpose is None:
            return reply
        message = reply["choices"][0]["message"]
        answered = message.get("content") or "".join(c["function"]["arguments"] for c in message.get("tool_calls", []))
        sent = sum(count_tokens(str(m.get("content") or "")) for m in body["messages"])
        if body.get("tools"):
            sent += count_tokens(json.dumps(body["tools"]))
        usage = {"prompt_tokens": sent, "completion_tokens": count_tokens(answered)}
        reply["usage"] = {**usage, "total_tokens": sum(usage.values())}
        self.recorded.append({"purpose": purpose, "prompt": sent, "completion": usage["completion_tokens"]})
        return reply


def spread(values: list[float]) -> dict[str, float]:
    """Mean, p50, p95 and max of `values` (zeros when there are none)."""
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}
    array = np.asarray(values, dtype=float)
    return {"mean": round(float(array.mean()), 2), "p50": float(np.percentile(array, 50)),
            "p95": float(np.percentile(array, 95)), "max": float(array.max())}


def summary(result: dict[str, Any], recorded: list[dict[str, Any]]) -> dict[str, Any]:
    turns = [t for user in result["users"] for t in user["turns"]]
    by_purpose: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for call in recorded:
        by_purpose[call["purpose"]].append(call)
    return {
        "users": len(result["users"]), "turns": len(turns), "calls": len(recorded),
        "errors": sum(len(user["errors"]) for user in result["users"]),
        "turns_without_a_call": sum(1 for t in turns if not t["llm_calls"]),
        "per_turn": {"calls": spread([t["llm_calls"] for t in turns]),
                     "prompt_tokens": spread([t["prompt_tokens"] for t in turns]),
                     "completion_tokens": spread([t["completion_tokens"] for t in turns])},
        "per_call": {purpose: {"calls": len(calls), "prompt_tokens": spread([c["prompt"] for c in calls]),
                               "completion_tokens": spread([c["completion"] for c in calls])}
                     for purpose, calls in sorted(by_purpose.items())},
    }


def markdown(figures: dict[str, Any], mode: str) -> str:
    lines = [f"{figures['users']} development users, {figures['turns']} turns, {figures['calls']} formation calls "
             f"(MEMORY_LLM_MODE={mode}; {figures['turns_without_a_call']} turns made none; "
             f"{figures['errors']} errors)", "", "| per turn | mean | p50 | p95 | max |", "|---|---|---|---|---|"]
    for name, values in figures["per_turn"].items():
        lines.append(f"| {name} | {values['mean']} | {values['p50']:g} | {values['p95']:g} | {values['max']:g} |")
    lines += ["", "| call | calls | prompt mean | prompt p95 | completion mean | completion p95 |",
              "|---|---|---|---|---|---|"]
    for purpose, values in figures["per_call"].items():
        prompt, completion = values["prompt_tokens"], values["completion_tokens"]
        lines.append(f"| {purpose} | {values['calls']} | {prompt['mean']} | {prompt['p95']:g} | "
                     f"{completion['mean']} | {completion['p95']:g} |")
    return "\n".join(lines)


async def measure(mode: str, only: set[str] | None, database_url: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    users = load_users(split_files("dev"), only=only)
    made: list[CountingLLM] = []

    def counting(*args: Any, **kwargs: Any) -> CountingLLM:
        made.append(CountingLLM(*args, **kwargs))
        return made[-1]

    scripted = proxy_runner.FakeMemoryLLM
    proxy_runner.FakeMemoryLLM = counting  # type: ignore[assignment,misc]  # the runner builds its fake with it
    try:
        with tempfile.TemporaryDirectory(prefix="formation-cost-") as logs:  # the proxy's log lines, apart
            result = await proxy_runner.run_proxy(users, llm_base_url=None, llm_mode=mode, oracle=True,
                                                  database_url=database_url, log_file=Path(logs) / "proxy.log")
    finally:
        proxy_runner.FakeMemoryLLM = scripted  # type: ignore[misc]
    return result, [call for llm in made for call in llm.recorded]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.formation_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", default="json", choices=["json", "tools"],
                        help="MEMORY_LLM_MODE (json: an upstream on this machine; tools: a hosted one)")
    parser.add_argument("--only", help="comma-separated user ids")
    parser.add_argument("--database-url", help="a migrated PostgreSQL (default: an embedded one)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = parser.parse_args(argv)
    result, recorded = asyncio.run(measure(args.mode, set(args.only.split(",")) if args.only else None,
                                           args.database_url))
    figures = summary(result, recorded)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1))
    print(markdown(figures, args.mode))


if __name__ == "__main__":
    main()
