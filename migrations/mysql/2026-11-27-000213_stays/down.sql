ALTER TABLE resources DROP CONSTRAINT resources_price_not_negative, DROP COLUMN price_cents;

-- The nights after the first of every stay are lost: each reservation keeps its check-in day.
ALTER TABLE reservations
    DROP INDEX reservations_by_slot,
    ADD INDEX reservations_by_slot (resource_id, day, status),
    DROP CONSTRAINT reservations_stay_nights,
    DROP COLUMN nights,
    DROP COLUMN check_out;
