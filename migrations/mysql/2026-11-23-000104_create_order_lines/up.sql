-- One line per product and order: duplicate lines in a request are merged before they get here.
CREATE TABLE order_lines (
    order_id BIGINT NOT NULL,
    product_id BIGINT NOT NULL,
    quantity INT NOT NULL,
    unit_price_cents BIGINT NOT NULL,
    PRIMARY KEY (order_id, product_id),
    CONSTRAINT order_lines_order_fk FOREIGN KEY (order_id) REFERENCES orders (id),
    CONSTRAINT order_lines_product_fk FOREIGN KEY (product_id) REFERENCES products (id),
    CONSTRAINT order_lines_quantity_positive CHECK (quantity > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
