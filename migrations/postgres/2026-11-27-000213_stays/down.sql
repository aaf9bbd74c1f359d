ALTER TABLE resources DROP CONSTRAINT resources_price_not_negative, DROP COLUMN price_cents;

-- The nights after the first of every stay are lost: each reservation keeps its check-in day.
DROP INDEX reservations_by_slot;
CREATE INDEX reservations_by_slot ON reservations (resource_id, day, status);
ALTER TABLE reservations DROP CONSTRAINT reservations_stay_nights, DROP COLUMN nights, DROP COLUMN check_out;
