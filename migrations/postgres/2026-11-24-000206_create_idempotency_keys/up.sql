-- Answers to requests that carried an Idempotency-Key (see src/idempotency). A row is written
-- in the same transaction as the booking or order it answers, so "booked" and "the answer is
-- stored" commit together or not at all. The primary key is per user: one user's key never
-- meets another's. `fingerprint` is the SHA-256 of what the request asked for: the same key
-- with another request is refused. `outcome` is the stored answer (JSON); it is NULL only
-- inside the claiming transaction, so no committed row lacks it.
-- PostgreSQL: BINARY(32) is BYTEA, held to 32 bytes by a CHECK (MySQL would pad a shorter
-- value; the app only ever writes a whole digest); the key compares byte by byte (COLLATE "C"),
-- as under MySQL's ascii_bin.
CREATE TABLE idempotency_keys (
    user_id BIGINT NOT NULL,
    idempotency_key VARCHAR(255) COLLATE "C" NOT NULL,
    fingerprint BYTEA NOT NULL,
    outcome TEXT NULL,
    created_at TIMESTAMP(6) NOT NULL,
    expires_at TIMESTAMP(6) NOT NULL,
    PRIMARY KEY (user_id, idempotency_key),
    CONSTRAINT idempotency_keys_user FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE,
    CONSTRAINT idempotency_keys_fingerprint_sha256 CHECK (octet_length(fingerprint) = 32)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
