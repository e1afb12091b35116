"""POST /jobs with placement (docs/PLACEMENT.md) through the API Lambda: what placement would refuse is a
422 naming the field at submit, nothing created; a good candidate list is stored and read back."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.api_lambda import Api
from tests.helpers.jobs import request_body

TWO = [{"gpu_type": "H100", "gpus_per_node": 8}, {"gpu_type": "A100", "gpus_per_node": 8, "purchase": "on_demand"}]


def _body(resources: dict[str, Any], scheduling: dict[str, Any] | None = None) -> dict[str, Any]:
    body = request_body(resource_config={"gpu_count": 8, **resources}, scheduling_config=scheduling or {})
    body["training_config"]["training_type"] = "SFT"
    return body


@pytest.mark.parametrize(
    ("resources", "scheduling", "field"),
    [
        ({"placement": {"candidates": [{"gpu_type": "H100", "gpus_per_node": 8}] * 11}}, None, "resource_config.placement.candidates"),
        ({"placement": {"candidates": [*TWO, {"gpu_type": "L4", "gpus_per_node": 3}]}}, None, "resource_config.placement.candidates[2]"),
        ({"placement": {"candidates": [*TWO, {"gpu_type": "Z80"}]}}, None, "resource_config.placement.candidates[2]"),
        ({"placement": {"candidates": TWO, "deadline": "2020-01-01T00:00:00Z"}}, None, "resource_config.placement.deadline"),
        ({"placement": {"candidates": TWO}, "node_affinity": ["rack=4"]}, None, "resource_config.node_affinity[0]"),
        ({"placement": {"candidates": TWO}, "node_anti_affinity": ["platform=ec2"]}, None, "resource_config.node_anti_affinity"),
        ({"placement": {"candidates": TWO}}, {"required_capabilities": ["teleport"]}, "scheduling_config.required_capabilities[0]"),
        ({"gpu_type": "L4", "gpu_count": 1}, {"required_capabilities": ["nvlink"]}, "scheduling_config.required_capabilities"),
        ({"placement": {"candidates": TWO}, "gpu_type": "L4"}, None, "resource_config.gpu_type"),
        ({"placement": {"candidates": TWO}, "training_shape": "a100-80gb-8x"}, None, "resource_config.placement.candidates[0]"),
    ],
)
def test_what_placement_refuses_is_a_422_naming_the_field(
    call: Api, resources: dict[str, Any], scheduling: dict[str, Any] | None, field: str
) -> None:
    reply = call("api_submit_job", body=_body(resources, scheduling), headers={"Idempotency-Key": ""})
    assert reply.status == 422, reply.body
    assert any(e["field"] == field for e in reply.body["errors"]), reply.body
    assert call("api_list_jobs", query={}).body["jobs"] == []


def test_a_candidate_list_is_stored_and_read_back(call: Api) -> None:
    body = _body({"placement": {"candidates": TWO, "availability_zones": ["us-east-1a"]}, "node_affinity": ["zone=us-east-1a"]})
    reply = call("api_submit_job", body=body, headers={"Idempotency-Key": ""})
    assert reply.status == 201, reply.body
    job = call("api_get_job", job_id=reply.body["job_id"]).body
    assert [c["gpu_type"] for c in job["resource_config"]["placement"]["candidates"]] == ["H100", "A100"]
    assert (job["resource_config"]["gpu_type"], job["resource_config"]["gpu_count"]) == ("H100", 8)  # counted as candidate 0
    assert job["placement"] is None  # nothing placed before its first PREPARING
