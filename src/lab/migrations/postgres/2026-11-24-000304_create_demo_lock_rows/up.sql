-- The lock-table strategy (src/lab/locks/table.rs): a lock is a row, its name the primary key.
-- Whoever inserts the row holds the lock until `expires_at`, by the database's own clock; after
-- that anyone may delete it and insert their own. `owner` is the holder's random token: only
-- the row carrying it is deleted on release, so a holder whose lock expired cannot free the
-- lock of whoever took it over.
-- PostgreSQL: name and owner compare case-sensitively here (MySQL's utf8mb4_unicode_ci does
-- not); the app makes lock names lower-case and tokens random, so no two ever differ by case only.
CREATE TABLE demo_lock_rows (
    name VARCHAR(191) NOT NULL PRIMARY KEY,
    owner VARCHAR(64) NOT NULL,
    expires_at TIMESTAMP(6) NOT NULL
);
