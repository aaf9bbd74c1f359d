DROP TABLE stock_movements;
