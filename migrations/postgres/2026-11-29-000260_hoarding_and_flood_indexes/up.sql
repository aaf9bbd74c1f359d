-- A hold counts the customer's holds of the last two hours or so (src/holds/service.rs,
-- MINE_LATELY: live ones, the last minute's, the last one of the product to end): this index
-- reads only those, however long the customer's history.
CREATE INDEX stock_holds_recent ON stock_holds (user_id, created_at);
-- Housekeeping deletes the holds that ran out (or ended) more than HOLD_HISTORY_DAYS ago, oldest
-- first, a few hundred at a time.
CREATE INDEX stock_holds_age ON stock_holds (expires_at);
-- A login counts its client address's failures across every account
-- (LOGIN_FAILURES_PER_CLIENT, src/auth/throttle.rs) before any hashing.
CREATE INDEX login_failures_client ON login_failures (address, failed_at);
