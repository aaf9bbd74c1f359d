-- The ledger: every change of stock_levels.on_hand is one row here, in the same transaction, so
-- on_hand = SUM(delta) per product (invariant 3) can be checked at any time.
CREATE TABLE stock_movements (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    product_id BIGINT NOT NULL,
    delta INT NOT NULL,
    reason VARCHAR(16) NOT NULL,
    order_id BIGINT NULL,
    actor_user_id BIGINT NULL,
    at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    CONSTRAINT stock_movements_product_fk FOREIGN KEY (product_id) REFERENCES products (id),
    CONSTRAINT stock_movements_order_fk FOREIGN KEY (order_id) REFERENCES orders (id),
    CONSTRAINT stock_movements_actor_fk FOREIGN KEY (actor_user_id) REFERENCES users (id),
    CONSTRAINT stock_movements_delta_not_zero CHECK (delta <> 0),
    CONSTRAINT stock_movements_reason_known CHECK (reason IN ('receipt', 'order', 'adjustment')),
    INDEX stock_movements_by_product (product_id, at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
