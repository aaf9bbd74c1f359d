"""The envelope pass: for every operation of the document, the requests Schemathesis does not vary.

Schemathesis varies what goes *inside* a request, always sent as the document says. This pass
varies the envelope, deterministically, for every operation it finds in the document:

- state-changing requests sent as text/plain, as a form, and with no content type (the requests a
  cross-site page can send without asking the browser) → 415;
- malformed JSON and a body far over any limit → 400 / 413;
- no session, and a session cookie that was never issued → 401 where the operation needs a login;
- a customer on operations that need another role → 403;
- hostile path and query values: numbers past 64 bits, signs, exponents, SQL, NUL, signed years.

Every answer must be below 500, listed in the operation's responses, and, when refused, JSON with
`error` and `message`, its `error` one of the codes the document lists for that status, and no
change to any table.
"""

from dataclasses import dataclass, field

import requests

from dbdigest import Digest
from documented import undocumented_code

WRITES = {"post", "put", "patch", "delete"}
HOSTILE_IDS = ["0", "-1", "+1", "1e3", "0x10", "99999999999999999999", "9223372036854775808",
               "%00", "%27%20OR%201%3D1", "%E2%80%AE", "a" * 300]
HOSTILE_QUERY_VALUES = ["+262142-12-18", "-0001-01-01", "9999-12-31", "2026-02-30", "2026-1-1",
                        "", "\u0000", "1" * 40, "true", "[]"]
# Path parameters that name something of the demo data, so the request reaches the code behind
# the parameter checks.
PLAIN_VALUES = {"id": "1", "key": "resource:1", "name": "fuzz"}


@dataclass
class Result:
    requests: int = 0
    problems: list[str] = field(default_factory=list)


def run(base: str, fuzz_url: str, cookies: dict[str, str | None]) -> Result:
    document = requests.get(f"{base}/api/v1/openapi.json", timeout=30).json()
    digest = Digest(fuzz_url)
    result = Result()
    http = requests.Session()

    def send(label, method, path, op, *, cookie=None, expect=None, **kw):
        headers = kw.pop("headers", {})
        if cookie is not None:
            headers["Cookie"] = f"haita_session={cookie}"
        before = digest.take()
        try:
            r = http.request(method.upper(), base + path, headers=headers, timeout=60, **kw)
        except requests.RequestException as e:
            result.problems.append(f"{label}: {method.upper()} {path}: no answer ({e})")
            return
        finally:
            result.requests += 1
        where = f"{label}: {method.upper()} {path} → {r.status_code}"
        documented = op.get("responses", {})
        if r.status_code >= 500:
            result.problems.append(f"{where}: server error {r.text[:200]!r}")
        elif str(r.status_code) not in documented and "default" not in documented:
            result.problems.append(f"{where}: status not in the document ({', '.join(documented)})")
        if expect is not None and r.status_code not in expect:
            result.problems.append(f"{where}: expected {' or '.join(map(str, expect))}")
        if 400 <= r.status_code < 500:
            try:
                body = r.json()
                if not isinstance(body, dict) or "error" not in body or "message" not in body:
                    raise ValueError("no error/message")
            except ValueError:
                result.problems.append(f"{where}: refusal is not an error object: {r.text[:200]!r}")
            changed = Digest.diff(before, digest.take())
            if changed:
                result.problems.append(f"{where}: refused, yet changed {', '.join(changed)}")
        if r.status_code >= 400:
            try:
                why = undocumented_code(documented, r.status_code, r.json())
            except ValueError:
                why = None
            if why:
                result.problems.append(f"{where}: {why}")

    admin, customer = cookies["admin"], cookies["customer"]
    for template, item in document["paths"].items():
        for method, op in item.items():
            if method not in WRITES | {"get"}:
                continue
            path = fill(template, PLAIN_VALUES)
            needs_login = bool(op.get("security"))
            has_body = "requestBody" in op
            # What a well-behaved client sends along; the checks below vary one thing at a time.
            body = {"json": {}} if method in WRITES else {}
            is_logout = template == "/api/v1/session" and method == "delete"
            # The session being logged out must not be one the rest of the run uses.
            own = None if is_logout else admin

            if method in WRITES:
                for label, content_type in [("text/plain", "text/plain"),
                                            ("form", "application/x-www-form-urlencoded"),
                                            ("no content type", None)]:
                    headers = {} if content_type is None else {"Content-Type": content_type}
                    send(label, method, path, op, cookie=own, expect=[415],
                         headers=headers, data=b'{"x": 1}')
            if has_body:
                send("malformed JSON", method, path, op, cookie=own, expect=[400],
                     headers={"Content-Type": "application/json"}, data=b'{"username": ')
                send("oversized JSON", method, path, op, cookie=own, expect=[413],
                     headers={"Content-Type": "application/json"},
                     data=b'{"x": "' + b"a" * (2 << 20) + b'"}')
            if needs_login:
                send("no session", method, path, op, expect=[401], **body)
                send("forged session", method, path, op, cookie="Zm9yZ2Vk" * 8, expect=[401], **body)
            if "403" in op.get("responses", {}) and "admin" in op.get("tags", []):
                send("customer on an admin route", method, path, op, cookie=customer, expect=[403], **body)

            for name in path_parameters(template):
                for value in HOSTILE_IDS:
                    hostile = fill(template, {**PLAIN_VALUES, name: value})
                    send(f"hostile {name}", method, hostile, op, cookie=own, **body)
            for param in op.get("parameters", []):
                if param.get("in") != "query":
                    continue
                for value in HOSTILE_QUERY_VALUES:
                    send(f"hostile ?{param['name']}", method, path, op, cookie=own,
                         params={param["name"]: value}, **body)
    return result


def path_parameters(template: str) -> list[str]:
    return [part[1:-1] for part in template.split("/") if part.startswith("{") and part.endswith("}")]


def fill(template: str, values: dict[str, str]) -> str:
    for name in path_parameters(template):
        template = template.replace("{" + name + "}", values.get(name, "1"))
    return template
