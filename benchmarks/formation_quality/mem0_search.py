"""mem0's search as the context of a question: texts stored verbatim, then `search(question)` per question.

Runs in mem0's venv (setup_mem0.sh), as mem0_runner.py does and with its configuration (mem0 2.2.1, Qdrant in
local mode, the project's local embedder served by embed_server.py, loopback only, no telemetry). No LLM is
called: `add(text, infer=False)` stores each text as it is, and search embeds the question.

    $MEM0_PY benchmarks/formation_quality/mem0_search.py --embed-base-url http://127.0.0.1:8082/v1 \\
        --input IN.json --out OUT.json     # IN: {"texts": [...], "questions": [...]}; OUT: {"found": [[...], ...]}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from mem0_runner import PROBE_THRESHOLD, PROBE_TOP_K, _loopback_only, mem0_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embed-base-url", required=True)
    parser.add_argument("--input", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.llm_base_url, args.llm_model = "http://127.0.0.1:9/v1", "unused"  # never called: infer=False
    given = json.loads(args.input.read_text())
    sys.addaudithook(_loopback_only)
    with tempfile.TemporaryDirectory(prefix="mem0-search-") as tmp:
        os.environ["MEM0_TELEMETRY"] = "false"
        os.environ["MEM0_DIR"] = str(Path(tmp) / "mem0-home")
        from mem0 import Memory

        memory = Memory.from_config(mem0_config(args, Path(tmp)))
        user = f"tm-{uuid.uuid4().hex[:12]}"
        for text in given["texts"]:
            memory.add(text, user_id=user, infer=False)
        found = [[hit["memory"] for hit in memory.search(q, filters={"user_id": user}, top_k=PROBE_TOP_K,
                                                          threshold=PROBE_THRESHOLD)["results"]]
                 for q in given["questions"]]
        memory.close()
        memory.vector_store.client.close()
    args.out.write_text(json.dumps({"found": found}, ensure_ascii=False))


if __name__ == "__main__":
    main()
