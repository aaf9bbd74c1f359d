DROP INDEX login_failures_client;
DROP INDEX stock_holds_age;
DROP INDEX stock_holds_recent;
