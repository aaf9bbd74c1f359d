-- The app's account. PROCESS and CONNECTION_ADMIN let the admin screen list named-lock holders
-- and end a stale holder's session (KILL); the test harness needs CREATE/DROP of databases.
CREATE USER IF NOT EXISTS 'haita'@'%' IDENTIFIED WITH mysql_native_password BY 'haita';
GRANT ALL PRIVILEGES ON *.* TO 'haita'@'%';
