"""`trainplane dashboard`'s hand-off of a local principal's keys to the browser page.

Design (issue 14): the keys never travel in a URL. The CLI writes a single-use sign-in code into the
state directory (owner-only, like endpoint.json, which already holds the keys) and opens
`<api_url>/#code=<code>`. The code is in the URL *fragment*, which browsers never send to a server, so it
cannot land in any server or proxy log; the page removes it from the address bar and history at once and
trades it for the keys with `POST /_dashboard/session`, which local mode's front door answers only to a
loopback peer addressing it by a loopback host name (no DNS rebinding), once per code, within
CODE_TTL_SECONDS. Whoever can write a code can already read endpoint.json: nothing new is exposed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import time
from pathlib import Path

CODES_DIR = "dashboard-codes"
CODE_TTL_SECONDS = 120
_CODE = re.compile(r"^[A-Za-z0-9_-]{32,128}$")


class SignInRefused(Exception):
    pass


def _code_path(state_dir: Path, code: str) -> Path:
    # Stored under the code's hash: a directory listing does not reveal a usable code.
    return state_dir / CODES_DIR / (hashlib.sha256(code.encode()).hexdigest() + ".json")


def issue_code(state_dir: Path, principal: str, *, now: float | None = None) -> str:
    """A fresh single-use code that signs the page in as `principal` (a name in endpoint.json)."""
    directory = state_dir / CODES_DIR
    directory.mkdir(mode=0o700, exist_ok=True)
    code = secrets.token_urlsafe(32)
    expires = (time.time() if now is None else now) + CODE_TTL_SECONDS
    fd = os.open(_code_path(state_dir, code), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"principal": principal, "expires_at": expires}, fh)
    _sweep(directory, time.time() if now is None else now)
    return code


def claim_code(state_dir: Path, code: object, *, now: float | None = None) -> str:
    """The principal name a code was issued for; the code is spent. SignInRefused when it is not valid."""
    if not isinstance(code, str) or not _CODE.match(code):
        raise SignInRefused("not a sign-in code")
    path = _code_path(state_dir, code)
    try:
        record = json.loads(path.read_text())
        path.unlink()  # of two racing claims, only one unlink succeeds
    except (FileNotFoundError, ValueError):
        raise SignInRefused("unknown or already used sign-in code") from None
    if float(record.get("expires_at", 0)) < (time.time() if now is None else now):
        raise SignInRefused("the sign-in code has expired")
    return str(record.get("principal", ""))


def _sweep(directory: Path, now: float) -> None:
    """Remove expired codes nobody claimed."""
    for path in directory.glob("*.json"):
        try:
            if float(json.loads(path.read_text()).get("expires_at", 0)) < now:
                path.unlink()
        except (OSError, ValueError):
            continue
