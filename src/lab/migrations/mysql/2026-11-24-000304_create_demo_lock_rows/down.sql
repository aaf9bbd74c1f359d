DROP TABLE demo_lock_rows;
