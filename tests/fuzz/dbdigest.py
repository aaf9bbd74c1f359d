"""A digest of every table of the fuzzed database, to prove that a refused request wrote nothing."""

import os
from urllib.parse import unquote, urlparse

import pymysql


def connect(url: str, database: str | None = None) -> pymysql.Connection:
    """A connection for a `mysql://user:password@host:port/database` URL."""
    u = urlparse(url)
    return pymysql.connect(
        host=u.hostname or "127.0.0.1",
        port=u.port or 3306,
        user=unquote(u.username or "root"),
        password=unquote(u.password or ""),
        database=database if database is not None else (u.path.lstrip("/") or None),
        autocommit=True,
    )


# Written by the server on a clock of its own, whatever the requests do: each instance's row of
# `app_instances`, its heartbeat every few seconds (src/admin/instances.rs). A request cannot
# change it, so leaving it out hides no write of a request.
WRITTEN_ON_A_CLOCK = {"app_instances"}


class Digest:
    """CHECKSUM TABLE over all of the database's tables but WRITTEN_ON_A_CLOCK, in one statement."""

    def __init__(self, url: str):
        self.conn = connect(url)
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE' ORDER BY table_name"
            )
            self.tables = [row[0] for row in cur.fetchall() if row[0] not in WRITTEN_ON_A_CLOCK]
        if not self.tables:
            raise RuntimeError(f"no tables in {url}: has the server migrated it?")
        self.statement = "CHECKSUM TABLE " + ", ".join(f"`{t}`" for t in self.tables)

    @classmethod
    def from_env(cls) -> "Digest":
        return cls(os.environ["FUZZ_DATABASE_URL"])

    def take(self) -> dict[str, int]:
        """Table name → checksum of its rows."""
        with self.conn.cursor() as cur:
            cur.execute(self.statement)
            return {name.split(".", 1)[-1]: checksum for name, checksum in cur.fetchall()}

    @staticmethod
    def diff(before: dict[str, int], after: dict[str, int]) -> list[str]:
        """The tables whose rows differ between two digests."""
        return sorted(t for t in before.keys() | after.keys() if before.get(t) != after.get(t))
