"""Placement's submit-time rules (functions/catalog/placement.py): every refusal a 422 naming the field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from functions.catalog import placement as rules
from functions.errors import InvalidRequest
from schemas.configs import ResourceConfig
from tests.lifecycle_support import make_request

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def _request(placement: dict[str, Any] | None = None, *, batch: int = 4, accumulation: int = 1, **resources: Any) -> Any:
    scheduling = resources.pop("scheduling", {})
    body: dict[str, Any] = {"gpu_count": 8, **resources}
    if placement is not None:
        body["placement"] = placement
    request = make_request(resource_config=body, scheduling_config=scheduling)
    data = request.data_config.model_copy(update={"batch_size": batch, "gradient_accumulation_steps": accumulation})
    return request.model_copy(update={"data_config": data})


def _validate(request: Any, compute: str = "ec2") -> None:
    rules.validate(
        request.resource_config, request.scheduling_config, request.training_config, request.data_config, compute, NOW.timestamp()
    )


def _two(**extra: Any) -> dict[str, Any]:
    return {
        "candidates": [
            {"gpu_type": "H100", "gpus_per_node": 8, "purchase": "spot"},
            {"gpu_type": "A100", "gpus_per_node": 8, "purchase": "spot"},
            {"gpu_type": "A100", "gpus_per_node": 8, "purchase": "on_demand"},
        ],
        **extra,
    }


def test_candidates_resolve_to_instance_types_and_keep_the_global_batch() -> None:
    # Given H100 x8 first, then a 4 x L40S candidate and a 2-node A100 one
    placement = {
        "candidates": [
            {"gpu_type": "H100", "gpus_per_node": 8},
            {"gpu_type": "L40S", "gpus_per_node": 4},
            {"gpu_type": "A100", "gpus_per_node": 8, "nodes": 2, "purchase": "on_demand"},
        ]
    }
    request = _request(placement, batch=4, accumulation=2)
    # When the rules resolve and adapt them
    _validate(request)
    resolved = rules.resolve(request.resource_config)
    rows = rules.adaptations(request.resource_config, request.training_config, request.data_config)
    # Then each runs on its instance type and every one has the global batch of candidate 0 (4 x 2 x 8 = 64)
    assert [c.choice.instance_type for c in resolved] == ["p5.48xlarge", "g6e.12xlarge", "p4d.24xlarge"]
    assert [(world, per * acc * world) for world, per, acc, _ in rows] == [(8, 64), (4, 64), (16, 64)]
    assert rows[1][1:3] == (4, 4)  # 4 devices: per-device 4 (as asked, it fits), accumulation 4
    assert rows[2][1:3] == (4, 1)  # 16 devices: accumulation down to 1


def test_a_candidate_whose_adaptation_is_impossible_is_named() -> None:
    # Given a global batch of 3 x 1 x 1 and a candidate with 2 devices
    placement = {"candidates": [{"gpu_type": "L4", "gpus_per_node": 1}, {"gpu_type": "L4", "gpus_per_node": 2}]}
    request = _request(placement, batch=3, gpu_count=1)
    # Then the 422 names that candidate
    with pytest.raises(InvalidRequest) as caught:
        _validate(request)
    assert caught.value.field == "resource_config.placement.candidates[1]"
    assert "global batch of 3" in caught.value.message


def test_more_than_ten_candidates_is_a_schema_error() -> None:
    with pytest.raises(ValidationError) as caught:
        ResourceConfig.model_validate({"placement": {"candidates": [{"gpu_type": "L4"}] * 11}})
    assert caught.value.errors()[0]["loc"] == ("placement", "candidates")


def test_a_candidate_no_instance_fits_is_named() -> None:
    request = _request({"candidates": [{"gpu_type": "H100", "gpus_per_node": 8}, {"gpu_type": "T4", "gpus_per_node": 8}]})
    with pytest.raises(InvalidRequest) as caught:
        _validate(request)
    assert caught.value.field == "resource_config.placement.candidates[1]"


def test_a_candidate_on_another_platform_than_the_deployment_is_named() -> None:
    request = _request({"candidates": [{"gpu_type": "H100", "gpus_per_node": 8, "platform": "sagemaker"}]})
    with pytest.raises(InvalidRequest) as caught:
        _validate(request, compute="ec2")
    assert caught.value.field == "resource_config.placement.candidates[0].platform"
    _validate(request, compute="sagemaker")


@pytest.mark.parametrize(
    ("labels", "where"),
    [
        (["rack=7"], "resource_config.node_affinity[0]"),
        (["family=p5", "family=z9"], "resource_config.node_affinity[1]"),
        (["zone=mars"], "resource_config.node_affinity[0]"),
        (["purchase=reserved"], "resource_config.node_affinity[0]"),
        (["capacity_reservation=nope"], "resource_config.node_affinity[0]"),
    ],
)
def test_affinity_that_names_no_known_label_is_refused(labels: list[str], where: str) -> None:
    request = _request(_two(), node_affinity=labels)
    with pytest.raises(InvalidRequest) as caught:
        _validate(request)
    assert caught.value.field == where


def test_affinity_zone_outside_the_allowed_zones_is_refused() -> None:
    request = _request(_two(availability_zones=["us-east-1a"]), node_affinity=["zone=us-east-1b"])
    with pytest.raises(InvalidRequest) as caught:
        _validate(request)
    assert caught.value.field == "resource_config.node_affinity[0]"


def test_anti_affinity_that_rules_out_every_pool_is_refused() -> None:
    request = _request(_two(), node_anti_affinity=["platform=ec2"])
    with pytest.raises(InvalidRequest) as caught:
        _validate(request)
    assert caught.value.field == "resource_config.node_anti_affinity"


def test_affinity_orders_pools_and_anti_affinity_drops_them() -> None:
    # Given H100 spot, A100 spot, A100 on-demand in two zones, preferring A100 and avoiding us-east-1b
    request = _request(_two(availability_zones=["us-east-1a", "us-east-1b"]), node_affinity=["gpu_type=A100"])
    rc = request.resource_config
    zones = rc.placement.availability_zones
    affinity = rules.parse_labels(["gpu_type=A100"], "resource_config.node_affinity", zones)
    anti = rules.parse_labels(["zone=us-east-1b"], "resource_config.node_anti_affinity", zones)
    # When ordered
    pairs = rules.order(rules.resolve(rc), affinity, anti, zones)
    # Then the A100 pools come first in declared order, H100 last, and no us-east-1b pool is left
    assert [(c.index, zone) for c, zone in pairs] == [(1, "us-east-1a"), (2, "us-east-1a"), (0, "us-east-1a")]


def test_capabilities_come_from_the_instance_table() -> None:
    # Given a job that needs NVLink: the H100 (p5) has it, an L4 box does not
    ok = _request(_two(), scheduling={"required_capabilities": ["nvlink", "efa"]})
    _validate(ok)
    single = make_request(resource_config={"gpu_count": 1, "gpu_type": "L4"}, scheduling_config={"required_capabilities": ["nvlink"]})
    with pytest.raises(InvalidRequest) as caught:
        _validate(single)
    assert caught.value.field == "scheduling_config.required_capabilities"
    assert "g6.xlarge" in caught.value.message


def test_an_unknown_capability_is_named() -> None:
    request = make_request(resource_config={"gpu_count": 1}, scheduling_config={"required_capabilities": ["fp8", "warp-drive"]})
    with pytest.raises(InvalidRequest) as caught:
        _validate(request)
    assert caught.value.field == "scheduling_config.required_capabilities[1]"


def test_capabilities_on_a_cpu_job_are_refused() -> None:
    request = make_request(resource_config={"gpu_count": 0}, scheduling_config={"required_capabilities": ["fp8"]})
    with pytest.raises(InvalidRequest) as caught:
        _validate(request, compute="local")
    assert caught.value.field == "scheduling_config.required_capabilities"


def test_a_deadline_no_candidate_can_meet_is_refused() -> None:
    # Given 2 hours of work and a deadline in 1 hour
    late = _two(deadline=(NOW + timedelta(hours=1)).isoformat(), expected_work_seconds=7200)
    with pytest.raises(InvalidRequest) as caught:
        _validate(_request(late))
    assert caught.value.field == "resource_config.placement.deadline"
    # And a deadline in the past
    with pytest.raises(InvalidRequest):
        _validate(_request(_two(deadline=(NOW - timedelta(minutes=1)).isoformat())))
    # While 2 hours of H100 work by a deadline in 6 hours passes: 5 hours on the A100 on-demand fallback
    _validate(_request(_two(deadline=(NOW + timedelta(hours=6)).isoformat(), expected_work_seconds=7200)))
    with pytest.raises(InvalidRequest) as caught:
        _validate(_request(_two(deadline=(NOW + timedelta(hours=5)).isoformat(), expected_work_seconds=7200)))
    assert caught.value.field == "resource_config.placement.deadline"


def test_a_deadline_needs_an_on_demand_candidate() -> None:
    spot_only = {"candidates": [{"gpu_type": "H100", "gpus_per_node": 8}], "deadline": (NOW + timedelta(hours=3)).isoformat()}
    with pytest.raises(InvalidRequest) as caught:
        _validate(_request(spot_only))
    assert caught.value.field == "resource_config.placement.candidates"


def test_schema_refuses_bad_zones_and_both_waits() -> None:
    with pytest.raises(ValidationError, match="availability_zones"):
        ResourceConfig.model_validate({"placement": {"candidates": [{"gpu_type": "L4"}], "availability_zones": ["east"]}})
    with pytest.raises(ValidationError, match="not both"):
        ResourceConfig.model_validate(
            {"placement": {"candidates": [{"gpu_type": "L4"}], "deadline": NOW.isoformat(), "max_wait_seconds": 600}}
        )


def test_blocks_grow_with_repeats_and_preemptions_block_longest() -> None:
    assert rules.block_seconds("preempted", 1) == 30 * 60
    capacity = [rules.block_seconds("capacity", n) for n in (1, 2, 3)]
    assert capacity == sorted(capacity) and capacity[0] < rules.block_seconds("preempted", 1)
    assert rules.block_seconds("preempted", 50) == rules.MAX_BLOCK_SECONDS


def test_the_job_counts_as_its_first_candidate_and_a_conflicting_gpu_field_is_named() -> None:
    # Given candidates and no top-level GPU fields: the job's fields become candidate 0's
    placement = {"candidates": [{"gpu_type": "H100", "gpus_per_node": 8, "nodes": 2}, {"gpu_type": "A100", "gpus_per_node": 8}]}
    rc = ResourceConfig.model_validate({"placement": placement})
    first = rules.first_candidate(rc)
    assert (first.gpu_type, first.gpu_count, first.node_count) == ("H100", 8, 2)
    # And the same values given beside them are fine; another value would be ignored: a 422 naming it
    assert rules.first_candidate(ResourceConfig.model_validate({"gpu_count": 8, "placement": placement})).gpu_count == 8
    with pytest.raises(InvalidRequest) as caught:
        rules.first_candidate(ResourceConfig.model_validate({"gpu_type": "L4", "placement": placement}))
    assert caught.value.field == "resource_config.gpu_type"


def test_an_affinity_no_pool_matches_is_refused_not_ignored() -> None:
    # Given candidates on p5 and p4d: family=g5 would prefer nothing
    with pytest.raises(InvalidRequest) as caught:
        _validate(_request(_two(), node_affinity=["family=p5", "family=g5"]))
    assert caught.value.field == "resource_config.node_affinity[1]"
    # And a zone without placement zones to choose among
    single = make_request(resource_config={"gpu_count": 8, "gpu_type": "H100", "node_affinity": ["zone=us-east-1a"]})
    with pytest.raises(InvalidRequest, match="availability_zones"):
        _validate(single)
    # While the single candidate's own family is a label it matches
    _validate(make_request(resource_config={"gpu_count": 8, "gpu_type": "H100", "node_affinity": ["family=p5"]}))


def test_a_capacity_reservation_is_refused_until_launchers_target_one() -> None:
    with pytest.raises(InvalidRequest, match="not targeted yet") as caught:
        _validate(_request(_two(), node_affinity=["capacity_reservation=cr-0123456789abcdef0"]))
    assert caught.value.field == "resource_config.node_affinity[0]"


@pytest.mark.parametrize(
    ("framework", "words"),
    [
        ({"type": "DEEPSPEED", "config": {"zero_stage": "2"}}, "ZeRO partitions"),
        ({"type": "CUSTOM", "command": ["python", "train.py"]}, "CUSTOM script"),
    ],
)
def test_a_candidate_the_checkpoint_cannot_be_resharded_to_is_named(framework: dict[str, Any], words: str) -> None:
    # Given a DEEPSPEED (or CUSTOM) job whose second candidate has another world size than the first
    placement = {"candidates": [{"gpu_type": "H100", "gpus_per_node": 8}, {"gpu_type": "L40S", "gpus_per_node": 4}]}
    request = _request(placement, batch=4, accumulation=2)
    training = request.training_config.model_copy(update={"framework": request.training_config.framework.model_validate(framework)})
    request = request.model_copy(update={"training_config": training})
    # Then the rule of a resume on another shape (functions/catalog/resharding.py) refuses that candidate
    with pytest.raises(InvalidRequest) as caught:
        rules.adaptations(request.resource_config, request.training_config, request.data_config)
    assert caught.value.field == "resource_config.placement.candidates[1]"
    assert words in caught.value.message
    # And candidates of the same world size stay possible
    same = {"candidates": [{"gpu_type": "H100", "gpus_per_node": 8}, {"gpu_type": "A100", "gpus_per_node": 8}]}
    request = request.model_copy(update={"resource_config": _request(same).resource_config})
    assert [row[0] for row in rules.adaptations(request.resource_config, request.training_config, request.data_config)] == [8, 8]
