DROP TABLE edit_locks;
