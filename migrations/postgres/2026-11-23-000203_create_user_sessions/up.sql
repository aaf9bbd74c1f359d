-- One row per login. The session cookie names its row, and every authenticated request checks
-- that the row is still there: logging out deletes it, "log out everywhere" deletes all of a
-- user's rows, and deleting the user deletes them with it, so each takes effect on the next
-- request on every instance. The role is read from the user's row on each request as well.
-- PostgreSQL: the id compares byte by byte (COLLATE "C"), as under MySQL's ascii_bin. It is a
-- VARCHAR, not a CHAR: a text parameter compared with a CHAR column cannot use its index.
CREATE TABLE user_sessions (
    id VARCHAR(43) COLLATE "C" NOT NULL PRIMARY KEY,
    user_id BIGINT NOT NULL,
    created_at TIMESTAMP(6) NOT NULL,
    expires_at TIMESTAMP(6) NOT NULL,
    CONSTRAINT user_sessions_user_fk FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE
);
CREATE INDEX user_sessions_by_user ON user_sessions (user_id);
CREATE INDEX user_sessions_by_expiry ON user_sessions (expires_at);
