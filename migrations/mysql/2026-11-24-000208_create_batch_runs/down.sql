DROP TABLE price_revision_items;
DROP TABLE batch_runs;
