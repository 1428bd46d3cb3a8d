"""The memory LLM's settings (MEMORY_LLM_*), and the Mistral defaults the model providers share: the memory
LLM's provider and mode are read from the other settings when unset (a local upstream gets `json`, the
grammar a small model is held to), so their rules live here beside them."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from .declaration import Spec, Values, choice, env, positive_float, positive_int, url

MISTRAL_URL = "https://api.mistral.ai/v1"
MISTRAL_KEY = Spec("MISTRAL_API_KEY", "", "Mistral key: fallback for the upstream, embedding and "
                   "memory-LLM keys.")  # fills several fields: declared once


def provider_url(section: str) -> Callable[[Values], str]:
    """An `unset` rule: Mistral's URL for the `mistral` provider, the upstream's for `openai`."""
    return lambda values: MISTRAL_URL if values[f"{section}.provider"] == "mistral" else values["upstream.base_url"]


MEMORY_LLM_MODEL = "mistral-small-latest"


def on_this_network(base_url: str) -> bool:
    """Whether a server is reached on this machine or a private network (llama.cpp, Ollama, a compose
    service such as `http://ollama:11434`), not a hosted API: a deployment guard, read from the URL alone."""
    host = urlparse(base_url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost" or "." not in host or host.endswith((".local", ".internal", ".lan"))
    return address.is_loopback or address.is_private or address.is_link_local


def _memory_llm_mode(values: Values) -> str:
    """An `unset` rule: `json` (the schema as a grammar, what llama.cpp and Ollama constrain a small model
    with) for the upstream reached on this machine or network; `tools` for a hosted API (OpenAI, Mistral)."""
    local = values["memory_llm.provider"] == "upstream" and on_this_network(values["upstream.base_url"])
    return "json" if local else "tools"


def memory_llm_provider(parsed: Mapping[Spec, Any], fields: Mapping[str, Spec]) -> str:
    """MEMORY_LLM_PROVIDER when unset: `mistral` as soon as a memory LLM of its own is configured (its model,
    URL or key, or a Mistral key), else `upstream`: one server for a self-hoster, and formation reads with
    the model the user chose. Read from the parsed variables, which alone say what was set."""
    own = ("memory_llm.model", "memory_llm.base_url", "memory_llm.api_key")
    return "mistral" if any(parsed[fields[f]] for f in own) or parsed[MISTRAL_KEY] else "upstream"


@dataclass(frozen=True)
class MemoryLLMSettings:
    provider: str = env("MEMORY_LLM_PROVIDER", "", "`mistral` (mistralai SDK), `openai` (any "
        "OpenAI-compatible chat API) or `upstream` (`UPSTREAM_BASE_URL` with its key, and each turn's own "
        "model) for the formation calls. Default: `upstream` when no memory LLM is configured (none of "
        "`MEMORY_LLM_MODEL`, `MEMORY_LLM_BASE_URL`, `MEMORY_LLM_API_KEY`, `MISTRAL_API_KEY` set), else "
        "`mistral`.", choice("mistral", "openai", "upstream"))
    model: str = env("MEMORY_LLM_MODEL", "", f"Model that reads each turn for new facts about the user. With "
        f"`upstream`: the turn's own model, this one only for a job that names none. Default: "
        f"`{MEMORY_LLM_MODEL}`.", unset=lambda _: MEMORY_LLM_MODEL)
    base_url: str = env("MEMORY_LLM_BASE_URL", "", f"Memory LLM endpoint up to `/v1`. Default: "
        f"{MISTRAL_URL} for `mistral`, `UPSTREAM_BASE_URL` for `openai` and `upstream`.", url,
        unset=provider_url("memory_llm"))
    api_key: str = env("MEMORY_LLM_API_KEY", "", "Memory LLM key. Falls back to `MISTRAL_API_KEY`, then "
        "`UPSTREAM_API_KEY` (with `upstream`: to `UPSTREAM_API_KEY` only).", fallback=MISTRAL_KEY, unset=lambda values: values["upstream.api_key"], repr=False)
    mode: str = env("MEMORY_LLM_MODE", "", "How instructor asks for structured output: `tools`, "
        "`json_schema`, `json` (a JSON object constrained by the schema: llama.cpp, Ollama and most local "
        "servers) or `md_json`. Default: `json` for `upstream` on this machine or a private network "
        "(loopback, private address, a host name without a dot such as a compose service), else `tools`.",
        choice("tools", "json_schema", "json", "md_json"), unset=_memory_llm_mode)
    timeout_s: float = env("MEMORY_LLM_TIMEOUT", "60", "Seconds one memory-LLM call may take. A job "
        "whose call timed out is asked again with twice, then four times as long (a small model writing to "
        "MEMORY_LLM_MAX_TOKENS on a slow machine needs it every time); UPSTREAM_READ_TIMEOUT bounds a call too.",
        positive_float)
    max_tokens: int = env("MEMORY_LLM_MAX_TOKENS", "1024", "Most tokens one memory-LLM reply may take (an "
        "extraction needs ~400). A small model that never closes its JSON stops here, not at the timeout: the "
        "reply is then malformed and read as no answer.", positive_int)
