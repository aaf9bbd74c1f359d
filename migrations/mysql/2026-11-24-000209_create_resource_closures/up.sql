-- Days a resource is closed (maintenance), set by the closure batch job (src/batch/closure.rs).
-- A booking reads its day's row here under the day's named lock and is refused on a closed day;
-- the closure is inserted under that same lock, so the two never interleave: every booking of a
-- closed day either committed before the closure (and is counted in `bookings_at_close`, and
-- listed in the run's report) or was refused.
CREATE TABLE resource_closures (
    resource_id BIGINT NOT NULL,
    day DATE NOT NULL,
    reason VARCHAR(200) NOT NULL,
    -- Confirmed bookings that day when it closed: they stand, and someone must tell their holders.
    bookings_at_close INT NOT NULL,
    run_id BIGINT NULL,
    closed_by BIGINT NOT NULL,
    closed_at DATETIME(6) NOT NULL,
    PRIMARY KEY (resource_id, day),
    CONSTRAINT resource_closures_resource FOREIGN KEY (resource_id) REFERENCES resources (id),
    CONSTRAINT resource_closures_run FOREIGN KEY (run_id) REFERENCES batch_runs (id),
    CONSTRAINT resource_closures_closer FOREIGN KEY (closed_by) REFERENCES users (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
