"""python -m benchmarks.formation_quality.gate — could a turn that states nothing new skip the memory LLM?

Issue 26 asks for no formation call on a turn that states nothing new, decided without an English word
list. This measures the two candidates it names, turn by turn, against the users' ideal answers (a turn
"states something" when its ideal answer has a fact or a forget request):

- `embedding`: the turn's sentences against lasting facts about a person (the example facts of
  memory_proxy/prompts/memory.md), with the proxy's local embedder; skip below a similarity threshold. No model call.
- `model`: one short yes/no call to the memory LLM ("does the message mention a fact about the user?"),
  the shared system prompt first (cached by llama.cpp), one token of answer; skip on "no".

    python -m benchmarks.formation_quality.gate --gate embedding                  # dev, ~1 min
    bash benchmarks/formation_quality/setup_llama.sh &                             # Qwen 1.5B, :8081
    python -m benchmarks.formation_quality.gate --gate model --llm http://127.0.0.1:8081/v1   # dev, ~15 min

A skipped turn that states something is a lost fact; a skipped turn that states nothing is a call
saved. `--split test` prints the counts only (the frozen split is not read case by case). Figures:
docs/BENCHMARKS.md §6.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from collections import Counter

import httpx
import numpy as np

from memory_proxy.embedding.local_model import LocalEmbedder
from memory_proxy.formation.evidence import own_words
from memory_proxy.formation.extract import neutral
from memory_proxy.formation.memory_llm import MemoryLLM
from memory_proxy.formation.resolve import Answer
from memory_proxy.prompts import load_prompt
from memory_proxy.settings import MemoryLLMSettings

from .scenarios import User, load_users, split_files

THRESHOLDS = (0.1, 0.15, 0.2, 0.25)
_SENTENCE_END = re.compile(r"(?<=[.!?。？！])\s*")
NOTICE = """TASK "notice": does the user's latest message mention any fact about the user themselves: who they are,
where they live, their job, family, pets, health, diet, tools, tastes, habits or plans? Facts are often
said in passing, inside a question or a request, in any language.
Examples:
- "my cat Miso keeps scratching the sofa, any tips?" → {{"answer": "yes"}}
- "what's a good podcast to learn italian?" → {{"answer": "no"}}
- "soy de Quito y trabajo de enfermera 😊" → {{"answer": "yes"}}
- "write a limerick about a frog" → {{"answer": "no"}}
Form: {{"answer": "yes"}} or {{"answer": "no"}}

Message:
<message>
{message}
</message>
Answer:"""


def _turns(users: list[User]) -> list[tuple[User, str, bool]]:
    """(user, own words, states something) for every turn with own words."""
    found = []
    for user in users:
        for turn in user.turns:
            said = own_words(turn.user).text
            if said:
                found.append((user, said, bool(turn.ideal or turn.forget or turn.forgets)))
    return found


def _by_embedding(turns: list[tuple[User, str, bool]]) -> dict[float, list[bool]]:
    """Per threshold, whether each turn would be skipped."""
    embedder = LocalEmbedder()
    anchors = np.array(embedder.embed_sync(re.findall(r'"(User [^"]+)"', load_prompt("memory.md"))))
    best = []
    for _, said, _ in turns:
        sentences = [s for s in _SENTENCE_END.split(said) if s.strip()] or [said]
        best.append(float((np.array(embedder.embed_sync(sentences)) @ anchors.T).max()))
    return {t: [b < t for b in best] for t in THRESHOLDS}


async def _by_model(turns: list[tuple[User, str, bool]], base_url: str, model: str) -> list[bool]:
    settings = MemoryLLMSettings(provider="openai", model=model, base_url=base_url, api_key="unused",
                                 mode="json", timeout_s=300, max_tokens=16)
    skipped = []
    async with httpx.AsyncClient(timeout=300) as http:
        llm = MemoryLLM(settings, http)
        for _, said, _ in turns:
            answer = await llm.structured(Answer, [
                {"role": "system", "content": load_prompt("memory.md")},
                {"role": "user", "content": NOTICE.format(message=neutral(said[:4000]))}], purpose="notice")
            skipped.append(answer.answer != "yes")
    return skipped


def _report(name: str, turns: list[tuple[User, str, bool]], skipped: list[bool], *, cases: bool) -> None:
    lost = Counter(u.lang for (u, _, states), skip in zip(turns, skipped, strict=True) if states and skip)
    saved = sum(1 for (_, _, states), skip in zip(turns, skipped, strict=True) if not states and skip)
    quiet = {u.id for u, _, _ in turns} - {u.id for u, _, states in turns if states}
    quiet_skipped = sum(1 for uid in quiet
                        if all(skip for (u, _, _), skip in zip(turns, skipped, strict=True) if u.id == uid))
    print(f"{name}: turns stating something skipped (facts lost) {sum(lost.values())} / "
          f"{sum(s for _, _, s in turns)} {dict(lost)}; turns stating nothing skipped (calls saved) {saved} / "
          f"{sum(not s for _, _, s in turns)}; users with nothing to store, every turn skipped "
          f"{quiet_skipped} / {len(quiet)}")
    if cases:
        for (user, said, states), skip in zip(turns, skipped, strict=True):
            if states and skip:
                print(f"  lost  {user.id}: {said[:100]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.formation_quality.gate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gate", choices=["embedding", "model"], action="append", required=True)
    parser.add_argument("--split", choices=["dev", "test"], default="dev")
    parser.add_argument("--llm", default="http://127.0.0.1:8081/v1", help="the memory LLM for --gate model")
    parser.add_argument("--model", default="local")
    args = parser.parse_args(argv)
    turns = _turns(load_users(split_files(args.split)))
    cases = args.split == "dev"  # the frozen test split: counts only
    if "embedding" in args.gate:
        for threshold, skipped in _by_embedding(turns).items():
            _report(f"embedding < {threshold}", turns, skipped, cases=False)
    if "model" in args.gate:
        _report("model", turns, asyncio.run(_by_model(turns, args.llm, args.model)), cases=cases)


if __name__ == "__main__":
    main()
