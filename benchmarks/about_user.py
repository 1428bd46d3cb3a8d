"""python -m benchmarks.about_user — how often the local embedder takes a question for one about the user as a whole
(memory_proxy/retrieval/about_user.py), on questions it must not take and on wordings it should.

- LoCoMo's questions (all ten conversations), asked in the first person as benchmarks/answers asks them: each is
  about one thing, so every one taken is a false positive (public data, not tuned on: the calibration was checked
  against them, never fitted to them);
- the formation benchmarks' probes (benchmarks/formation_quality: nine languages; two of them ask "What do you
  know about me?" and "What do you remember about me?"; their texts were read while calibrating);
- wordings written for this check, apart from the examples the module compares with (training data).
"""

from __future__ import annotations

import asyncio
import glob
import json
import tomllib

from memory_proxy.embedding.local_model import LocalEmbedder
from memory_proxy.retrieval.about_user import AboutUser

from .answers.conversations import case
from .servers import ROOT

WRITTEN = ["what info do you have on me", "Describe me based on our chats.", "What's in your memory about me?",
           "Give me a summary of my profile", "what do u know abt me", "Remind me what you know about my life.",
           "Erzähl mir, was du dir über mich gemerkt hast.", "Dime todo lo que recuerdas de mí.",
           "Qu'est-ce que tu as retenu sur moi ?", "Cosa ricordi di me?", "O que lembras de mim?",
           "Co pamiętasz o mnie?", "Что ты помнишь обо мне?", "私のことで覚えていることは？"]


def locomo_questions() -> list[str]:
    conversations = json.loads((ROOT / "benchmarks/locomo/locomo10.json").read_text())
    return [q.asked for c in conversations for q in case(c["sample_id"]).questions]


def probes() -> list[str]:
    found = []
    for path in sorted(glob.glob(str(ROOT / "benchmarks/formation_quality/**/*.toml"), recursive=True)):
        with open(path, "rb") as f:
            found += [u["probe"]["user"] for u in tomllib.load(f).get("user", []) if "probe" in u]
    return found


async def main() -> None:
    embedder = LocalEmbedder()
    about = AboutUser(embedder)
    for name, texts in (("LoCoMo questions (must not be taken)", locomo_questions()),
                        ("formation probes", probes()), ("written wordings (should be taken)", WRITTEN)):
        vectors = await embedder.embed(texts)
        taken = [t for t, v in zip(texts, vectors, strict=True) if await about.asks(v)]
        print(f"{name}: {len(taken)} of {len(texts)} taken")
        for text in taken if len(taken) < 20 else []:
            print(f"    {text}")


if __name__ == "__main__":
    asyncio.run(main())
