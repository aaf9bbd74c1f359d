-- The double-booking demo (src/lab/demo/) books only these throwaway resources, one fresh row per
-- strategy run, so the deliberately unsafe strategies can never touch real `resources` or
-- `reservations`. `parent-row-lock` locks this row with SELECT … FOR UPDATE.
CREATE TABLE demo_resources (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    strategy VARCHAR(32) NOT NULL,
    capacity INT NOT NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    CONSTRAINT demo_resources_capacity_positive CHECK (capacity >= 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
