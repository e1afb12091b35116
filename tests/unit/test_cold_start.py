"""Cold start (issue 21.5, docs/BENCHMARKS.md): the API Lambda's import creates the job routes' models only.

Every other router names its request and response models through functions/handlers/models.py, imported on the
route's first request. Not a timing: the test lists the modules whose pydantic models exist after the import,
in a fresh interpreter, so a new router that imports its models at module level fails here by name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from functions.handlers.models import LazyModels, annotation

ROOT = Path(__file__).resolve().parents[2]

# The modules whose models the API's import may create: the job routes' own (api.py: the job, its configs,
# the list/logs/metrics answers), the error answer and the training shapes (part of the job model's configs).
ALLOWED = {
    "schemas.access",
    "schemas.api",
    "schemas.checkpoint",
    "schemas.configs",
    "schemas.forecast",  # POST /jobs?dry_run=true: a job route's answer (issue 25)
    "schemas.job",
    "schemas.ome",
    "schemas.placement",  # resource_config.placement: part of the job model (issue 26)
    "schemas.shapes",
    "schemas.strict",  # Strict, the base of every request model (split out of schemas.configs)
    "schemas.tracking",
    "aws_lambda_powertools.event_handler.openapi.compat",  # Powertools' own `Request`
}
# The routers whose models are imported on first request (functions/handlers/models.py).
# GET /queues' view (functions.service.queues) with the teams' wait reasons, /teams, /deployment and the system
# metrics' answer load on first use too (they were the import's: docs/BENCHMARKS.md, 2026-11-26 22:20).
DEFERRED = {
    "schemas.sweeps",
    "schemas.retraining",
    "schemas.webhooks",
    "schemas.train",
    "schemas.teams",
    "schemas.deployment",
    "schemas.telemetry",
    "functions.service.queues",
}

_PROBE = """
import json, sys
import functions.handlers.api as api
from pydantic import BaseModel
seen, stack = set(), [BaseModel]
while stack:
    for sub in stack.pop().__subclasses__():
        if sub not in seen:
            seen.add(sub)
            stack.append(sub)
before = sorted({c.__module__ for c in seen})
loaded = sorted(m for m in sys.modules if m.startswith(("schemas.", "functions.service.")))
if sys.argv[1] == "openapi":
    api.openapi_json()
after = sorted(m for m in sys.modules if m.startswith(("schemas.", "functions.service.")))
print(json.dumps({"models": before, "loaded": loaded, "after": after}))
"""


def _probe(then: str = "") -> dict[str, list[str]]:
    out = subprocess.run([sys.executable, "-c", _PROBE, then], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_api_import_creates_only_the_job_routes_models() -> None:
    found = _probe()
    extra = set(found["models"]) - ALLOWED
    assert not extra, (
        f"the API's import now creates the pydantic models of {sorted(extra)}: a router names its models through "
        "functions/handlers/models.py (LazyModels), imported on its first request (cold start, docs/BENCHMARKS.md)"
    )
    assert not DEFERRED & set(found["loaded"]), found["loaded"]


def test_the_deferred_models_load_when_the_routes_are_first_read() -> None:
    # Generating the OpenAPI document reads every route's annotations, as a route's first request does.
    found = _probe("openapi")
    assert set(found["after"]) >= DEFERRED, found["after"]


def test_lazy_models_import_on_first_attribute_only() -> None:
    models = LazyModels("schemas.bounds")
    with pytest.raises(AttributeError):
        models.__wrapped__  # noqa: B018  (inspect and copy probe dunders: never an import)
    import schemas.bounds

    assert models.MAX_LABELS == schemas.bounds.MAX_LABELS
    with pytest.raises(AttributeError):
        models.NoSuchModel  # noqa: B018


@pytest.mark.parametrize("reference", ["schemas.sweeps", "schemas.sweeps:", ":Sweep", "schemas.sweeps:Sweep.x"])
def test_a_collection_model_reference_is_module_colon_name(reference: str) -> None:
    with pytest.raises(ValueError, match="module:Name"):
        annotation(reference)
