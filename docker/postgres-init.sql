-- The app's role, with what the app needs and nothing more: the PostgreSQL counterpart of
-- mysql-init.sql. The postgres image runs this on its first start, connected to the `haita`
-- database (docker-compose.yml); tests/it/grants.rs runs the app with exactly these grants.
-- What each grant is for: docs/security.md, "The database account".
CREATE ROLE haita LOGIN PASSWORD 'haita';

-- Its own database: the rows, and the tables' shape (the app applies its migrations at start,
-- into the public schema, where PostgreSQL 15 lets only the database owner create by default).
GRANT CONNECT, TEMPORARY ON DATABASE haita TO haita;
GRANT USAGE, CREATE ON SCHEMA public TO haita;

-- The admin screen needs no grant: pg_locks and every session's role and database in
-- pg_stat_activity are visible to any role, and the force release ends only sessions of this
-- role in this database, which a role may always end (pg_terminate_backend). So neither
-- pg_signal_backend (which would let it end any role's session) nor pg_read_all_stats (other
-- roles' queries, addresses and states) is granted, and another role's session is refused (409).

-- The lab's `exclusion-constraint` strategy (DEMO_MODE only) needs btree_gist for its table's
-- EXCLUDE constraint. Creating an extension takes CREATE on the database, which this role is
-- not given; created here once, the lab's migration finds it and goes on.
CREATE EXTENSION IF NOT EXISTS btree_gist;
