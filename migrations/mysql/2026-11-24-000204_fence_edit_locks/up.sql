-- Fencing for edit locks: every acquisition of a lock (a new one, a takeover, a batch seizing it)
-- gets an epoch higher than any before it for that key, and a save must present the epoch its
-- editor was opened with. Owner and session alone cannot tell "the lock I opened the editor
-- under" from "a lock I took again later in another tab, after an admin ended the first".
--
-- Lock rows are deleted on release, so the last epoch of each key lives in a table of its own
-- that only ever grows by one per acquisition (under the key's named lock).
CREATE TABLE edit_lock_epochs (
    lock_key VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    last_epoch BIGINT NOT NULL
) ENGINE = InnoDB;

ALTER TABLE edit_locks ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0 AFTER owner_session;
