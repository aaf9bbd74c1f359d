-- Stays of several nights (src/bookings/stays.rs, docs/stays.md). A reservation covers the
-- nights from `day`, its check-in day and first night, up to the night before `check_out`: the
-- half-open range [day, check_out). A booking of one day is a stay of one night
-- (check_out = day + 1 day), which is what every reservation made before this migration is.
--
-- A stay is at most 14 nights (bookings::model::MAX_NIGHTS), and the reads rely on it: the
-- reservations that cover night D are those with day between D - 13 days and D and check_out
-- after D, a bounded range of the slot index. The slot index gains check_out, so that count
-- reads the index alone.
ALTER TABLE reservations ADD COLUMN check_out DATE NULL AFTER day;

UPDATE reservations SET check_out = day + INTERVAL 1 DAY;

ALTER TABLE reservations
    MODIFY check_out DATE NOT NULL,
    ADD CONSTRAINT reservations_stay_nights CHECK (check_out > day AND check_out <= day + INTERVAL 14 DAY),
    DROP INDEX reservations_by_slot,
    ADD INDEX reservations_by_slot (resource_id, day, status, check_out);

-- How many nights: what the per-user quota counts (MAX_FUTURE_BOOKINGS_PER_USER), so that 30
-- stays of 14 nights cannot hold a whole year. Computed by the server, never written.
ALTER TABLE reservations ADD COLUMN nights INT GENERATED ALWAYS AS (DATEDIFF(check_out, day)) STORED AFTER check_out;

-- What a night costs, in hundredths of the shop's one currency (i18n::CURRENCY): a stay costs
-- its nights times this. 0 is free of charge (a meeting room, a lab bench).
ALTER TABLE resources
    ADD COLUMN price_cents BIGINT NOT NULL DEFAULT 0 AFTER capacity,
    ADD CONSTRAINT resources_price_not_negative CHECK (price_cents >= 0);
