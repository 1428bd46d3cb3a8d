"""One chat turn, on the request: read it, find the user's memories, inject them, relay the reply, queue formation.

- turn.py: the turn, start to end (parse, classify, retrieve, inject, relay, enqueue);
- request.py: a chat turn of a known user, an OpenWebUI task, or anonymous; the readers of a request's messages;
- inject.py: the memories into the system prompt (prompts/inject.md), within the token budget;
- upstream.py: the connection to the upstream LLM (pooled clients, time bounds, errors); reply_reader.py: the
  assistant's text and calls read out of a streamed or JSON reply, bytes untouched;
- outbox.py: formation jobs written when the reply ends, held and spooled while the database is down;
- model_list.py: `GET /v1/models` that a busy upstream cannot break.
The memory tools' rounds, when offered, are in tools/; the memories come from retrieval/.
"""
