-- A product the catalog and the stock pages do not list, still sold by its id through the API:
-- the lab's flash sale sells throwaway products this way, so they never enter the real catalog.
-- Every product is listed unless made otherwise.
ALTER TABLE products ADD COLUMN listed BOOLEAN NOT NULL DEFAULT TRUE;
