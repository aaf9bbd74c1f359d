-- No unique key can express "at most `capacity` confirmed rows per (resource, day)": that rule
-- is what the named lock haita:book:{resource}:{day} protects (src/bookings/service.rs).
-- The (resource_id, day, status) index serves the count taken under that lock.
CREATE TABLE reservations (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    resource_id BIGINT NOT NULL,
    user_id BIGINT NOT NULL,
    day DATE NOT NULL,
    status VARCHAR(16) NOT NULL DEFAULT 'confirmed',
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    cancelled_at DATETIME(6) NULL,
    CONSTRAINT reservations_resource_fk FOREIGN KEY (resource_id) REFERENCES resources (id),
    CONSTRAINT reservations_user_fk FOREIGN KEY (user_id) REFERENCES users (id),
    CONSTRAINT reservations_status_known CHECK (status IN ('confirmed', 'cancelled')),
    INDEX reservations_by_slot (resource_id, day, status),
    INDEX reservations_by_user (user_id, day)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
