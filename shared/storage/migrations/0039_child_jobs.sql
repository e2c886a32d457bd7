-- Child jobs: a job a handler spawned (ctx.spawn) names its parent. No foreign key: retention deletes a
-- parent on its own schedule, and a child outliving it keeps the id as a plain record of where it came
-- from. The children are created with the parent's fenced completion, in its transaction.
ALTER TABLE jobs ADD COLUMN parent_job_id uuid;

-- ListJobs(parent_job_id=…), newest first, as job_list pages; only spawned jobs are in it.
CREATE INDEX jobs_parent_idx ON jobs (parent_job_id, created_at DESC, job_id DESC) WHERE parent_job_id IS NOT NULL;
