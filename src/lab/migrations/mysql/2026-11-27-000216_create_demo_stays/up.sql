-- Stays of several nights, one row per stay: the nights check_in … check_out − 1 of one demo
-- resource. On PostgreSQL the same table carries an exclusion constraint that lets no two stays
-- of a resource overlap, and the `exclusion-constraint` strategy books it with no lock at all.
-- MariaDB and MySQL have no exclusion constraint: here nothing but the application could keep
-- stays apart, so that strategy is refused on these servers, and the table has the same columns
-- only so that the lab's schema is one for both engines.
CREATE TABLE demo_stays (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    demo_resource_id BIGINT NOT NULL,
    check_in DATE NOT NULL,
    check_out DATE NOT NULL,
    client INT NOT NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    CONSTRAINT demo_stays_resource_fk FOREIGN KEY (demo_resource_id) REFERENCES demo_resources (id),
    CONSTRAINT demo_stays_one_night_at_least CHECK (check_out > check_in),
    INDEX demo_stays_by_resource (demo_resource_id, check_in)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
