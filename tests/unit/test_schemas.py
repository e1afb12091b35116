"""The submit request and the records around it (schemas/): defaults, ranges, unknown fields, refusals."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from schemas.api import PatchJobRequest, RetryRequest
from schemas.checkpoint import checkpoint_id_for, step_of
from schemas.configs import BaseModelSpec, FrameworkType, ModelSource, SaveStrategy, TrainingType
from schemas.job import Job, StatusEvent, SubmitJobRequest
from schemas.status import JobStatus
from tests.helpers.jobs import make_job, request_body


def errors_of(body: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as err:
        SubmitJobRequest.model_validate(body)
    return [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in err.value.errors()]


def test_defaults_of_the_seed() -> None:
    # Given the smallest request: a name, a model, a data source
    request = SubmitJobRequest.model_validate(
        {
            "name": "n",
            "training_config": {"training_type": "SFT", "base_model": {"model_id": "m"}},
            "data_config": {"sources": [{"path": "s3://b/k"}]},
        }
    )
    # Then every default of the seed applies
    tc, dc, oc, sc, rc = (
        request.training_config,
        request.data_config,
        request.output_config,
        request.scheduling_config,
        request.resource_config,
    )
    assert tc.framework.type == FrameworkType.HF_TRAINER and tc.framework.distributed.backend == "nccl"
    assert tc.priority == 5 and tc.max_retries == 0 and tc.hyperparameters == {}
    assert dc.gradient_accumulation_steps == 1 and dc.validation_split == 0.0 and dc.max_seq_length == 2048
    assert oc.checkpoint.save_strategy == SaveStrategy.STEPS and oc.checkpoint.save_steps == 500 and oc.checkpoint.save_total_limit == 3
    assert sc.queue == "default" and sc.priority == 5 and sc.preemptible is False
    assert rc.gpu_count == 1 and request.labels == {}
    assert tc.base_model.resolved_source() == ModelSource.HUB


@pytest.mark.parametrize(
    ("path", "value", "loc"),
    [
        (("scheduling_config", "priority"), 11, "scheduling_config.priority"),
        (("scheduling_config", "priority"), -1, "scheduling_config.priority"),
        (("training_config", "priority"), 42, "training_config.priority"),
        (("data_config", "validation_split"), 1.01, "data_config.validation_split"),
        (("data_config", "validation_split"), -0.1, "data_config.validation_split"),
        (("resource_config", "gpu_count"), -1, "resource_config.gpu_count"),
        (("data_config", "batch_size"), 0, "data_config.batch_size"),
        (("training_config", "training_type"), "PPO", "training_config.training_type"),
        (("training_config", "framework"), {"type": "JAX"}, "training_config.framework.type"),
        (("output_config", "checkpoint"), {"save_strategy": "minutes"}, "output_config.checkpoint.save_strategy"),
        (("scheduling_config", "queue"), "bad queue!", "scheduling_config.queue"),
    ],
)
def test_ranges_and_enums_name_the_field(path: tuple[str, str], value: Any, loc: str) -> None:
    body = request_body()
    body.setdefault(path[0], {})[path[1]] = value
    assert loc in [where for where, _ in errors_of(body)]


def test_on_exceed_takes_its_deprecated_former_name_too_and_refuses_both() -> None:
    # Given max_cost_usd's action under its name, and under its deprecated former name
    named = SubmitJobRequest.model_validate(request_body(scheduling_config={"max_cost_usd": 1.0, "on_exceed": "fail"}))
    former = SubmitJobRequest.model_validate(request_body(scheduling_config={"max_cost_usd": 1.0, "max_cost_on_exceed": "fail"}))
    # Then both mean the same, and the job is written (and answered) under the new name only
    assert named == former and former.scheduling_config.on_exceed == "fail"
    dumped = former.model_dump(mode="json")["scheduling_config"]
    assert dumped["on_exceed"] == "fail" and "max_cost_on_exceed" not in dumped
    assert SubmitJobRequest.model_validate(request_body()).scheduling_config.on_exceed == "pause"
    # And both at once is refused, naming the former one and the new name
    body = request_body(scheduling_config={"on_exceed": "fail", "max_cost_on_exceed": "pause"})
    ((where, message),) = errors_of(body)
    assert where == "scheduling_config.max_cost_on_exceed" and "send on_exceed only" in message
    # And a value it does not take is refused under either name (named as the field, on_exceed)
    assert "scheduling_config.on_exceed" in [w for w, _ in errors_of(request_body(scheduling_config={"max_cost_on_exceed": "stop"}))]


def test_the_edges_of_the_ranges_are_accepted() -> None:
    body = request_body(scheduling_config={"priority": 10}, resource_config={"gpu_count": 0})
    body["data_config"]["validation_split"] = 1.0
    request = SubmitJobRequest.model_validate(body)
    assert request.scheduling_config.priority == 10 and request.data_config.validation_split == 1.0
    assert request.resource_config.gpu_count == 0


@pytest.mark.parametrize(
    "where",
    [(), ("training_config",), ("training_config", "base_model"), ("data_config",), ("resource_config",), ("output_config",)],
)
def test_unknown_fields_are_rejected_at_every_level(where: tuple[str, ...]) -> None:
    body = request_body(output_config={})
    target = body
    for key in where:
        target = target[key]
    target["surprise"] = 1
    assert (".".join([*where, "surprise"]), "Extra inputs are not permitted") in errors_of(body)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"training_type": "RLHF"}, "training_type RLHF needs the rlhf block"),
        ({"framework": {"type": "MEGATRON"}}, "the MEGATRON framework is not supported yet"),
        (
            {"framework": {"type": "DEEPSPEED", "config": {"offload_optimizer_device": "cpu"}}},
            "framework.config.offload_optimizer_device: ZeRO-Offload is not supported",
        ),
        ({"framework": {"type": "DEEPSPEED", "config": {"zero_stage": "4"}}}, "framework.config.zero_stage must be 1, 2 or 3"),
        ({"framework": {"type": "DEEPSPEED", "config": {"stage": "2"}}}, "framework.config.stage is not a DEEPSPEED option"),
        (
            {"framework": {"type": "DEEPSPEED", "distributed": {"world_size": 2}}, "base_model": {"model_id": "m", "dtype": "float16"}},
            "base_model.dtype float16 is not supported with DEEPSPEED",
        ),
        ({"training_type": "QLORA"}, "QLORA needs a GPU"),
    ],
)
def test_features_we_cannot_offer_are_refused_clearly(change: dict[str, Any], message: str) -> None:
    body = request_body()
    body["training_config"].update(change)
    assert any(message in msg for _, msg in errors_of(body))


def test_deepspeed_is_accepted_with_its_zero_stage() -> None:
    body = request_body()
    body["training_config"]["framework"] = {"type": "DEEPSPEED", "config": {"zero_stage": "3"}, "distributed": {"world_size": 2}}
    assert SubmitJobRequest.model_validate(body).training_config.framework.zero_stage() == 3
    body["training_config"]["framework"] = {"type": "DEEPSPEED", "distributed": {"world_size": 2}}
    assert SubmitJobRequest.model_validate(body).training_config.framework.zero_stage() == 2


def test_qlora_on_a_gpu_is_accepted() -> None:
    body = request_body(resource_config={"gpu_count": 1})
    body["training_config"]["training_type"] = "QLORA"
    assert SubmitJobRequest.model_validate(body).training_config.training_type == TrainingType.QLORA


def test_consistency_rules() -> None:
    with pytest.raises(ValidationError, match=r"model_kwargs\.architecture is required"):
        BaseModelSpec(model_id="x", source=ModelSource.CONFIG)
    body = request_body()
    body["training_config"]["framework"] = {"type": "CUSTOM"}
    assert any("custom_script_path or command is required" in m for _, m in errors_of(body))
    assert any("hub_repo_id is required" in m for _, m in errors_of(request_body(output_config={"push_to_hub": True})))
    assert any(f == "labels" and "at most 32 keys" in m for f, m in errors_of(request_body(labels={f"k{i}": "v" for i in range(33)})))
    assert BaseModelSpec(model_id="s3://b/m").resolved_source() == ModelSource.S3
    assert BaseModelSpec(model_id="./m").resolved_source() == ModelSource.LOCAL


def test_effective_priority_prefers_scheduling_config() -> None:
    only_training = request_body()
    only_training["training_config"]["priority"] = 8
    assert SubmitJobRequest.model_validate(only_training).effective_priority == 8
    both = request_body(scheduling_config={"priority": 2})
    both["training_config"]["priority"] = 8
    assert SubmitJobRequest.model_validate(both).effective_priority == 2


def test_the_hub_token_is_masked_except_for_storage() -> None:
    job = make_job(request={"output_config": {"push_to_hub": True, "hub_repo_id": "o/m", "hub_token": "hf_secret"}})
    assert job.model_dump(mode="json")["output_config"]["hub_token"] == "**********"
    assert "hf_secret" not in job.model_dump_json()
    stored = job.model_dump(mode="json", context={"reveal_secrets": True})
    assert stored["output_config"]["hub_token"] == "hf_secret"
    assert Job.model_validate(stored).output_config.hub_token.get_secret_value() == "hf_secret"  # type: ignore[union-attr]


def test_a_job_round_trips_and_gives_back_its_request() -> None:
    job = make_job(status=JobStatus.QUEUED, labels={"team": "x"})
    assert Job.model_validate_json(job.model_dump_json()) == job
    request = job.submit_request()
    assert request.name == job.name and request.training_config == job.training_config


def test_status_events_use_from_and_to() -> None:
    event = StatusEvent(
        at=datetime(2026, 1, 1, tzinfo=UTC), from_status=None, to_status=JobStatus.PENDING, reason="submitted", actor="user"
    )
    doc = json.loads(event.model_dump_json())
    assert doc == {"at": "2026-01-01T00:00:00Z", "from": None, "to": "PENDING", "reason": "submitted", "actor": "user"}
    assert StatusEvent.model_validate(doc) == event


def test_verb_bodies() -> None:
    with pytest.raises(ValidationError, match="nothing to change"):
        PatchJobRequest()
    with pytest.raises(ValidationError, match="new_resource_config is required"):
        RetryRequest(modify_resources=True)
    with pytest.raises(ValidationError):
        PatchJobRequest.model_validate({"status": "COMPLETED"})
    assert RetryRequest().checkpoint_id == "" and not RetryRequest().modify_resources


def test_checkpoint_ids() -> None:
    assert checkpoint_id_for(40) == "step-000040" and step_of("step-000040") == 40
    with pytest.raises(ValueError, match="not a checkpoint id"):
        step_of("latest")


# --- what openapi.json states is what the models refuse (found by the fuzzer, tests/e2e/test_fuzz_api.py) ---


def test_an_empty_patch_is_refused_and_the_schema_says_so() -> None:
    assert PatchJobRequest.model_json_schema()["minProperties"] == 1
    with pytest.raises(ValidationError, match="nothing to change"):
        PatchJobRequest.model_validate({})
    assert PatchJobRequest.model_validate({"name": "renamed"}).name == "renamed"


def test_an_empty_event_pattern_is_refused_and_the_schema_says_so() -> None:
    from schemas.retraining import EventPatternTrigger

    assert EventPatternTrigger.model_json_schema()["properties"]["pattern"]["minProperties"] == 1
    with pytest.raises(ValidationError, match="non-empty"):
        EventPatternTrigger.model_validate({"type": "event", "pattern": {}})
    assert EventPatternTrigger.model_validate({"type": "event", "pattern": {"source": ["aws.s3"]}}).pattern == {"source": ["aws.s3"]}


def test_numbers_are_numbers_not_booleans_or_strings() -> None:
    # openapi.json says integer/number; pydantic's lax mode took true and "5" (found by the fuzzer)
    body = request_body()
    body["training_config"]["priority"] = False
    with pytest.raises(ValidationError, match=r"priority\n\s+must be a number, not false"):
        SubmitJobRequest.model_validate(body)
    body = request_body()
    body["scheduling_config"] = {"max_cost_usd": "1.5"}
    with pytest.raises(ValidationError, match=r'scheduling_config\.max_cost_usd\n\s+must be a number, not "1\.5"'):
        SubmitJobRequest.model_validate(body)
    # And numbers (an optional one, a float given as an int) still pass
    body["scheduling_config"] = {"max_cost_usd": 2, "priority": 3}
    assert SubmitJobRequest.model_validate(body).scheduling_config.max_cost_usd == 2.0
    with pytest.raises(ValidationError, match="must be a number"):
        PatchJobRequest.model_validate({"priority": True})


def test_booleans_are_booleans_not_numbers_or_strings() -> None:
    body = request_body()
    body["training_config"]["base_model"]["trust_remote_code"] = 0
    with pytest.raises(ValidationError, match=r"base_model\.trust_remote_code\n\s+must be true or false, not 0"):
        SubmitJobRequest.model_validate(body)
    body["training_config"]["base_model"]["trust_remote_code"] = "yes"
    with pytest.raises(ValidationError, match="must be true or false"):
        SubmitJobRequest.model_validate(body)
    body["training_config"]["base_model"]["trust_remote_code"] = True
    assert SubmitJobRequest.model_validate(body).training_config.base_model.trust_remote_code is True
