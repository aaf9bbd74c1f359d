"""Schemathesis hooks for haita's API fuzzer (loaded by run.py through SCHEMATHESIS_HOOKS).

Schemathesis already fails a run on a 5xx, a dropped connection, and an answer that the OpenAPI
document does not describe. This module adds two checks it cannot know about: a request that
was refused (any 4xx) must not have changed the database, and an error's `error` code must be one
the document lists for its status (each error response's description is its list of codes). Each request is bracketed by a digest of
every table (CHECKSUM TABLE) taken just before and just after it; the fuzzer sends one request at a
time, so nothing else writes in between.

Two adjustments to how Schemathesis reads the document, each for a rule the document states in
prose rather than in schema (see `complete` in src/openapi.rs):
- every write says `Content-Type: application/json`, also without a body (that header is the
  API's CSRF defence); Schemathesis sends no content type when there is no body, so it is added
  here, and the envelope pass tests what happens without it;
- a PATCH without its precondition header (`If-Match` for a product, `Edit-Lock-Epoch` for a
  resource) is answered 428 Precondition Required (RFC 6585), the status made for exactly that,
  which Schemathesis's missing-header check does not know.

Two refusals are allowed to write, each only to one table: a booking or order refused for a
business reason ("fully booked", "out of stock") with an `Idempotency-Key` stores that answer in
`idempotency_keys`, so that a resend gets it back instead of running again (src/idempotency); and a
login refused for a wrong password is a row of `login_failures`, which is how the throttle counts
failures on every instance (src/auth/throttle.rs).

It also counts the requests it saw and those that changed a table, so that run.py can prove the
run was as large as promised and that the digest does see writes.
"""

import atexit
import os

import schemathesis
from schemathesis.core import NOT_SET
from schemathesis.openapi.checks import MissingHeaderNotRejected

from dbdigest import Digest
from documented import undocumented_code

_digest = Digest.from_env()
_before: dict[int, dict[str, int]] = {}
_after: dict[int, dict[str, int]] = {}
_requests = 0
_changes_seen = 0


WRITES = {"POST", "PUT", "PATCH", "DELETE"}


@schemathesis.hook
def before_call(context, case, kwargs):
    if case.method.upper() in WRITES and case.body is NOT_SET:
        case.headers = {**(case.headers or {}), "Content-Type": "application/json"}
    _before[id(case)] = _digest.take()


@schemathesis.hook
def after_call(context, case, response):
    global _requests, _changes_seen
    _requests += 1
    _after[id(case)] = after = _digest.take()
    if Digest.diff(_before[id(case)], after):
        _changes_seen += 1


@schemathesis.hook
def filter_failure(context, failure, case, response):
    """Keep every failure but a 428 for a missing precondition header."""
    return not (
        isinstance(failure, MissingHeaderNotRejected)
        and failure.header_name.lower() in ("if-match", "edit-lock-epoch")
        and failure.status_code == 428
    )


@schemathesis.check
def refusal_changes_nothing(ctx, response, case):
    """A refused request (4xx) left every table exactly as it was."""
    if not 400 <= response.status_code < 500:
        return None
    before, after = _before.get(id(case)), _after.get(id(case))
    if before is None or after is None:
        return None
    changed = Digest.diff(before, after)
    keyed = any(name.lower() == "idempotency-key" for name in (case.headers or {}))
    if keyed and changed == ["idempotency_keys"] and response.status_code in (409, 422):
        return None  # the refusal's stored answer, and nothing else
    login = case.method.upper() == "POST" and case.path == "/api/v1/session"
    if login and changed == ["login_failures"] and response.status_code == 401:
        return None  # the failed login itself, counted by the throttle, and nothing else
    if changed:
        raise AssertionError(
            f"refused with {response.status_code}, yet the request changed: {', '.join(changed)}"
        )
    return None


@schemathesis.check
def error_code_is_documented(ctx, response, case):
    """An error's `error` code is one its status lists in the document."""
    if response.status_code < 400:
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    why = undocumented_code(case.operation.definition.raw.get("responses", {}), response.status_code, body)
    if why:
        raise AssertionError(why)
    return None


@atexit.register
def _report_count():
    path = os.environ.get("FUZZ_COUNT_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{_requests} {_changes_seen}\n")

