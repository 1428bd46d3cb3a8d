"""Fakes of the outside world for the test suite and the benchmarks: never imported by the proxy itself.

- `prompt_reader`: reads the memory LLM's formation prompts (which call, the user's message, the numbered facts).
- `fake_memory_llm`: `FakeMemoryLLM`, the one scripted memory LLM (a respx side effect or an ASGI app).
- `asgi`: the small ASGI and process helpers the fakes are served with.
- `fake_upstream`: a fast fake upstream and embedder server for load benchmarks
  (`python -m memory_proxy.testing.fake_upstream`).
"""
