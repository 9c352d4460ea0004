"""An in-process GitHub REST server that speaks real HTTP on 127.0.0.1, for the
announcer's tests and the end-to-end test of the history loop.

It serves the calls ``harness.suite.github_api`` makes: ``GET /user``, the issues list
(label and state filters, pages with a ``Link: rel="next"`` header), creating and editing
issues (body, title, state), comments, and labels. It checks the bearer token, records
every call, and injects faults on request (an HTTP status, a reply that is not JSON, a
reply that echoes the request's headers back).

    with FakeGitHub() as gh:
        env = {"GITHUB_API_URL": gh.url, "GITHUB_TOKEN": gh.token}
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Fault:
    """The next ``times`` calls of ``method`` on a path matching ``path`` (a regex, searched)
    get ``status`` and ``body`` instead of the real reply; ``echo`` puts the request's
    headers (the token among them) into the body, as some proxies' error pages do."""

    method: str
    path: str
    status: int = 500
    body: bytes = b'{"message": "Server Error"}'
    times: int = 1
    echo: bool = False


class FakeGitHub:
    """One repository's issues, labels and comments behind a real HTTP server.

    ``login``: who the token is; ``None`` plays a GitHub App installation token, which
    ``GET /user`` refuses (403) and whose issues GitHub shows as ``github-actions[bot]``.
    """

    def __init__(self, repo="acme/gemm", token="secret", login="perf-bot", page_size=2):
        self.repo, self.token, self.login, self.page_size = repo, token, login, page_size
        self.issues: dict[int, dict] = {}
        self.comments: dict[int, list[str]] = {}
        self.labels: set[str] = set()
        self.calls: list[tuple[str, str]] = []
        self.faults: list[Fault] = []
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None

    # --- set-up and inspection ---------------------------------------------------------

    @property
    def author(self) -> str:
        """The login GitHub shows on what this token opens."""
        return self.login or "github-actions[bot]"

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def add(self, body, state="open", author=None, labels=("perf-regression",), pr=False):
        """An issue as if opened by ``author`` (default: this token's identity)."""
        with self._lock:
            number = len(self.issues) + 1
            self.issues[number] = {
                "number": number,
                "title": f"issue {number}",
                "body": body,
                "state": state,
                "user": {"login": author or self.author},
                "labels": [{"name": name} for name in labels],
            }
            if pr:
                self.issues[number]["pull_request"] = {"url": "x"}
            return number

    def fail(self, method, path, **kwargs) -> None:
        self.faults.append(Fault(method, path, **kwargs))

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.calls if m != "GET"]

    def __enter__(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, headers, body = fake.handle(
                    self.command, self.path, dict(self.headers), raw
                )
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- the API -------------------------------------------------------------------------

    def handle(self, method, target, headers, raw) -> tuple[int, dict, bytes]:
        parts = urllib.parse.urlsplit(target)
        path, query = parts.path, dict(urllib.parse.parse_qsl(parts.query))
        with self._lock:
            self.calls.append((method, path.removeprefix(f"/repos/{self.repo}")))
            for fault in self.faults:
                if fault.times > 0 and fault.method == method and re.search(fault.path, path):
                    fault.times -= 1
                    body = fault.body
                    if fault.echo:
                        body += json.dumps(headers).encode()
                    return fault.status, {}, body
            if headers.get("Authorization") != f"Bearer {self.token}":
                return _reply(401, {"message": "Bad credentials"})
            try:
                data = json.loads(raw) if raw else None
            except ValueError:
                return _reply(400, {"message": "Problems parsing JSON"})
            return self._route(method, path, query, data)

    def _route(self, method, path, query, data):
        if (method, path) == ("GET", "/user"):
            if self.login is None:
                return _reply(403, {"message": "Resource not accessible by integration"})
            return _reply(200, {"login": self.login})
        base = f"/repos/{self.repo}"
        if not path.startswith(base + "/"):
            return _reply(404, {"message": "Not Found"})
        rest = path.removeprefix(base)
        issue = re.fullmatch(r"/issues/(\d+)", rest)
        comments = re.fullmatch(r"/issues/(\d+)/comments", rest)
        if (method, rest) == ("GET", "/issues"):
            return self._list(query)
        if (method, rest) == ("POST", "/issues"):
            number = self.add(data["body"], labels=data.get("labels", ()))
            self.issues[number]["title"] = data["title"]
            self.labels.update(data.get("labels", ()))  # GitHub creates a missing label
            return _reply(201, self.issues[number])
        if method == "PATCH" and issue and int(issue.group(1)) in self.issues:
            found = self.issues[int(issue.group(1))]
            for key in ("body", "title", "state", "state_reason"):
                if key in data:
                    found[key] = data[key]
            return _reply(200, found)
        if method == "POST" and comments and int(comments.group(1)) in self.issues:
            self.comments.setdefault(int(comments.group(1)), []).append(data["body"])
            return _reply(201, {"body": data["body"]})
        if method == "GET" and rest.startswith("/labels/"):
            name = urllib.parse.unquote(rest.removeprefix("/labels/"))
            if name in self.labels:
                return _reply(200, {"name": name})
            return _reply(404, {"message": "Not Found"})
        if (method, rest) == ("POST", "/labels"):
            if data["name"] in self.labels:
                return _reply(422, {"message": "Validation Failed"})
            self.labels.add(data["name"])
            return _reply(201, {"name": data["name"]})
        return _reply(404, {"message": "Not Found"})

    def _list(self, query):
        wanted = [x for x in query.get("labels", "").split(",") if x]
        state = query.get("state", "open")
        page, per_page = (
            int(query.get("page", 1)),
            min(self.page_size, int(query.get("per_page", 30))),
        )
        listed = [
            i
            for i in self.issues.values()
            if all(w in {x["name"] for x in i["labels"]} for w in wanted)
            and (state == "all" or i["state"] == state)
        ]
        chunk = listed[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(listed):
            nxt = urllib.parse.urlencode({**query, "page": page + 1})
            headers["Link"] = f'<{self.url}/repos/{self.repo}/issues?{nxt}>; rel="next"'
        return _reply(200, chunk, headers)


def _reply(status, obj, headers=None) -> tuple[int, dict, bytes]:
    return status, headers or {}, json.dumps(obj).encode()
