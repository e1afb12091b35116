"""The forecast's per-shape records on moto and GET /forecast-accuracy through the API Lambda (issue 25 point 6)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from functions import composition
from functions.adapters.forecast_records import DynamoShapeRecords
from functions.errors import ConcurrentModification
from schemas.budgets import ShapeRecord
from tests.fakes import RecordingWorkflow
from tests.helpers.api_lambda import Api
from tests.helpers.aws import fresh_resources
from tests.helpers.events import Caller
from tests.helpers.forecast import finished_job
from tests.helpers.jobs import ALICE, request_body

ALICE_CALLER = Caller("alice", ALICE, unique_id="AIDAEXAMPLEALICE")


@pytest.fixture
def call(aws: Any) -> Iterator[Api]:
    settings = fresh_resources(aws, local_gpu_inventory="H100=4")
    composition.configure(settings=settings, clients=aws, workflow=RecordingWorkflow())
    try:
        yield Api(aws, RecordingWorkflow(), settings)
    finally:
        composition.reset()


def test_a_shape_record_is_written_only_over_the_version_it_read(call: Api) -> None:
    records = DynamoShapeRecords(call.clients, call.settings.jobs_table)
    records.put(ShapeRecord(shape="H100x1/LORA", count=1), 0)
    with pytest.raises(ConcurrentModification):
        records.put(ShapeRecord(shape="H100x1/LORA", count=9), 0)  # a second "first" completion lost its race
    records.put(ShapeRecord(shape="H100x1/LORA", count=2), 1)
    with pytest.raises(ConcurrentModification):
        records.put(ShapeRecord(shape="H100x1/LORA", count=9), 1)
    stored = records.get("H100x1/LORA")
    assert stored is not None and (stored.count, stored.version) == (2, 2)
    assert [r.shape for r in records.list()] == ["H100x1/LORA"] and records.get("T4x1/LORA") is None


def test_forecast_accuracy_and_the_dry_run_learn_from_completed_jobs(call: Api) -> None:
    # Given: no history, the accuracy is empty and the dry run answers the prior
    body = request_body(resource_config={"gpu_count": 1, "gpu_type": "H100"})
    body["training_config"]["hyperparameters"]["max_steps"] = "2000"
    body["training_config"]["base_model"] = {"model_id": "meta-llama/Llama-3.2-1B"}  # the finished jobs' model (its size bucket)
    assert call.route("GET", "/forecast-accuracy", caller=ALICE_CALLER).body == {"shapes": []}
    assert call.route("POST", "/jobs", caller=ALICE_CALLER, body=body, query={"dry_run": "true"}).body["basis"] == "prior"

    # When: three H100 x 1 LoRA jobs complete at 0.5 s/step (recorded as the lifecycle records them)
    learner = composition.forecast_learner()
    for steps in (100, 400, 1000):
        assert learner.record(finished_job(steps, steps * 0.5))

    # Then: GET /forecast-accuracy gives the shape's count and median error, and the dry run uses the throughput
    reply = call.route("GET", "/forecast-accuracy", caller=ALICE_CALLER)
    assert reply.status == 200, reply.body
    [shape] = reply.body["shapes"]
    assert shape["shape"] == "H100x1/LORA/1B-3B" and shape["count"] == 3 and shape["scored"] == 3
    assert shape["seconds_per_step"] == pytest.approx(0.5) and shape["median_abs_error_percent"] is not None
    forecast = call.route("POST", "/jobs", caller=ALICE_CALLER, body=body, query={"dry_run": "true"}).body
    assert "steps x measured seconds/step (3 finished jobs" in forecast["basis"]
    assert forecast["duration_seconds"] == pytest.approx(1000.0)
    assert forecast["duration_low_seconds"] < 1000.0 < forecast["duration_high_seconds"]
