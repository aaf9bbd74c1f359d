-- Who did what to which lock (and which resource), newest first by id. Rows are written in the
-- same transaction as the change they describe, so the log never claims an action that rolled
-- back. actor_user_id is NULL for actions of the system itself.
CREATE TABLE audit_events (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    actor_user_id BIGINT NULL,
    action VARCHAR(40) NOT NULL,
    subject VARCHAR(100) NOT NULL,
    detail VARCHAR(1000) NOT NULL DEFAULT '',
    CONSTRAINT audit_events_actor_fk FOREIGN KEY (actor_user_id) REFERENCES users (id),
    INDEX audit_events_by_subject (subject, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
