-- 0019_job_timeouts: how many of a job's memory-LLM calls timed out. The worker gives its next call twice the time,
-- then four times (formation/memory_llm.py, `patience`), and only a timeout at four times spends an attempt: a small
-- model that writes to its token limit on a slow machine times out at the same length every time, and was retried
-- as "busy" for JOB_BUSY_MAX_SECONDS (an hour) while the user's later turns waited behind it.
ALTER TABLE memory_jobs ADD COLUMN timeouts integer NOT NULL DEFAULT 0;
