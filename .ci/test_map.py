"""Every test file names the module it tests: `python .ci/test_map.py` (stdlib only; exit 1 on failure).

tests/test_<name>.py maps to memory_proxy/<name>.py, memory_proxy/<package>/<name>.py, the directory memory_proxy/<name>/
(a package, or the browser's static files), benchmarks/<name>.py or the package benchmarks/<name>/.
The few suites that test a behaviour of the whole app rather than one module are listed in CROSS_CUTTING,
each with its reason; an entry there wins over a name that happens to match (test_retrieval.py is not
benchmarks/retrieval.py's).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Suites about the whole app, not one module. Keep this short: a suite about one module takes its name.
CROSS_CUTTING = {
    "bad_input": "bad and odd input on every endpoint: the app's door as a whole (parser, limits, errors)",
    "captures": "real OpenWebUI traffic replayed through the whole proxy",
    "chat": "POST /v1/chat/completions end to end: auth, classify, retrieve, inject, relay, errors, health",
    "crash_recovery": "SIGKILL of a real `memory-proxy serve` process: jobs survive across worker, outbox, store",
    "dashboard": "grafana/dashboards/memory-proxy.json against a real Prometheus: a file, not a module",
    "deploy": "docker-compose.yml, the Dockerfile and Grafana provisioning: files, not modules",
    "fuzz": "hypothesis-generated requests on every endpoint",
    "isolation": "row-level security (db/migrations/0004) under every store module, on the app's own pool",
    "logs": "request ids (request_id.py) on every log line of the app, log formats and pseudonyms "
            "(observability.py)",
    "retrieval": "memory quality through the chat route: retrieve, search, rank, uses, restore, maintenance",
    "shutdown": "SIGTERM of a real `memory-proxy serve`: streams, jobs and the restart together",
    "streaming": "relay through a real uvicorn with the openai SDK: pipeline, upstream and SSE together",
    "team_isolation": "a team's memory on every path it could leak by: chat, tools, API, export, logs, metrics",
    "team_retrieval": "a user's teams' memories through the chat route: search, indexes, confirmation, inject",
}


def module_for(name: str) -> Path | None:
    """The module (or package) tests/test_<name>.py tests, by name; None when there is none."""
    proxy = ROOT / "memory_proxy"
    candidates = [proxy / f"{name}.py", *sorted(proxy.glob(f"*/{name}.py")), proxy / name,
                  ROOT / "benchmarks" / f"{name}.py", ROOT / "benchmarks" / name]
    return next((path for path in candidates if path.is_file() or path.is_dir()), None)


def main() -> int:
    names = sorted(path.stem.removeprefix("test_") for path in (ROOT / "tests").glob("test_*.py"))
    unmapped = [name for name in names if name not in CROSS_CUTTING and module_for(name) is None]
    stale = sorted(set(CROSS_CUTTING) - set(names))
    for name in unmapped:
        print(f"tests/test_{name}.py: no memory_proxy/{name}.py, memory_proxy/*/{name}.py, memory_proxy/{name}/, "
              f"benchmarks/{name}.py or benchmarks/{name}/; rename it after the module it tests, or add it to "
              f"CROSS_CUTTING in .ci/test_map.py with the reason it tests the whole app")
    for name in stale:
        print(f".ci/test_map.py: CROSS_CUTTING lists test_{name}.py, which does not exist: remove the entry")
    if unmapped or stale:
        return 1
    print(f"{len(names)} test files: {len(names) - len(CROSS_CUTTING)} map to a module, "
          f"{len(CROSS_CUTTING)} cross-cutting")
    return 0


if __name__ == "__main__":
    sys.exit(main())
