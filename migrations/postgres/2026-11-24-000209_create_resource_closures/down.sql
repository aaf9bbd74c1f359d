DROP TABLE resource_closures;
