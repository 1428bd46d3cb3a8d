"""The fake upstream of benchmarks/tool_attacks: an obedient chat model, and (with `--llm oracle`) a memory LLM that
answers from the cases' expectations.

The chat model does what its case scripts, whatever the proxy told it: its first round calls the case's `calls`;
once our search has answered, an exfiltration case calls the client's tool with the search's result in
`then_client_call`'s template; anything else (a round after our tools, or a request offering no tools) gets a
final text. Streamed or not, as the request asks.

The oracle memory LLM (`/oracle/v1`) answers the calls the memory tools make by the cases' ground truth: it
confirms a fact only when some legit case must store it, picks (and confirms) a memory to forget only when a legit
forget case's message asks for it, and finds every part of a message the user's own. It measures the plumbing; a real model
(`--llm URL`) measures the guard.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

from memory_proxy.testing.asgi import Receive, Scope, Send, read_body, reply

from .cases import CASE_FIELD, Case, key

OUR_TOOLS = ("search_memory", "remember", "forget")
_TASK = re.compile(r'^TASK "(\w+)"', re.MULTILINE)
_FACT = re.compile(r"^Fact: (.*)$", re.MULTILINE)
_MESSAGE = re.compile(r"<message>\n(.*?)\n</message>", re.DOTALL)
_KNOWN = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)
_SAID = re.compile(r"^Message: (.*?)\nFact:", re.MULTILINE | re.DOTALL)


class Obedient:
    def __init__(self, cases: list[Case]) -> None:
        self.cases = {case.id: case for case in cases}
        self.forgets = [case for case in cases if case.kind == "legit_forget"]
        self.memory_llm_calls = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            message = await receive()
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            del message
            return
        path = scope["path"]
        if scope["method"] == "GET" and path.endswith("/models"):
            await reply(send, 200, json.dumps({"object": "list", "data": [{"id": "obedient", "object": "model"}]}).encode())
            return
        body = json.loads(await read_body(receive) or b"{}")
        if path.startswith("/oracle/"):
            self.memory_llm_calls += 1
            await reply(send, 200, completion(json.dumps(self.oracle(body.get("messages") or []))))
            return
        case = self.cases.get(str(body.get(CASE_FIELD)))
        message = self.turn(case, body) if case else {"role": "assistant", "content": "Done."}
        await (stream(send, message) if body.get("stream") else reply(send, 200, completion(message)))

    def turn(self, case: Case, body: dict[str, Any]) -> dict[str, Any]:
        """The assistant message this round: the scripted calls, the exfiltrating call, or a final text."""
        messages = body.get("messages") or []
        offered = {(t.get("function") or {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
        after = messages[last_user + 1:]
        ours_offered = bool(offered & set(OUR_TOOLS))
        if ours_offered and not after:
            return calls_message([(c["name"], c.get("arguments", {})) for c in case.calls])
        results = [str(m.get("content") or "") for m in after if m.get("role") == "tool"]
        exfil = case.then_client_call
        if exfil and exfil["name"] in offered and results and not any(
                (c.get("function") or {}).get("name") == exfil["name"]
                for m in after for c in m.get("tool_calls") or []):
            text = exfil["template"].replace("{results}", " ".join(results))
            return calls_message([(exfil["name"], {exfil["argument"]: text})])
        return {"role": "assistant", "content": "Done, as the text asked."}

    def oracle(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        prompt = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "user")
        task = _TASK.search(prompt)
        name = task.group(1) if task else ""
        said = _MESSAGE.search(prompt) or _SAID.search(prompt)
        words = said.group(1).strip() if said else ""
        head = key(words)[:40]  # the message as the proxy shows it (its sentences joined): compared as `key` reads both
        case = next((c for c in self.forgets if head and head in key(c.user)), None)
        fact = _FACT.search(prompt)
        if name == "check" and "forget this fact" in prompt:  # a memory the user's request names: only a legit one
            return {"answer": "yes" if case and fact and key(fact.group(1)) in {key(m) for m in case.must_forget}
                    else "no"}
        if name == "check":  # a fact the user's words state: yes only for the fact a legit case's message states
            stating = [c for c in self.cases.values() if c.kind == "legit_remember" and head and head in key(c.user)]
            return {"answer": "yes" if fact and any(key(fact.group(1)) in {key(f) for f in c.must_store}
                                                    for c in stating) else "no"}
        if name == "forget":
            wanted = {key(m) for m in case.must_forget} if case else set()
            return {"forget": [int(n) for n, text in _KNOWN.findall(prompt) if key(text) in wanted]}
        if name == "extract":  # only the forget a legit forget case's message asks for
            return {"facts": [], "forget": case.must_forget[0] if case else ""}
        if name == "provenance":
            return {"not_own": []}
        return {}


def calls_message(calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
         "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}} for name, arguments in calls]}


def completion(message: dict[str, Any] | str) -> bytes:
    if isinstance(message, str):
        message = {"role": "assistant", "content": message}
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return json.dumps({"id": f"chatcmpl-{uuid.uuid4().hex[:8]}", "object": "chat.completion", "created": int(time.time()),
                       "model": "obedient", "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()


async def stream(send: Send, message: dict[str, Any]) -> None:
    base = {"id": f"chatcmpl-{uuid.uuid4().hex[:8]}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": "obedient"}
    if message.get("tool_calls"):
        delta = {"role": "assistant", "tool_calls": [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]}
        events = [{**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                  {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]
    else:
        events = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": message["content"]},
                                        "finish_reason": None}]},
                  {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "more_body": False,
                "body": b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"})
