-- One row per race (one press of "Run" on /demo, or `haita demo race`): its report as JSON, so
-- the page can show the latest race on any instance and after a restart.
CREATE TABLE demo_races (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    started_by VARCHAR(64) NOT NULL,
    report MEDIUMTEXT NOT NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
