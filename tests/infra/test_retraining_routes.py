"""The dispatcher's rules in the synthesized stack are exactly THE patterns local mode puts on its bus
and the service checks policies against (functions/catalog/events.py): one source of truth
for which events can start retraining, so local mode cannot pass what AWS would never deliver."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.catalog.events import dispatcher_rules
from functions.constants import DATASETS_PREFIX
from tests.infra.conftest import Synth, resolve_ref

pytestmark = pytest.mark.infra


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_the_stacks_dispatcher_rules_are_the_local_rules(synth: Synth, stage: str) -> None:
    # Given the rules whose target is the retraining dispatcher in the synthesized template
    functions = {f["Properties"]["Handler"]: k for k, f in synth.resources(stage, "AWS::Lambda::Function").items()}
    dispatcher = functions["functions.handlers.retraining.lambda_handler"]
    rules = [
        r["Properties"]["EventPattern"]
        for r in synth.resources(stage, "AWS::Events::Rule").values()
        if any(resolve_ref(t["Arn"]) == dispatcher for t in r["Properties"]["Targets"])
    ]
    # When THE patterns are built with the template's reference to the artifacts bucket
    (bucket,) = synth.resources(stage, "AWS::S3::Bucket").keys() & {_artifacts_ref(rules)}
    expected = [rule.pattern for rule in dispatcher_rules({"Ref": bucket}).values()]  # type: ignore[arg-type]
    # Then they are the same rules, no more and no fewer
    assert sorted(json.dumps(r, sort_keys=True) for r in rules) == sorted(json.dumps(r, sort_keys=True) for r in expected)


def test_the_datasets_prefix_is_the_one_in_constants() -> None:
    # One spelling: the construct grants it and the routes match it from functions/constants.py alone.
    import infra.constructs.storage as storage

    assert DATASETS_PREFIX == "datasets/" and not hasattr(storage, "DATASETS_PREFIX")


def _artifacts_ref(patterns: list[dict[str, Any]]) -> str:
    """The logical id of the bucket the datasets rule names."""
    for pattern in patterns:
        names = pattern.get("detail", {}).get("bucket", {}).get("name", [])
        for name in names:
            if isinstance(name, dict) and "Ref" in name:
                return str(name["Ref"])
    raise AssertionError(f"no rule names the artifacts bucket: {patterns}")
