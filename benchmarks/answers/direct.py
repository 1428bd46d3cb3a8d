"""The systems a user could run instead of memory-proxy, each sent straight to the same chat model:

- `none`: the question alone;
- `whole`: the whole conversation in the system prompt, each session under its date, as a client with a long
  window would keep it; the oldest sessions left out when it does not fit (`fit`: how many sessions did);
- `raw`: raw-turn retrieval under a plain prompt: every message of both speakers stored verbatim, dated
  ("[8 May 2023] Caroline: …"), mem0's own `search(question, top_k=10)` over them (`add(infer=False)`: no LLM; the
  project's local embedder), under mem0's one-line answer prompt;
- `mem0`: mem0 2.2.1's `add` forms memories from each turn with the same model as memory model, then its search
  and prompt, as above (mem0_runner.py, formation_quality's; slow: ~2 minutes a turn on 2 cores).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import httpx

from ..formation_quality.embed_server import serve_in_background
from ..servers import ROOT
from .conversations import Conversation

MEM0_PROMPT = "You are a helpful AI. Answer the question based on query and memories.\nUser Memories:\n{memories}"
SETUP_MEM0 = ROOT / "benchmarks/formation_quality/setup_mem0.sh"


def none(conversation: Conversation, question: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": question}]


def whole_context(conversation: Conversation, budget_tokens: int, count: Any) -> tuple[str, int]:
    """The system prompt holding as many of the latest sessions as fit in `budget_tokens` (`count(text)`: the
    model's own token count), and how many sessions that is."""
    head = (f"You are {conversation.other}, talking with {conversation.user}, the user. Below is your whole "
            f"earlier conversation with them, each session under its date.\n\n")
    sessions = conversation.sessions
    for first in range(len(sessions)):
        kept = Conversation(conversation.id, conversation.user, conversation.other, sessions[first:], [])
        text = head + kept.transcript()
        if count(text) <= budget_tokens:
            return text, len(sessions) - first
    return head, 0


def with_system(system: str, question: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def raw_texts(conversation: Conversation) -> list[str]:
    return [f"[{s.at:%-d %B %Y}] {m.speaker}: {m.text}" for s in conversation.sessions for m in s.messages]


def mem0_python() -> str:
    done = subprocess.run(["bash", str(SETUP_MEM0)], check=True, capture_output=True, text=True)
    return done.stdout.strip().splitlines()[-1]


def raw_found(conversation: Conversation) -> list[list[str]]:
    """mem0's search results for each question over the raw messages."""
    with tempfile.TemporaryDirectory(prefix="answers-raw-") as tmp, serve_in_background() as embed:
        given, out = Path(tmp) / "in.json", Path(tmp) / "out.json"
        given.write_text(json.dumps({"texts": raw_texts(conversation),
                                     "questions": [q.asked for q in conversation.questions]}))
        subprocess.run([mem0_python(), str(ROOT / "benchmarks/formation_quality/mem0_search.py"),
                        "--embed-base-url", embed, "--input", str(given), "--out", str(out)], check=True)
        return list(json.loads(out.read_text())["found"])


def scenario_toml(conversation: Conversation) -> str:
    """The conversation as a formation_quality scenario user (its README's format), its questions asked."""
    def quoted(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    first = conversation.sessions[0].at
    lines = [f'[[user]]\nid = "{conversation.id}"\ncategory = "locomo"\nlang = "en"',
             f"questions = {quoted([q.asked for q in conversation.questions])}"]
    day = 0.0
    for session in conversation.sessions:
        day = round((session.at - first).total_seconds() / 86400, 4)
        for message, reply in session.turns(conversation.user):
            lines.append(f"[[user.turn]]\nday = {day}\nuser = {quoted(message.text)}\n"
                         f"assistant = {quoted(reply or 'OK.')}")
    lines.append(f"[user.probe]\nday = {day + 1}\nuser = {quoted(conversation.questions[0].asked)}")
    return "\n".join(lines) + "\n"


def mem0_found(conversation: Conversation, llm_base_url: str, llm_model: str, out: Path) -> list[list[str]]:
    """mem0's search results for each question over the memories its `add` formed from the user's turns."""
    users, result = out / f"{conversation.id}-mem0.toml", out / f"{conversation.id}-mem0.json"
    if not result.exists():
        users.write_text(scenario_toml(conversation))
        with serve_in_background() as embed:
            subprocess.run([mem0_python(), str(ROOT / "benchmarks/formation_quality/mem0_runner.py"),
                            "--users", str(users), "--llm-base-url", llm_base_url, "--llm-model", llm_model,
                            "--embed-base-url", embed, "--out", str(result)], check=True)
    return list(json.loads(result.read_text())["users"][0]["asked"])


def mem0_messages(found: list[str], question: str) -> list[dict[str, Any]]:
    return with_system(MEM0_PROMPT.format(memories="\n".join(f"- {m}" for m in found)), question)


def token_counter(base_url: str) -> Any:
    """The model server's own token count of a text (llama.cpp's /tokenize)."""
    def count(text: str) -> int:
        response = httpx.post(base_url.removesuffix("/v1") + "/tokenize", json={"content": text}, timeout=120)
        response.raise_for_status()
        return len(response.json()["tokens"])
    return count
