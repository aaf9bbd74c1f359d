DROP TABLE resources;
