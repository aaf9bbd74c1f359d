-- One row per product, created by its first receipt (src/inventory/). UNSIGNED makes
-- "on_hand never below 0" a property of the column, not only of the code.
CREATE TABLE stock_levels (
    product_id BIGINT NOT NULL PRIMARY KEY,
    on_hand INT UNSIGNED NOT NULL,
    CONSTRAINT stock_levels_product_fk FOREIGN KEY (product_id) REFERENCES products (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
