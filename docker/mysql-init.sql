-- The app's account, with what the app needs and nothing more. The MySQL image runs this on its
-- first start (docker-compose.yml); tests/it/grants.rs runs the app with exactly these grants.
-- What each grant is for: docs/security.md, "The database account".
CREATE USER IF NOT EXISTS 'haita'@'%' IDENTIFIED WITH mysql_native_password BY 'haita';

-- Its own database: the rows, and the tables' shape (the app applies its migrations at start).
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP, REFERENCES ON `haita`.* TO 'haita'@'%';

-- The admin screen: PROCESS to see which session holds a named lock and whose it is (every
-- account's sessions in the process list, account and database), and on MySQL the lock tables of
-- performance_schema. No CONNECTION_ADMIN: the force release ends only sessions of this account
-- in its own database, which an account may always KILL, and another account's is refused (409).
GRANT PROCESS ON *.* TO 'haita'@'%';
GRANT SELECT ON performance_schema.* TO 'haita'@'%';
