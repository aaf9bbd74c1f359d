-- Pessimistic edit locks that outlive a request: a lock table with an owner and an expiry (see
-- docs/pessimistic-edit-lock.md). One row per locked thing: the primary key makes "two holders
-- of one key" unrepresentable. A lock is held by (owner_user_id, owner_session) while expires_at
-- is in the future by the DATABASE clock; an expired row is free to be taken over. held_by_batch
-- marks locks a batch job holds, which no admin may force-release.
CREATE TABLE edit_locks (
    lock_key VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    owner_user_id BIGINT NOT NULL,
    owner_session VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    acquired_at DATETIME(6) NOT NULL,
    heartbeat_at DATETIME(6) NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    held_by_batch BOOLEAN NOT NULL DEFAULT FALSE,
    CONSTRAINT edit_locks_owner_fk FOREIGN KEY (owner_user_id) REFERENCES users (id),
    CONSTRAINT edit_locks_times_ordered CHECK (acquired_at <= heartbeat_at AND heartbeat_at <= expires_at),
    INDEX edit_locks_by_expiry (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
