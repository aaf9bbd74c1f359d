-- The app's account, with what the app needs and nothing more. The MySQL image runs this on its
-- first start (docker-compose.yml); tests/it/grants.rs runs the app with exactly these grants
-- (on MariaDB, which spells CONNECTION_ADMIN as CONNECTION ADMIN).
CREATE USER IF NOT EXISTS 'haita'@'%' IDENTIFIED WITH mysql_native_password BY 'haita';

-- Its own database: the rows, and the tables' shape (the app applies its migrations at start).
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP, REFERENCES ON `haita`.* TO 'haita'@'%';

-- The admin screen: PROCESS to see which session holds a named lock (every account's sessions
-- in the process list and the lock tables), CONNECTION_ADMIN to end a stale holder's session
-- (KILL) whichever account it belongs to, and on MySQL the lock tables of performance_schema.
GRANT PROCESS, CONNECTION_ADMIN ON *.* TO 'haita'@'%';
GRANT SELECT ON performance_schema.* TO 'haita'@'%';
