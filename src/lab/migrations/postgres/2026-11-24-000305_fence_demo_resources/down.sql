ALTER TABLE demo_resources DROP COLUMN fence;
