DROP TABLE deadlock_reports;
