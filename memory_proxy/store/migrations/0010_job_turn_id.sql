-- 0010_job_turn_id: a turn's job is written once, however often it is sent. The outbox (memory_proxy/outbox.py)
-- holds a job whose write failed and writes it again later; when the write had committed and only its
-- answer was lost (PostgreSQL or PgBouncer restarting at that moment: benchmarks.cluster saw it in 3 of 6
-- fault runs), the second write made a second job of the same turn: a second memory-LLM call, and maybe a
-- paraphrase stored beside the first. Each turn's job now carries an id made when the turn ended; a write
-- of an id already there does nothing. NULL for jobs written without one (older spool files, tools).

ALTER TABLE memory_jobs ADD COLUMN turn_id uuid;
ALTER TABLE memory_jobs ADD CONSTRAINT memory_jobs_turn_id_key UNIQUE (turn_id);
