ALTER TABLE products DROP COLUMN listed;
