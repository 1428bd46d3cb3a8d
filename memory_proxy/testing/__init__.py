"""Fakes of the outside world for the test suite and the benchmarks: never imported by the proxy itself.

- `prompts`: reads the memory LLM's formation prompts (which call, the user's message, the numbered facts).
- `memory_llm`: `FakeMemoryLLM`, the one scripted memory LLM (a respx side effect or an ASGI app).
- `asgi`: the small ASGI and process helpers the fakes are served with.
- `upstream`: a fast fake upstream and embedder server for load benchmarks
  (`python -m memory_proxy.testing.upstream`).
"""
