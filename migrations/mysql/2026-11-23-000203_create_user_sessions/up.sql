-- One row per login. The session cookie names its row, and every authenticated request checks
-- that the row is still there: logging out deletes it, "log out everywhere" deletes all of a
-- user's rows, and deleting the user deletes them with it, so each takes effect on the next
-- request on every instance. The role is read from the user's row on each request as well.
CREATE TABLE user_sessions (
    id CHAR(43) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    user_id BIGINT NOT NULL,
    created_at DATETIME(6) NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    CONSTRAINT user_sessions_user_fk FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE,
    INDEX user_sessions_by_user (user_id),
    INDEX user_sessions_by_expiry (expires_at)
) ENGINE = InnoDB;
