"""The few GitHub REST calls the announcer (``harness.suite.announce``) makes, stdlib only
(urllib), over a replaceable transport.

Every failure is an ``ApiError`` of one line: a refused connection, a reply that is not
JSON, an HTTP status outside 2xx. The token never appears in it, even where a server
echoes the request back.

Identity: the announcer touches only issues its own identity opened. ``login`` asks
``GET /user``; a GitHub App installation token (the workflow's ``GITHUB_TOKEN``) is
refused there (403), and then the login is ``ACTIONS_BOT``, the author of everything that
token opens. Another app's token needs its bot login given explicitly (``--author``).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping

LABEL = "perf-regression"
LABEL_COLOR = "d93f0b"
ACTIONS_BOT = "github-actions[bot]"

# (method, url, headers, body) -> (status, headers, body)
Transport = Callable[[str, str, Mapping[str, str], bytes | None], tuple[int, dict, bytes]]


class ApiError(RuntimeError):
    """A GitHub API call that failed; one line, the token scrubbed."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def urllib_transport(
    method: str, url: str, headers: Mapping[str, str], body: bytes | None
) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, data=body, headers=dict(headers), method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers or {}), err.read()


def _next_link(headers: Mapping[str, str]) -> str | None:
    link = next((v for k, v in headers.items() if k.lower() == "link"), "")
    found = re.search(r'<([^>]+)>;\s*rel="next"', link)
    return found.group(1) if found else None


class GitHub:
    """One repository's issues, labels and comments, as ``token``'s identity."""

    def __init__(
        self,
        repo: str,
        token: str,
        transport: Transport = urllib_transport,
        api: str = "https://api.github.com",
        dry_run: bool = False,
        log: Callable[[str], None] = print,
    ):
        self.repo, self.token, self.transport = repo, token, transport
        self.api, self.dry_run, self.log = api.rstrip("/"), dry_run, log

    def _scrub(self, text: str) -> str:
        """One line of at most 200 characters, without the token."""
        if self.token:
            text = text.replace(self.token, "***")
        return " ".join(text.split())[:200]

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[object, dict]:
        """``(decoded JSON, headers)`` of one call; ``path`` is relative to the repository
        (``/issues``), to the API (``~/user``), or a full URL (a next page)."""
        if path.startswith("http"):
            url = path
        elif path.startswith("~"):
            url = f"{self.api}{path[1:]}"
        else:
            url = f"{self.api}/repos/{self.repo}{path}"
        if self.dry_run and method != "GET":
            self.log(f"dry run: {method} {url} {json.dumps(body)[:200]}")
            return {"number": 0}, {}
        headers = {
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {self.token}",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "tilelang-gemm-perf-announce",
        }
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        where = f"{method} {url}"
        try:
            status, got_headers, raw = self.transport(method, url, headers, data)
        except (OSError, ValueError) as err:  # refused, unreachable, timed out, bad URL
            raise ApiError(self._scrub(f"{where}: no reply ({err})")) from None
        text = raw.decode("utf-8", "replace")
        if not 200 <= status < 300:
            try:
                why = json.loads(text).get("message") or text
            except (ValueError, AttributeError):
                why = text
            raise ApiError(self._scrub(f"{where}: HTTP {status}: {why}"), status)
        if not raw.strip():
            return None, got_headers
        try:
            return json.loads(text), got_headers
        except ValueError:
            raise ApiError(self._scrub(f"{where}: HTTP {status}, not JSON: {text}")) from None

    def login(self) -> str:
        """The login of the token's identity (see the module's docstring)."""
        try:
            user, _ = self.call("GET", "~/user")
        except ApiError as err:
            if err.status != 403:
                raise
            self.log(f"GET /user refused (an app's installation token): acting as {ACTIONS_BOT}")
            return ACTIONS_BOT
        if not isinstance(user, dict) or not isinstance(user.get("login"), str):
            raise ApiError(f"GET {self.api}/user: no 'login' in the reply")
        return user["login"]

    def labelled_issues(self) -> list[dict]:
        """Every issue (open or closed, no pull request) with the label, following pages."""
        query = urllib.parse.urlencode({"labels": LABEL, "state": "all", "per_page": 100})
        url, out = f"{self.api}/repos/{self.repo}/issues?{query}", []
        while url:
            page, headers = self.call("GET", url)
            if not isinstance(page, list):
                raise ApiError(f"GET {url}: not a list of issues")
            out += [i for i in page if isinstance(i, dict) and "pull_request" not in i]
            url = _next_link(headers)
        return out

    def ensure_label(self) -> None:
        try:
            self.call("GET", f"/labels/{LABEL}")
        except ApiError as err:
            if err.status != 404:
                raise
            self.call("POST", "/labels", {"name": LABEL, "color": LABEL_COLOR})

    def create_issue(self, title: str, body: str) -> int:
        issue, _ = self.call("POST", "/issues", {"title": title, "body": body, "labels": [LABEL]})
        return int(issue["number"]) if isinstance(issue, dict) else 0

    def edit_issue(self, number: int, **fields: str) -> None:
        """Change ``body``, ``title``, ``state`` or ``state_reason``."""
        self.call("PATCH", f"/issues/{number}", fields)

    def comment(self, number: int, body: str) -> None:
        self.call("POST", f"/issues/{number}/comments", {"body": body})
