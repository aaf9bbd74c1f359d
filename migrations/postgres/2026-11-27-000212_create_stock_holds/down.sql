DROP TABLE stock_holds;
