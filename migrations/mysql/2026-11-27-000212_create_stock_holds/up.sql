-- Checkout holds (see src/holds/): a customer keeps `quantity` units of a product aside until
-- `expires_at`, read by the DATABASE clock. A hold is live while `ended` is NULL and `expires_at`
-- is still ahead; it ends as 'released' (given back) or 'used' (ordered, `order_id`). An expired
-- hold needs no sweeper: every reader compares `expires_at` with the database's clock, so it
-- stops counting the moment it expires. A hold is taken, and used, under its product's stock row
-- lock (`SELECT … FOR UPDATE` on stock_levels): available = on_hand - the live holds is decided
-- by one transaction at a time. `stock_holds_live` serves exactly that sum (a product's holds not
-- ended and not expired), however long the history grows.
CREATE TABLE stock_holds (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    product_id BIGINT NOT NULL,
    user_id BIGINT NOT NULL,
    quantity INT NOT NULL,
    created_at DATETIME(6) NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    ended VARCHAR(16) NULL,
    order_id BIGINT NULL,
    ended_at DATETIME(6) NULL,
    CONSTRAINT stock_holds_product_fk FOREIGN KEY (product_id) REFERENCES products (id),
    CONSTRAINT stock_holds_user_fk FOREIGN KEY (user_id) REFERENCES users (id),
    CONSTRAINT stock_holds_order_fk FOREIGN KEY (order_id) REFERENCES orders (id),
    CONSTRAINT stock_holds_quantity_positive CHECK (quantity > 0),
    CONSTRAINT stock_holds_times_ordered CHECK (created_at < expires_at),
    CONSTRAINT stock_holds_ended_known CHECK (ended IN ('released', 'used')),
    CONSTRAINT stock_holds_ended_when CHECK ((ended IS NULL) = (ended_at IS NULL)),
    CONSTRAINT stock_holds_order_when_used CHECK (order_id IS NULL OR ended = 'used'),
    INDEX stock_holds_live (product_id, ended, expires_at),
    INDEX stock_holds_by_user (user_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
