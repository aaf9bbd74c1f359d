-- Every instance of the app serving this database (src/admin/instances.rs), so that
-- /admin/metrics on any instance can say which one it shows and list the others.
--
-- An instance picks its `id` at start and writes its row every few seconds from its
-- housekeeping (`last_seen`, by the database's clock, with a small snapshot of its key metrics
-- as JSON); one not seen for a minute is shown as gone, and rows not seen for a day are deleted.
-- An instance that stops cleanly says so (`stopped_at`). A table of its own, written by nothing
-- else: no request's statements change.
CREATE TABLE app_instances (
    id VARCHAR(32) NOT NULL PRIMARY KEY,
    name VARCHAR(255) NOT NULL,
    version VARCHAR(64) NOT NULL,
    started_at DATETIME(6) NOT NULL,
    last_seen DATETIME(6) NOT NULL,
    stopped_at DATETIME(6) NULL,
    metrics TEXT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
