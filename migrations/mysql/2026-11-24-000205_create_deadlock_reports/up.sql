-- Deadlocks our transactions lost, as InnoDB described them (the LATEST DETECTED DEADLOCK
-- section of SHOW ENGINE INNODB STATUS), kept for the admin screen (see src/deadlocks). One row
-- per event: several victims' requests may read the same section, and the fingerprint (its
-- SHA-256) is unique. `outcome` is what the retry did, added once known.
CREATE TABLE deadlock_reports (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    fingerprint CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    section MEDIUMTEXT NOT NULL,
    seen_by VARCHAR(64) NOT NULL,
    outcome VARCHAR(255) NULL,
    recorded_at DATETIME(6) NOT NULL,
    CONSTRAINT deadlock_reports_once UNIQUE (fingerprint)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
