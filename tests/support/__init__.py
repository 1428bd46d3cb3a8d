"""What the test modules share, by topic; fixtures are in tests/conftest.py. No test module imports another.

- data: paths, addresses, keys, users, routes and the fixed texts the tests talk about
- fakes: the outside world's replies (embeddings, completions, SSE streams) and OpenWebUI's inputs
- proxy: settings, requests to the proxy, and reading what it stored, counted or sent
- tools: an upstream scripted to call the memory tools, as JSON and as a stream
- servers: the app on a real uvicorn, `memory-proxy` and benchmark commands as processes, waiting for them
- secrets: the credential samples and the pieces of a secret that must not be stored
"""
