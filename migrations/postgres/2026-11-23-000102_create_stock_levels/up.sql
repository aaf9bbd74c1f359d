-- One row per product, created by its first receipt (src/inventory/).
-- PostgreSQL has no UNSIGNED: the CHECK makes "on_hand never below 0" a property of the table,
-- not only of the code, as INT UNSIGNED does in MySQL.
CREATE TABLE stock_levels (
    product_id BIGINT NOT NULL PRIMARY KEY,
    on_hand INTEGER NOT NULL,
    CONSTRAINT stock_levels_product_fk FOREIGN KEY (product_id) REFERENCES products (id),
    CONSTRAINT stock_levels_on_hand_not_negative CHECK (on_hand >= 0)
);
