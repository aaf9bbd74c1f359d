DROP TABLE demo_resources;
