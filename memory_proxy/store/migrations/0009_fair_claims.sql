-- 0009_fair_claims: the indexes of the fair claim (memory_proxy/store/jobs.py: claim). A worker takes only each
-- user's oldest queued job, and none of a user with a job running: both are looked up per user here,
-- so that a backlog of one user's thousand jobs costs a claim one index entry, not a sort of them all.

CREATE INDEX memory_jobs_queued_by_user ON memory_jobs (user_id, id) WHERE status = 'queued';
CREATE INDEX memory_jobs_running_by_user ON memory_jobs (user_id) WHERE status = 'running';
