-- The demo's race board (src/lab/demo/live.rs): one row, the cluster's one race slot and what
-- /demo shows of the race running now, so that a visitor on any instance sees a race started on
-- any other.
--
-- `holder` is the token of the race that holds the slot (NULL: free), taken by a conditional
-- UPDATE of this row, so one race runs at a time across every instance on this database. The
-- slot is a lease: its racer renews `lease_until` every few seconds, read by the database's
-- clock; a racer that dies leaves it behind, and once it has passed the next race (or reader)
-- frees the slot. `seq` counts up with every change: a reader that already shows `seq` reads
-- nothing more. `race` and `finished` are JSON: the race running now, and how the last one ended.
-- PostgreSQL: MEDIUMTEXT is TEXT.
CREATE TABLE demo_race_board (
    id SMALLINT NOT NULL PRIMARY KEY,
    seq BIGINT NOT NULL,
    holder VARCHAR(64) NULL,
    lease_until TIMESTAMP(6) NULL,
    race TEXT NULL,
    finished TEXT NULL
);

INSERT INTO demo_race_board (id, seq) VALUES (1, 0);
