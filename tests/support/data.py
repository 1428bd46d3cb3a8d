"""Paths, addresses, keys, users, routes and the fixed texts the tests talk about."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory_proxy.job_payload import Message

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
DASHBOARD = ROOT / "grafana" / "dashboards" / "memory-proxy.json"
# Data the benchmarks measure on, read by tests too (by path: no test imports the benchmarks' code)
SCENARIOS = ROOT / "benchmarks" / "formation_quality"  # users.toml, holdout.toml, dev/, test/: the scripted users
SECRETS_CORPUS = ROOT / "benchmarks" / "secrets_corpus"  # built by tools/secrets_corpus.py, tools/django_words.py
LOOKALIKE_CORPUS = ROOT / "benchmarks" / "lookalike_corpus"  # built by tools/lookalike_corpus.py
PROSE_SECRETS = ROOT / "benchmarks" / "prose_secrets"  # dev.jsonl, test.jsonl
LOCOMO = ROOT / "benchmarks" / "locomo" / "locomo10.json"

# The outside world, faked by the `outside` fixture (respx routes)
UPSTREAM = "http://upstream.test/v1"
EMBEDDINGS = "http://embed.test/v1"
MEMORY_LLM = "http://llm.test/v1"
PROXY_KEY = "test-proxy-key-0123456789"
UPSTREAM_KEY = "upstream-secret-key"
EMBED_KEY = "embedding-secret-key"
MODEL = "mistral-embed"  # the embedding model the tests' memories are stored under
TEMPLATE_DB = "memory_proxy_template"  # migrated once per session, copied for every test

USER_A = "user-a"
USER_B = "user-b"
OUTSIDER = "user-c"  # in no team of the team tests

CHAT = "/v1/chat/completions"
API = "/api/v1"
TEAMS = "/api/v1/teams"

# Texts with a pre-generated vector in fixtures/embeddings.json: BUN is close to RUNTIME_Q, BERLIN is not.
# BUN_MSG is the user turn from which the formation tests have the fake memory LLM extract BUN.
BUN_MSG = "I'm a software engineer and I use Bun"
BUN = "User is a software engineer who uses Bun."
BERLIN = "User lives in Berlin."
RUNTIME_Q = "Which JavaScript runtime should I use for my next project?"
# The turn after BUN_MSG, from which the fake memory LLM extracts NODE, replacing BUN (`runtime_facts`).
NODE_MSG = "I switched from Bun to Node"
NODE = "User is a software engineer who uses Node."


def runtime_facts(message: str) -> list[Any]:
    """The fake memory LLM's extraction for BUN_MSG and NODE_MSG (FakeMemoryLLM.extract): BUN, then NODE replacing it."""
    return {BUN_MSG: [BUN], NODE_MSG: [{"fact": NODE, "replaces_text": BUN}]}.get(message, [])
# A team's memory holding three of RUNTIME_Q's five words (javascript, runtime, project): it qualifies by its words.
DENO = "The team's JavaScript runtime for every project is Deno."

# A formation job as the code before the versioned payload wrote it, copied from memory_jobs: no `version`, the
# earlier messages flattened into "role: text" lines (read by test_job_payload, test_outbox and test_worker).
OLD_PAYLOAD = {"user_message": "I'm a software engineer and I use Bun", "context": [
    "user: Which runtime should I pick for my side projects?",
    "assistant: Node is the safe choice; Bun is faster. What do you use today?"],
    "retrieved": [{"id": "v-1", "content": "User lives in Lyon."}], "assistant_reply": "Nice, Bun is fast."}
OLD_CONTEXT = (Message("user", "Which runtime should I pick for my side projects?"),
               Message("assistant", "Node is the safe choice; Bun is faster. What do you use today?"))
