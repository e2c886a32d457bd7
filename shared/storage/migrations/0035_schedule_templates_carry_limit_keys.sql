-- A schedule's job template carries the submission's own limit keys (`name` or `name@N`, as written):
-- they were accepted and then dropped, so a template bounded to one at a time ran seven at once. Every
-- fire's job is bounded by them as a submission is; a template of a schedule made before keeps none.
ALTER TABLE schedules ADD COLUMN limit_keys text[] NOT NULL DEFAULT '{}';
