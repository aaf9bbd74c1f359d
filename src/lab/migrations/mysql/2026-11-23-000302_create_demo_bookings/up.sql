-- Bookings made by demo races. `slot` is set only by the `unique-slot` strategy: the unique key
-- (resource, day, slot) then admits at most one row per place, and rows of the other strategies
-- (slot NULL) are not constrained at all, since a unique key ignores NULLs. The same key is the
-- index every strategy's count uses.
CREATE TABLE demo_bookings (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    demo_resource_id BIGINT NOT NULL,
    day DATE NOT NULL,
    client INT NOT NULL,
    slot INT NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    CONSTRAINT demo_bookings_resource_fk FOREIGN KEY (demo_resource_id) REFERENCES demo_resources (id),
    CONSTRAINT demo_bookings_one_per_slot UNIQUE (demo_resource_id, day, slot)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
