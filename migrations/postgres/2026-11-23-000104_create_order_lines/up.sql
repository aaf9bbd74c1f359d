-- One line per product and order: duplicate lines in a request are merged before they get here.
-- PostgreSQL does not index a foreign key's column by itself as InnoDB does: product_id, which
-- does not lead the primary key, gets its index here.
CREATE TABLE order_lines (
    order_id BIGINT NOT NULL,
    product_id BIGINT NOT NULL,
    quantity INTEGER NOT NULL,
    unit_price_cents BIGINT NOT NULL,
    PRIMARY KEY (order_id, product_id),
    CONSTRAINT order_lines_order_fk FOREIGN KEY (order_id) REFERENCES orders (id),
    CONSTRAINT order_lines_product_fk FOREIGN KEY (product_id) REFERENCES products (id),
    CONSTRAINT order_lines_quantity_positive CHECK (quantity > 0)
);
CREATE INDEX order_lines_by_product ON order_lines (product_id);
