"""Memory tools the chat model calls (MEMORY_TOOLS, docs/TOOLS.md): run by the proxy, never seen by the client.

- calls.py: `search_memory`, `remember`, `forget`: their definitions, the reading of a call, and its execution
  for the turn's user, behind formation's guards;
- rounds.py: a JSON turn's rounds with the upstream; streamed_rounds.py: a streamed turn's, read event by event;
- consent.py: what `remember` and `forget` may act on, as the memory model reads the user's own words;
- outbound.py: a call to the client's own tool after ours showed the model memories: sent, or withheld;
- text_calls.py: calls a small model wrote as text instead of `tool_calls`;
- refusals.py: the models whose upstream refused our tools lately, not offered them for a while.
"""
