"""The one page-token codec: every `next_token` the API hands out is compact JSON in URL-safe base64 without
padding (the job listing's DynamoDB keys, the policies' and sweeps', the logs' cursors). A token that does not
decode is a 422 naming `next_token`; what its JSON must hold is each listing's own check."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from functions.errors import InvalidRequest

NOT_OURS = "is not a token this API returned"


def encode(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).decode().rstrip("=")


def decode(token: str) -> Any:
    """The JSON value of a token from `encode`; InvalidRequest on `next_token` when it is not one."""
    try:
        return json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, TypeError) as exc:
        raise InvalidRequest("next_token", NOT_OURS) from exc
