"""The dashboard's pages in local mode: what CloudFront + the assets bucket are in the cloud.

FrontDoor asks `answer()` first; it takes only these requests and leaves every other one to the API
(and its SigV4 check):
- GET/HEAD `/`, `/index.html`, `/assets/<file>`: the built page (dashboard_assets/static), unsigned, as
  CONTRACTS.md says; the page then signs every API call with SigV4.
- GET `/dashboard-config.json`: the page's settings (mode, region, API URL = same origin).
- POST `/_dashboard/session`: a `trainplane dashboard` sign-in code for a principal's keys
  (schemas/dashboard_signin.py has the design), loopback peers only.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import mimetypes
import re
import time
from pathlib import Path

from dashboard_assets import STATIC_DIR
from localmode.credentials import Principal
from localmode.sigv4 import ArrivedRequest
from schemas.dashboard_signin import CODE_PATTERN, SignInCode, code_path

logger = logging.getLogger(__name__)


class SignInRefused(Exception):
    pass


def claim_code(state_dir: Path, code: object, *, now: float | None = None) -> str:
    """The principal name a code was issued for; the code is spent. SignInRefused when it is not valid."""
    if not isinstance(code, str) or not CODE_PATTERN.match(code):
        raise SignInRefused("not a sign-in code")
    path = code_path(state_dir, code)
    try:
        record = SignInCode.model_validate_json(path.read_text())
        path.unlink()  # of two racing claims, only one unlink succeeds
    except (FileNotFoundError, ValueError):
        raise SignInRefused("unknown or already used sign-in code") from None
    if record.expires_at < (time.time() if now is None else now):
        raise SignInRefused("the sign-in code has expired")
    return record.principal


Response = tuple[int, list[tuple[str, str]], bytes]

SESSION_PATH = "/_dashboard/session"
CONFIG_PATH = "/dashboard-config.json"
_ASSET = re.compile(r"^/assets/([A-Za-z0-9._-]+)$")
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
# The page loads nothing from elsewhere and talks only to its own origin.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
)
SECURITY_HEADERS = [
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
]


class DashboardSite:
    def __init__(self, *, state_dir: Path, principals: list[Principal], region: str, static_dir: Path = STATIC_DIR) -> None:
        self.state_dir = state_dir
        self.static_dir = static_dir
        self.region = region
        self._by_name = {p.name: p for p in principals}

    def answer(self, request: ArrivedRequest, source_ip: str) -> Response | None:
        """The response for a dashboard request; None for anything else (the API's)."""
        path, method = request.raw_path, request.method
        if method in ("GET", "HEAD"):
            if path in ("/", "/index.html"):
                return self._file(self.static_dir / "index.html", "no-cache")
            if path == CONFIG_PATH:
                config = {"mode": "local", "region": self.region, "api_url": ""}
                return (
                    200,
                    [("Content-Type", "application/json"), ("Cache-Control", "no-cache"), *SECURITY_HEADERS],
                    json.dumps(config).encode(),
                )
            if match := _ASSET.match(path):
                # Vite names each asset by its content hash: cacheable for ever.
                return self._file(self.static_dir / "assets" / match.group(1), "public, max-age=31536000, immutable")
            return None
        if method == "POST" and path == SESSION_PATH:
            return self._session(request, source_ip)
        return None

    def _file(self, path: Path, cache: str) -> Response:
        try:
            body = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            if path.name == "index.html":
                message = "the dashboard is not built: run `make dashboard` (needs node) or reinstall trainplane"
            else:
                message = "Not Found"
            return _json(404, {"message": message})
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind in ("application/javascript", "text/javascript"):
            kind += "; charset=utf-8"
        return 200, [("Content-Type", kind), ("Cache-Control", cache), *SECURITY_HEADERS], body

    def _session(self, request: ArrivedRequest, source_ip: str) -> Response:
        if not _is_loopback(source_ip):
            return _json(403, {"message": "dashboard sign-in is answered to this machine only"})
        host = request.header("host") or ""
        hostname = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        if hostname not in _LOOPBACK_HOSTS:
            return _json(403, {"message": "dashboard sign-in needs a loopback host name (127.0.0.1, localhost, [::1])"})
        origin = request.header("origin")
        if origin is not None and origin != f"http://{host}":
            return _json(403, {"message": "dashboard sign-in is answered to the page's own origin only"})
        try:
            body = json.loads(request.body or b"{}")
            name = claim_code(self.state_dir, body.get("code") if isinstance(body, dict) else None)
        except (ValueError, SignInRefused) as exc:
            return _json(403, {"message": str(exc) if isinstance(exc, SignInRefused) else "the body must be JSON"})
        principal = self._by_name.get(name)
        if principal is None:
            return _json(403, {"message": f"principal {name!r} is not served here"})
        logger.info("dashboard signed in as %s", name)
        return _json(
            200,
            {
                "principal": principal.name,
                "arn": principal.arn,
                "access_key_id": principal.access_key_id,
                "secret_access_key": principal.secret_access_key,
                "region": self.region,
            },
        )


def _is_loopback(source_ip: str) -> bool:
    try:
        address = ipaddress.ip_address(source_ip)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _json(status: int, body: object) -> Response:
    return status, [("Content-Type", "application/json"), ("Cache-Control", "no-store"), *SECURITY_HEADERS], json.dumps(body).encode()
