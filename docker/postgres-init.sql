-- The app's role, with what the app needs and nothing more: the PostgreSQL counterpart of
-- mysql-init.sql. The postgres image runs this on its first start, connected to the `haita`
-- database (docker-compose.yml); tests/it/grants.rs runs the app with exactly these grants.
CREATE ROLE haita LOGIN PASSWORD 'haita';

-- Its own database: the rows, and the tables' shape (the app applies its migrations at start,
-- into the public schema, where PostgreSQL 15 lets only the database owner create by default).
GRANT CONNECT, TEMPORARY ON DATABASE haita TO haita;
GRANT USAGE, CREATE ON SCHEMA public TO haita;

-- The admin screen: pg_read_all_stats to see every role's sessions in pg_stat_activity (who
-- holds an advisory lock, since when, from where), pg_signal_backend to end a stale holder's
-- session (pg_terminate_backend) whichever role it belongs to, superusers excepted.
GRANT pg_read_all_stats, pg_signal_backend TO haita;
