DROP TABLE app_instances;
