"""`trainplane dashboard`'s half of the sign-in hand-off: it issues a single-use code (the protocol and its
design: schemas/dashboard_signin.py; local mode claims the code, localmode/dashboard.py)."""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

from schemas.dashboard_signin import CODE_TTL_SECONDS, CODES_DIR, SignInCode, code_path

__all__ = ["CODES_DIR", "CODE_TTL_SECONDS", "issue_code"]


def issue_code(state_dir: Path, principal: str, *, now: float | None = None) -> str:
    """A fresh single-use code that signs the page in as `principal` (a name in endpoint.json)."""
    directory = state_dir / CODES_DIR
    directory.mkdir(mode=0o700, exist_ok=True)
    code = secrets.token_urlsafe(32)
    expires = (time.time() if now is None else now) + CODE_TTL_SECONDS
    fd = os.open(code_path(state_dir, code), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(SignInCode(principal=principal, expires_at=expires).model_dump_json())
    _sweep(directory, time.time() if now is None else now)
    return code


def _sweep(directory: Path, now: float) -> None:
    """Remove expired codes nobody claimed."""
    for path in directory.glob("*.json"):
        try:
            if float(json.loads(path.read_text()).get("expires_at", 0)) < now:
                path.unlink()
        except (OSError, ValueError):
            continue
