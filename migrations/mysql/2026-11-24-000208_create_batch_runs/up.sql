-- Runs of batch jobs (see src/batch): what ran, under which guard and policy, and how far it got,
-- for the admin screen and for the runs after it.
CREATE TABLE batch_runs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    job VARCHAR(40) NOT NULL,
    policy VARCHAR(10) NOT NULL,
    params VARCHAR(200) NOT NULL,
    guard VARCHAR(200) NOT NULL,
    host VARCHAR(100) NOT NULL,
    pid INT UNSIGNED NOT NULL,
    status VARCHAR(10) NOT NULL,
    total INT NOT NULL DEFAULT 0,
    done INT NOT NULL DEFAULT 0,
    skipped INT NOT NULL DEFAULT 0,
    report VARCHAR(500) NULL,
    error VARCHAR(500) NULL,
    started_at DATETIME(6) NOT NULL,
    finished_at DATETIME(6) NULL,
    INDEX batch_runs_by_job (job, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

-- What a price revision did to each product: done once per revision, or skipped (its row was
-- locked by an online save when the run came by) and left for a later run of the same revision.
-- No foreign key to products, on purpose: checking it takes a shared lock on the product's row,
-- and recording "skipped" would then wait for the very lock that made the run skip it.
CREATE TABLE price_revision_items (
    revision VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    product_id BIGINT NOT NULL,
    status VARCHAR(10) NOT NULL,
    old_price_cents BIGINT NULL,
    new_price_cents BIGINT NULL,
    run_id BIGINT NOT NULL,
    at DATETIME(6) NOT NULL,
    PRIMARY KEY (revision, product_id),
    CONSTRAINT price_revision_items_run FOREIGN KEY (run_id) REFERENCES batch_runs (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
