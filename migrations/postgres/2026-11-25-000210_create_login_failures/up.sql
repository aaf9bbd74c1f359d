-- Failed logins, and logins being checked (see src/auth/throttle.rs): one row each, written
-- before the password is checked and deleted again if it was right, so a burst of guesses sent
-- at once is counted as it arrives. Every instance reads the same rows, so three instances give
-- an attacker one allowance, not three. `account` is the SHA-256 (hex) of the typed username
-- folded as the username column compares it, whether or not the account exists; `address` is
-- the client's IPv4 address or IPv6 /64. Rows older than LOGIN_FAILURE_WINDOW_SECS are deleted
-- as logins come (`login_failures_age`). `id` is random, chosen by the app.
-- PostgreSQL: both keys compare byte by byte (COLLATE "C"), as under MySQL's ascii_bin.
CREATE TABLE login_failures (
    id BIGINT NOT NULL,
    account CHAR(64) COLLATE "C" NOT NULL,
    address VARCHAR(64) COLLATE "C" NOT NULL,
    failed_at TIMESTAMP(6) NOT NULL,
    PRIMARY KEY (id)
);
CREATE INDEX login_failures_pair ON login_failures (account, address, failed_at);
CREATE INDEX login_failures_age ON login_failures (failed_at);
