DROP TABLE order_lines;
