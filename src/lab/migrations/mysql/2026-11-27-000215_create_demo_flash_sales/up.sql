-- One row per flash sale (src/lab/flash/): who started it, and its report as JSON once it has
-- ended, so that /demo on any instance shows the latest one.
--
-- One sale runs at a time across every instance on this database, since all of them sell to
-- the same buyer accounts: `running` is 1 while a sale runs and NULL once it has ended, and its
-- unique key lets only one row hold the 1 (NULLs never collide). A runner that dies leaves its
-- 1 behind; `lease_until`, read by the database's clock, says when the next start may take the
-- slot anyway.
CREATE TABLE demo_flash_sales (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    started_by VARCHAR(64) NOT NULL,
    running SMALLINT NULL UNIQUE,
    lease_until DATETIME(6) NOT NULL,
    report MEDIUMTEXT NULL,
    failure VARCHAR(500) NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    ended_at DATETIME(6) NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
