-- Pessimistic edit locks that outlive a request: a lock table with an owner and an expiry (see
-- docs/pessimistic-edit-lock.md). One row per locked thing: the primary key makes "two holders
-- of one key" unrepresentable. A lock is held by (owner_user_id, owner_session) while expires_at
-- is in the future by the DATABASE clock; an expired row is free to be taken over. held_by_batch
-- marks locks a batch job holds, which no admin may force-release.
-- PostgreSQL: the keys are compared and ordered byte by byte (COLLATE "C"), as under MySQL's
-- ascii_bin, so "locked in key order" is the same order on both. owner_user_id, a foreign key
-- that InnoDB would index by itself, gets its index here.
CREATE TABLE edit_locks (
    lock_key VARCHAR(64) COLLATE "C" NOT NULL PRIMARY KEY,
    owner_user_id BIGINT NOT NULL,
    owner_session VARCHAR(64) COLLATE "C" NOT NULL,
    acquired_at TIMESTAMP(6) NOT NULL,
    heartbeat_at TIMESTAMP(6) NOT NULL,
    expires_at TIMESTAMP(6) NOT NULL,
    held_by_batch BOOLEAN NOT NULL DEFAULT FALSE,
    CONSTRAINT edit_locks_owner_fk FOREIGN KEY (owner_user_id) REFERENCES users (id),
    CONSTRAINT edit_locks_times_ordered CHECK (acquired_at <= heartbeat_at AND heartbeat_at <= expires_at)
);
CREATE INDEX edit_locks_by_expiry ON edit_locks (expires_at);
CREATE INDEX edit_locks_by_owner ON edit_locks (owner_user_id);
