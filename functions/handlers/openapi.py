"""Print the API's OpenAPI document: `python -m functions.handlers.openapi > schemas/openapi.json`.

The committed copy (schemas/openapi.json) is what the CDK stack builds API Gateway's routes from;
tests/integration/test_api_handler.py fails when it drifts from the code (`make openapi` refreshes it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

COMMITTED = Path(__file__).resolve().parents[2] / "schemas" / "openapi.json"


def document() -> dict[str, Any]:
    from functions.handlers.api import openapi_json

    return json.loads(openapi_json())


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
