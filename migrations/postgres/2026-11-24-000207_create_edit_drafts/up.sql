-- What an editor had typed and not saved, kept for them (see src/edit_locks/drafts.rs): written
-- while they type (the editor's script, with its heartbeat), when their save is refused because
-- the lock was taken over or force-released, and offered back when they next open the editor.
-- One draft per user and locked record; `fields` is the form's input as JSON, unvalidated (it
-- may be half-typed); `why` says how it came to be kept.
-- PostgreSQL: lock_key compares byte by byte (COLLATE "C"), as under MySQL's ascii_bin.
CREATE TABLE edit_drafts (
    user_id BIGINT NOT NULL,
    lock_key VARCHAR(64) COLLATE "C" NOT NULL,
    fields TEXT NOT NULL,
    why VARCHAR(300) NOT NULL,
    saved_at TIMESTAMP(6) NOT NULL,
    PRIMARY KEY (user_id, lock_key),
    CONSTRAINT edit_drafts_user FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE
);
