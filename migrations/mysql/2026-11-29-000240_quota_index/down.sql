DROP INDEX reservations_future_by_user ON reservations;
