-- `version` is the optimistic-lock counter: every save runs
-- UPDATE … SET version = version + 1 WHERE id = ? AND version = ? (src/catalog/).
CREATE TABLE products (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    sku VARCHAR(32) NOT NULL,
    name VARCHAR(200) NOT NULL,
    description TEXT NOT NULL,
    price_cents BIGINT NOT NULL,
    version INT NOT NULL DEFAULT 1,
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_by BIGINT NULL,
    CONSTRAINT products_sku_unique UNIQUE (sku),
    CONSTRAINT products_updated_by_fk FOREIGN KEY (updated_by) REFERENCES users (id),
    CONSTRAINT products_price_not_negative CHECK (price_cents >= 0),
    CONSTRAINT products_version_positive CHECK (version >= 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
