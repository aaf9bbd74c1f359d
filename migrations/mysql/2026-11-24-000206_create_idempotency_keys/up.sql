-- Answers to requests that carried an Idempotency-Key (see src/idempotency). A row is written
-- in the same transaction as the booking or order it answers, so "booked" and "the answer is
-- stored" commit together or not at all. The primary key is per user: one user's key never
-- meets another's. `fingerprint` is the SHA-256 of what the request asked for: the same key
-- with another request is refused. `outcome` is the stored answer (JSON); it is NULL only
-- inside the claiming transaction, so no committed row lacks it.
CREATE TABLE idempotency_keys (
    user_id BIGINT NOT NULL,
    idempotency_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    fingerprint BINARY(32) NOT NULL,
    outcome TEXT NULL,
    created_at DATETIME(6) NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    PRIMARY KEY (user_id, idempotency_key),
    KEY idempotency_keys_expiry (expires_at),
    CONSTRAINT idempotency_keys_user FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
