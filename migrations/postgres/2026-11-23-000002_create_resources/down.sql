DROP TRIGGER resources_touch_updated_at ON resources;
DROP FUNCTION resources_touch_updated_at();
DROP TABLE resources;
