DROP TABLE stock_levels;
