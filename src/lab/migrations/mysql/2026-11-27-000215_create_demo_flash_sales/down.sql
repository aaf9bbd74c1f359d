DROP TABLE demo_flash_sales;
