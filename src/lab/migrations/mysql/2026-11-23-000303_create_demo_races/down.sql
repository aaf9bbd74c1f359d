DROP TABLE demo_races;
