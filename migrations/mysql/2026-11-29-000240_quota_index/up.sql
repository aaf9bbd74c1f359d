-- The per-user quota sums the nights of the user's bookings not over yet (check_out after today;
-- src/bookings/service.rs, READ_DAY's `held`). By reservations_by_user (user_id, day) it read
-- every booking of the user from a fortnight ago on, each one's row for its status, check_out and
-- nights. Here the range ends where the user's future ends and the entry holds the nights: one
-- entry per booking not over yet, at most the quota (every booking holds a night at least),
-- and no row.
CREATE INDEX reservations_future_by_user ON reservations (user_id, status, check_out, nights);
