-- The fencing token of the `redis-lock-fenced` strategy: the highest token any holder of a Redis
-- lease on this resource has shown the database. A write carrying a lower one comes from a
-- holder whose lease expired and went to someone else, and is refused.
ALTER TABLE demo_resources ADD COLUMN fence BIGINT NOT NULL DEFAULT 0;
