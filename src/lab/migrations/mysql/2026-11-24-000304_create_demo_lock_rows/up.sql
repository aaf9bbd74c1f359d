-- The lock-table strategy (src/lab/locks/table.rs): a lock is a row, its name the primary key.
-- Whoever inserts the row holds the lock until `expires_at`, by the database's own clock; after
-- that anyone may delete it and insert their own. `owner` is the holder's random token: only
-- the row carrying it is deleted on release, so a holder whose lock expired cannot free the
-- lock of whoever took it over.
CREATE TABLE demo_lock_rows (
    name VARCHAR(191) NOT NULL PRIMARY KEY,
    owner VARCHAR(64) NOT NULL,
    expires_at DATETIME(6) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
