"""The dashboard's single-use sign-in codes: the file protocol `trainplane dashboard` (the client writes a
code, trainplane/dashboard_signin.py) and local mode (the front door claims it, localmode/dashboard.py)
share, spelt once.

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
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

CODES_DIR = "dashboard-codes"
CODE_TTL_SECONDS = 120
CODE_PATTERN = re.compile(r"^[A-Za-z0-9_-]{32,128}$")


class SignInCode(BaseModel):
    """What a code's file holds."""

    model_config = ConfigDict(extra="ignore")
    principal: str
    expires_at: float


def code_path(state_dir: Path, code: str) -> Path:
    """Where a code's file lives: under the code's hash, so a directory listing reveals no usable code."""
    return state_dir / CODES_DIR / (hashlib.sha256(code.encode()).hexdigest() + ".json")
