DROP INDEX login_failures_client ON login_failures;
DROP INDEX stock_holds_age ON stock_holds;
DROP INDEX stock_holds_recent ON stock_holds;
