DROP TABLE batch_run_waits;
DROP TABLE batch_run_reasons;
ALTER TABLE batch_runs DROP COLUMN request;
