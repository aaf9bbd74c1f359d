-- How a batch run ends and what it waits for, for the admin screen (see src/batch/runs.rs).
-- A run that left work for later ends 'incomplete' (status), with one row per reason in
-- batch_run_reasons: a code the page words in its language, what was left (a resource's name;
-- empty for products, which are counted), whose lock it was, and how many days or products.
-- While a run waits for an editor's lock, its row in batch_run_waits says whose lock on which
-- record, held since and until when, and when the run gives up; the row goes when the wait ends.
-- `request` holds the start form's fields as JSON, so the page can offer to run the same job
-- again for what is left.
ALTER TABLE batch_runs ADD COLUMN request TEXT NULL;

CREATE TABLE batch_run_reasons (
    run_id BIGINT NOT NULL,
    position INTEGER NOT NULL,
    code VARCHAR(40) NOT NULL,
    subject VARCHAR(200) NOT NULL,
    holder VARCHAR(200) NULL,
    items INTEGER NOT NULL,
    PRIMARY KEY (run_id, position),
    CONSTRAINT batch_run_reasons_run FOREIGN KEY (run_id) REFERENCES batch_runs (id)
);

CREATE TABLE batch_run_waits (
    run_id BIGINT NOT NULL PRIMARY KEY,
    lock_key VARCHAR(100) NOT NULL,
    holder VARCHAR(200) NOT NULL,
    lock_since TIMESTAMP(6) NOT NULL,
    lock_until TIMESTAMP(6) NOT NULL,
    began TIMESTAMP(6) NOT NULL,
    gives_up TIMESTAMP(6) NOT NULL,
    CONSTRAINT batch_run_waits_run FOREIGN KEY (run_id) REFERENCES batch_runs (id)
);
