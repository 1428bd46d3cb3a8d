"""Every test file names what it tests, by its path: `python .ci/test_map.py` (stdlib only; exit 1 on failure).

tests/<dirs>/test_<name>.py tests memory_proxy/<dirs>/<name>.py, or the directory memory_proxy/<dirs>/<name>/ (a
package, or the memory page's static files): tests/chat/test_turn.py is memory_proxy/chat/turn.py's, and
tests/redact/test_redact.py is the package memory_proxy/redact/'s own (its __init__.py).
tests/benchmarks/test_<name>.py tests the harness benchmarks/<name>.py or benchmarks/<name>/ (run as a command).
tests/system/ holds the suites about the whole app rather than one module, each listed in SYSTEM with its reason.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

# Suites about the whole app, not one module. Keep this short: a suite about one module sits beside its path.
SYSTEM = {
    "bad_input": "bad and odd input on every endpoint: the app's door as a whole (parser, limits, errors)",
    "captures": "real OpenWebUI traffic replayed through the whole proxy",
    "chat": "POST /v1/chat/completions end to end: auth, classify, retrieve, inject, relay, errors, health",
    "crash_recovery": "SIGKILL of a real `memory-proxy serve` process: jobs survive across worker, outbox, store",
    "dashboard": "grafana/dashboards/memory-proxy.json against a real Prometheus: a file, not a module",
    "deploy": "docker-compose.yml, the Dockerfile and Grafana provisioning: files, not modules",
    "fuzz": "hypothesis-generated requests on every endpoint",
    "isolation": "row-level security (memory_proxy/store/migrations/0004) under every store module, on the app's pool",
    "logs": "request ids (http/request_id.py) on every log line of the app, log formats and pseudonyms "
            "(observability.py)",
    "retrieval": "memory quality through the chat route: retrieve, search, rank, uses, restore, maintenance",
    "shutdown": "SIGTERM of a real `memory-proxy serve`: streams, jobs and the restart together",
    "streaming": "relay through a real uvicorn with the openai SDK: chat turn, upstream and SSE together",
    "team_isolation": "a team's memory on every path it could leak by: chat, tools, API, export, logs, metrics",
    "team_retrieval": "a user's teams' memories through the chat route: search, indexes, confirmation, inject",
    "architecture": "docs/ARCHITECTURE.md's module map and layering rule against the package itself",
}


def tested_path(test: Path) -> Path | None:
    """What tests/…/test_<name>.py tests, by its path; None when that does not exist."""
    relative = test.relative_to(TESTS)
    name = relative.stem.removeprefix("test_")
    dirs = relative.parent.parts
    if dirs[:1] == ("benchmarks",):
        base = ROOT.joinpath("benchmarks", *dirs[1:])
    else:
        base = ROOT.joinpath("memory_proxy", *dirs)
    candidates = [base / f"{name}.py", base / name]
    if dirs and name == dirs[-1]:  # tests/store/test_store.py: the package's own __init__.py
        candidates.append(base / "__init__.py")
    return next((path for path in candidates if path.exists()), None)


def main() -> int:
    tests = sorted(TESTS.rglob("test_*.py"))
    system = {test.stem.removeprefix("test_") for test in tests if test.parent == TESTS / "system"}
    problems = [f"{test.relative_to(ROOT)}: tests nothing by its path (no {tested_hint(test)}); move it beside "
                f"the module it tests, or into tests/system/ listed in SYSTEM with its reason"
                for test in tests if test.parent != TESTS / "system" and tested_path(test) is None]
    problems += [f"tests/system/test_{name}.py: not in SYSTEM in .ci/test_map.py: add it with its reason"
                 for name in sorted(system - set(SYSTEM))]
    problems += [f".ci/test_map.py: SYSTEM lists tests/system/test_{name}.py, which does not exist: remove it"
                 for name in sorted(set(SYSTEM) - system)]
    print("\n".join(problems))
    if problems:
        return 1
    print(f"{len(tests)} test files: {len(tests) - len(system)} beside the module they test, {len(system)} system")
    return 0


def tested_hint(test: Path) -> str:
    relative = test.relative_to(TESTS)
    dirs = relative.parent.parts
    top = "benchmarks" if dirs[:1] == ("benchmarks",) else "memory_proxy"
    rest = dirs[1:] if top == "benchmarks" else dirs
    stem = "/".join([top, *rest, relative.stem.removeprefix("test_")])
    return f"{stem}.py or {stem}/"


if __name__ == "__main__":
    sys.exit(main())
