ALTER TABLE edit_locks DROP COLUMN epoch;
DROP TABLE edit_lock_epochs;
