DROP TABLE demo_stays;
