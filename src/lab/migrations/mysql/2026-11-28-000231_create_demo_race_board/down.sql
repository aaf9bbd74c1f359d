DROP TABLE demo_race_board;
