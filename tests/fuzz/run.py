"""The API fuzzer: every operation of /api/v1/openapi.json, as every kind of caller.

    python tests/fuzz/run.py --binary target/debug/haita

Starts the server on a database of its own (`<database>_fuzz`, dropped and created fresh, with
the demo data), then sends, one request at a time:

1. Schemathesis, driven by the document, once per identity (admin, staff, customer, nobody):
   valid values, boundary values and values the schema forbids (wrong types, missing and extra
   fields, huge numbers, odd strings), in its examples, coverage and fuzzing phases.
2. The envelope pass (`envelope.py`): what Schemathesis does not vary, for every operation:
   wrong and missing content types, malformed and oversized JSON, no session, a forged session,
   the wrong role, hostile path and query values.

The run fails on any 5xx, any dropped connection, any answer the document does not describe,
any refused request (4xx) that changed a table, a panic in the server's log, or fewer requests
than promised. Same seed, same requests: FUZZ_SEED (default fixed) and FUZZ_EXAMPLES (cases per
operation and phase; FUZZ_LONG=1 raises it tenfold) choose the run.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from dbdigest import connect  # noqa: E402
import envelope  # noqa: E402

DEFAULT_SEED = 20261123
MIN_REQUESTS = 5000
# (identity, username, password): the demo accounts that DEMO_MODE seeds.
IDENTITIES = [
    ("admin", "admin", "admin-demo"),
    ("staff", "carol", "carol-demo"),
    ("customer", "alice", "alice-demo"),
    ("nobody", None, None),
]
COOKIE = "haita_session"


def main() -> int:
    args = parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    seed = int(os.environ.get("FUZZ_SEED", DEFAULT_SEED))
    examples = int(os.environ.get("FUZZ_EXAMPLES", 40))
    if os.environ.get("FUZZ_LONG") == "1":
        examples *= 10

    if "DATABASE_URL" not in os.environ:
        raise SystemExit("DATABASE_URL is not set (scripts/dev fuzz sets it)")
    fuzz_url = fresh_database(os.environ["DATABASE_URL"])
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = out / "server.log"
    server = start_server(args.binary, fuzz_url, port, log_path)
    try:
        wait_until_up(base, server, log_path)
        cookies = {name: log_in(base, user, password) for name, user, password in IDENTITIES}
        count_file = out / "requests"
        failed = []
        for name, _, _ in IDENTITIES:
            say(f"schemathesis as {name} (seed {seed}, {examples} cases per operation and phase)")
            if not schemathesis(base, fuzz_url, name, cookies[name], seed, examples, count_file, out):
                failed.append(f"schemathesis as {name}")
        say("envelope pass: content types, bodies, sessions, roles, hostile parameters")
        result = envelope.run(base, fuzz_url, cookies)
        for problem in result.problems:
            print(f"  FAIL {problem}")
        if result.problems:
            failed.append(f"envelope pass ({len(result.problems)} problems)")
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()

    log = log_path.read_text(encoding="utf-8", errors="replace")
    if "panicked" in log:
        failed.append(f"the server panicked; see {log_path}")
    counts = [line.split() for line in count_file.read_text().splitlines()]
    sent, changed = (sum(int(c[i]) for c in counts) for i in (0, 1))
    total = sent + result.requests
    say(f"{total} requests in all (schemathesis {sent}, envelope {result.requests}); "
        f"{changed} of Schemathesis's changed the database")
    if changed == 0:
        failed.append("no request changed the database: the digest is blind, or nothing was accepted")
    if total < MIN_REQUESTS and os.environ.get("FUZZ_EXAMPLES") is None:
        failed.append(f"only {total} requests, fewer than the promised {MIN_REQUESTS}")
    if failed:
        say("FAILED: " + "; ".join(failed))
        return 1
    say("passed")
    return 0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", required=True, help="the haita executable (built with --features lab)")
    p.add_argument("--out", default="target/fuzz", help="reports and the server's log")
    return p.parse_args()


def say(line: str) -> None:
    print(f"[fuzz] {line}", flush=True)


def fresh_database(url: str) -> str:
    """Drop and create `<database>_fuzz` next to DATABASE_URL's database; its URL."""
    u = urlparse(url)
    name = (u.path.lstrip("/") or "haita") + "_fuzz"
    conn = connect(url, database="")
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    conn.close()
    return urlunparse(u._replace(path="/" + name))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary: str, url: str, port: int, log_path: Path) -> subprocess.Popen:
    env = dict(
        os.environ,
        DATABASE_URL=url,
        BIND=f"127.0.0.1:{port}",
        DEMO_MODE="1",
        COOKIE_SECURE="0",
        RUST_LOG="warn",
        # Schemathesis posts wrong logins by the hundred from one address, to names it makes up;
        # the throttle and the per-address budget are tested elsewhere (tests/it/login_throttle.rs).
        LOGIN_FAILURES_PER_ADDRESS="100000",
        LOGIN_FAILURES_PER_CLIENT="100000",
    )
    log = open(log_path, "wb")
    return subprocess.Popen([binary, "serve", "--seed"], env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_until_up(base: str, server: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode}:\n{log_path.read_text()}")
        try:
            if requests.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"the server did not answer /health within 120 s; see {log_path}")


def log_in(base: str, username: str | None, password: str | None) -> str | None:
    """The session cookie of a fresh login, or None for nobody."""
    if username is None:
        return None
    r = requests.post(f"{base}/api/v1/session", json={"username": username, "password": password}, timeout=30)
    r.raise_for_status()
    return r.cookies[COOKIE]


def schemathesis(base, fuzz_url, identity, cookie, seed, examples, count_file, out) -> bool:
    # The session goes in through the document's security scheme, so that Schemathesis knows it
    # and also tries each operation without it.
    # No cache: a run replays only what its seed generates, never an earlier run's findings.
    config = out / f"schemathesis-{identity}.toml"
    auth = "" if cookie is None else f'[auth.openapi.session]\napi_key = "{cookie}"\n'
    config.write_text(f"[cache]\nenabled = false\n\n{auth}")
    command = [
        str(Path(sys.executable).parent / "schemathesis"), "--config-file", str(config), "run", f"{base}/api/v1/openapi.json",
        "--seed", str(seed),
        "--max-examples", str(examples),
        "--workers", "1",
        "--phases", "examples,coverage,fuzzing",
        "--checks", "all",
        # Valid input may still be refused for a reason the schema cannot express (no such
        # resource, out of stock, a lock someone else holds): 404/409/422 are correct answers.
        "--exclude-checks", "positive_data_acceptance",
        "--generation-database", "none",
        "--request-timeout", "120",
        "--suppress-health-check", "too_slow,filter_too_much",
        "--continue-on-failure",
        "--no-color",
        "--report", "junit",
        "--report-junit-path", str(out / f"schemathesis-{identity}.xml"),
    ]
    if cookie is not None:
        # Logging out would end the session that the rest of this pass runs in; the pass as
        # nobody covers it.
        command += ["--exclude-name", "DELETE /api/v1/session"]
    env = dict(
        os.environ,
        SCHEMATHESIS_HOOKS="hooks",
        PYTHONPATH=str(HERE),
        FUZZ_DATABASE_URL=fuzz_url,
        FUZZ_COUNT_FILE=str(count_file),
    )
    return subprocess.run(command, env=env).returncode == 0


if __name__ == "__main__":
    sys.exit(main())
