"""The trainer's reports through CloudWatch Logs (functions/service/trainer_reports.py, the events handler)
applied by the lifecycle service on in-memory fakes: a recorded subscription delivery
(tests/events/cloudwatch_logs_trainer_reports.json: one SageMaker run's TRAINPLANE_EVENT lines),
delivered once, twice, out of order, and not at all (then S3 is what the record is caught up from).
"""

from __future__ import annotations

import base64
import gzip
import json
import random
from typing import Any

import pytest

from functions import composition
from functions.handlers import events as handler
from functions.service.ports import RunDescription, RunState
from functions.service.run_specs import _size_of
from functions.service.trainer_reports import LogLine, TrainerLogReports, stream_ref
from schemas.checkpoint import CheckpointManifest
from schemas.job import Job, StatusEvent
from schemas.status import JobStatus
from schemas.trainer import TrainerEvent, TrainerEventKind
from tests.helpers.events import EVENTS_DIR, FakeLambdaContext
from tests.lifecycle_support import make_job, make_request
from tests.unit.test_statemachine_tasks import EXEC, World

S = JobStatus
RECORDED = json.loads((EVENTS_DIR / "cloudwatch_logs_trainer_reports.json").read_text())
JOB_ID = "job-20260101-0123456789ab"


def decoded(event: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(gzip.decompress(base64.b64decode(event["awslogs"]["data"]))))


def encoded(batch: dict[str, Any]) -> dict[str, Any]:
    return {"awslogs": {"data": base64.b64encode(gzip.compress(json.dumps(batch).encode())).decode()}}


def batches(order: list[int]) -> list[dict[str, Any]]:
    """The recorded delivery split into one delivery per line, in `order`."""
    batch = decoded(RECORDED)
    return [encoded({**batch, "logEvents": [batch["logEvents"][i]]}) for i in order]


@pytest.fixture
def world() -> Any:
    w = World()
    request = make_request("recorded", max_steps=12, save_steps=4)
    job = make_job(request).model_copy(update={"job_id": JOB_ID})
    config = job.output_config.checkpoint.model_copy(
        update={"metric_for_best_model": "loss", "greater_is_better": True, "save_total_limit": None}
    )
    job = job.model_copy(update={"output_config": job.output_config.model_copy(update={"checkpoint": config})})
    w.repo.create(job, StatusEvent(at=job.created_at, to_status=S.PENDING, reason="submitted"))
    w.repo.annotate(JOB_ID, {"execution_arn": EXEC})
    w.to_training(JOB_ID)
    composition.configure(trainer_reports=TrainerLogReports(w.svc))
    try:
        yield w
    finally:
        composition.reset()


def deliver(event: dict[str, Any]) -> dict[str, Any]:
    return handler.lambda_handler(event, FakeLambdaContext())  # type: ignore[arg-type]


def state(job: Job) -> dict[str, Any]:
    """What the reports decide: status, checkpoints, latest, best, progress."""
    return {
        "status": job.status,
        "checkpoints": [(r.checkpoint_id, r.step, r.metrics, r.uri, r.created_at) for r in job.checkpoints],
        "latest": job.latest_checkpoint_id,
        "best": job.best_checkpoint_id,
        "progress": (job.progress.step, job.progress.total_steps, job.progress.percent, job.progress.loss),
    }


EXPECTED = {
    "status": S.EXPORTING,
    "checkpoints": [
        (
            f"step-{s:06d}",
            s,
            {"loss": round(1 / (1 + s), 6)},
            f"s3://bkt/jobs/{JOB_ID}/checkpoints/step-{s:06d}",
            None,
        )  # the own prefix, whatever the report says
        for s in (4, 8)
    ],
    "latest": "step-000008",
    "best": "step-000004",  # greater_is_better on loss: the earlier one
    "progress": (12, 12, 100.0, round(1 / 13, 6)),
}


def expected_with_times(job: Job) -> dict[str, Any]:
    expected = dict(EXPECTED)
    expected["checkpoints"] = [(*c[:4], r.created_at) for c, r in zip(EXPECTED["checkpoints"], job.checkpoints, strict=True)]
    return expected


def test_the_recorded_delivery_fills_the_record_as_the_stdout_reader_does(world: World) -> None:
    # When the subscription delivers the recorded batch
    outcome = deliver(RECORDED)
    # Then every report of the run was applied: phases, progress, checkpoints (with the manifests' times)
    assert outcome["action"] == "reports" and outcome["jobs"] == [JOB_ID]
    job = world.repo.get(JOB_ID)
    assert state(job) == expected_with_times(job)
    assert [r.created_at.isoformat() for r in job.checkpoints] == ["2026-01-01T00:00:01.500000+00:00", "2026-01-01T00:00:02.500000+00:00"]
    assert world.statuses(JOB_ID)[-6:] == ["TRAINING", "CHECKPOINTING", "TRAINING", "CHECKPOINTING", "TRAINING", "EXPORTING"]
    assert {e.actor for e in world.repo.history(JOB_ID)[-5:]} == {"trainer"}


def test_the_same_delivery_twice_changes_nothing(world: World) -> None:
    deliver(RECORDED)
    before, history = world.repo.get(JOB_ID), world.repo.history(JOB_ID)
    # When CloudWatch Logs delivers the same batch again (at least once), and each line once more on its own
    deliver(RECORDED)
    for event in batches(list(range(len(decoded(RECORDED)["logEvents"])))):
        deliver(event)
    # Then the record and its history are exactly as they were
    assert world.repo.get(JOB_ID) == before
    assert world.repo.history(JOB_ID) == history


@pytest.mark.parametrize("order", ["reversed", "shuffled"])
def test_reports_out_of_order_end_in_the_same_state(world: World, order: str) -> None:
    count = len(decoded(RECORDED)["logEvents"])
    indexes = list(range(count))[::-1] if order == "reversed" else random.Random(13).sample(range(count), count)
    # When the lines arrive one delivery each, out of order
    for event in batches(indexes):
        deliver(event)
    # Then the record ends where in-order delivery leaves it: an older report never moves it back
    job = world.repo.get(JOB_ID)
    assert state(job) == expected_with_times(job)
    if order == "reversed":
        # EXPORTING came first; every older phase report was stale
        assert world.statuses(JOB_ID)[-2:] == ["TRAINING", "EXPORTING"]


def test_an_older_phase_report_never_moves_the_job_back(world: World) -> None:
    def phase(name: str, seq: int) -> None:
        world.svc.on_trainer_event(JOB_ID, 1, TrainerEvent(kind=TrainerEventKind.PHASE, time=0, data={"phase": name}, seq=seq))

    phase("CHECKPOINTING", 10)
    phase("TRAINING", 20)
    phase("CHECKPOINTING", 15)  # late
    assert world.repo.get(JOB_ID).status == S.TRAINING
    phase("TRAINING", 30)  # already TRAINING: remembered, so the late one below stays stale
    phase("CHECKPOINTING", 25)
    assert world.repo.get(JOB_ID).status == S.TRAINING and world.repo.get(JOB_ID).report_seq == 30


def test_reports_of_other_jobs_attempts_and_streams_are_ignored(world: World) -> None:
    batch = decoded(RECORDED)
    line = batch["logEvents"][1]
    report = TrainerEvent.find_in(line["message"])
    assert report is not None
    before, history = world.repo.get(JOB_ID), world.repo.history(JOB_ID)
    # A report of a job this deployment does not have (the SageMaker group is the account's) is ignored
    other = report.model_copy(update={"job_id": "job-of-another-stage"})
    line_of_other = {**line, "message": other.to_line()}
    outcome = deliver(encoded({**batch, "logStream": "tp-job-of-another-stage-a1/algo-1-1", "logEvents": [line_of_other]}))
    assert outcome == {"action": "reports", "applied": 0, "ignored": 1, "jobs": []}
    # Reports of another attempt of this job (a checkpoint, progress, a phase: each would change the record
    # if it were this attempt's) change nothing: no status, progress, checkpoint, heartbeat or history
    attempt_2 = [
        {**raw, "message": TrainerEvent.find_in(raw["message"]).model_copy(update={"attempt": 2}).to_line()}  # type: ignore[union-attr]
        for raw in (batch["logEvents"][i] for i in (5, 6, 7, 9))
    ]
    deliver(encoded({**batch, "logStream": "tp-" + JOB_ID + "-a2/algo-1-1", "logEvents": attempt_2}))
    # (and handed to the lifecycle as attempt 1's by a reader that names the attempt it reads, e.g. local mode's)
    for raw in attempt_2:
        world.svc.on_trainer_event(JOB_ID, 1, TrainerEvent.find_in(raw["message"]))  # type: ignore[arg-type]
    assert world.repo.get(JOB_ID) == before and world.repo.history(JOB_ID) == history
    # The same reports of this attempt do change it (the check above could fail)
    deliver(encoded({**batch, "logEvents": [batch["logEvents"][i] for i in (5, 6, 7)]}))
    assert world.repo.get(JOB_ID).status == S.CHECKPOINTING and world.repo.get(JOB_ID).checkpoints
    # A report naming a job its stream is not of
    current = world.repo.get(JOB_ID)
    outcome = deliver(encoded({**batch, "logStream": "tp-job-x-a1/algo-1-1", "logEvents": [batch["logEvents"][8]]}))
    assert outcome == {"action": "reports", "applied": 0, "ignored": 1, "jobs": []}
    assert world.repo.get(JOB_ID) == current
    # CloudWatch's CONTROL_MESSAGE when a subscription is created is not a report
    assert deliver(encoded({**batch, "messageType": "CONTROL_MESSAGE", "logEvents": []}))["action"] == "ignored"


def test_stream_names_of_both_engines() -> None:
    assert stream_ref(f"tp-{JOB_ID}-a3/algo-1-1767225600") == (JOB_ID, 3)
    assert stream_ref(f"{JOB_ID}/002/trainer") == (JOB_ID, 2)
    assert stream_ref("some-other-job/algo-1-1") is None


def test_reports_without_ids_take_them_from_the_stream(world: World) -> None:
    bare = TrainerEvent(kind=TrainerEventKind.PHASE, time=0, data={"phase": "CHECKPOINTING"})
    outcome = TrainerLogReports(world.svc).handle("/g", f"{JOB_ID}/001/trainer", [LogLine("1", 1, "2026 " + bare.to_line())])
    assert outcome.applied == 1 and world.repo.get(JOB_ID).status == S.CHECKPOINTING


def test_two_reports_sharing_a_line_are_both_applied(world: World) -> None:
    # Given one log message holding two reports with no newline between them (a CUSTOM script's SIGTERM
    # handler run twice, the second inside the first one's print: tests/integration/test_lifecycle_launcher.py)
    data = {"checkpoint_id": "step-000001", "step": 1, "metrics": {"loss": 1.5}}
    saved = TrainerEvent(kind=TrainerEventKind.CHECKPOINT, time=0, data=data)
    line = LogLine("1", 1, "2026 " + saved.to_line() + saved.to_line())
    # When it is delivered
    outcome = TrainerLogReports(world.svc).handle("/g", f"{JOB_ID}/001/trainer", [line])
    # Then both reports were applied, and the checkpoint is on the record once
    assert outcome.applied == 2 and [r.checkpoint_id for r in world.repo.get(JOB_ID).checkpoints] == ["step-000001"]


def test_every_report_of_a_line_is_found_and_nothing_else() -> None:
    first = TrainerEvent(kind=TrainerEventKind.FAILURE, time=1, data={"message": "printed 'TRAINPLANE_EVENT {' in a string"})
    second = TrainerEvent(kind=TrainerEventKind.DONE, time=2, data={"exit_code": 75})
    # Two on one line, the first one's string holding the prefix itself: each object is read to its end
    assert TrainerEvent.all_in(first.to_line() + second.to_line()) == [first, second]
    # After a shipper's timestamp, with text between and after them, and a malformed one skipped
    assert TrainerEvent.all_in(f"2026 {first.to_line()} and {second.to_line()} tail") == [first, second]
    assert TrainerEvent.all_in('TRAINPLANE_EVENT {"kind": "nope", "time": 1} TRAINPLANE_EVENT {broken ' + second.to_line()) == [second]
    assert TrainerEvent.find_in("x " + second.to_line() + first.to_line()) == second
    # A plain line, a prefix with nothing after it: no report
    assert TrainerEvent.all_in("a plain line") == [] == TrainerEvent.all_in("TRAINPLANE_EVENT ")
    assert TrainerEvent.find_in("TRAINPLANE_EVENT {") is None


def test_a_run_none_of_whose_reports_arrived_ends_with_the_record_s3_holds(world: World) -> None:
    # Given the run wrote its checkpoints (manifests) and metrics.jsonl, and no report reached the service
    for step in (4, 8):
        manifest = CheckpointManifest(
            checkpoint_id=f"step-{step:06d}",
            job_id=JOB_ID,
            step=step,
            metrics={"loss": round(1 / (1 + step), 6)},
            files=[],
            created_at=world.now,
        )
        world.artifacts.objects[f"jobs/{JOB_ID}/checkpoints/step-{step:06d}/manifest.json"] = manifest.model_dump_json().encode()
    points = [json.dumps({"step": s, "loss": round(1 / (1 + s), 6), "attempt": 1}) for s in range(1, 13)]
    world.artifacts.objects[f"jobs/{JOB_ID}/metrics.jsonl"] = "\n".join(points).encode()
    # When the run's end is reported (EventBridge)
    world.svc.on_run_finished(JOB_ID, 1, RunDescription(state=RunState.COMPLETED, run_seconds=3.0))
    # Then the job completed with the checkpoints, latest, best and progress the reports would have given
    job = world.repo.get(JOB_ID)
    assert job.status == S.COMPLETED
    assert [(r.checkpoint_id, r.uri) for r in job.checkpoints] == [
        (f"step-{s:06d}", f"s3://bkt/jobs/{JOB_ID}/checkpoints/step-{s:06d}") for s in (4, 8)
    ]
    assert (job.latest_checkpoint_id, job.best_checkpoint_id) == ("step-000008", "step-000004")
    assert (job.progress.step, job.progress.total_steps, job.progress.percent, job.progress.loss) == (12, 12, 100.0, round(1 / 13, 6))
    # And a report arriving after all that changes nothing
    deliver(RECORDED)
    again = world.repo.get(JOB_ID)
    assert (again.status, again.latest_checkpoint_id, again.best_checkpoint_id, again.progress.step) == (
        S.COMPLETED,
        "step-000008",
        "step-000004",
        12,
    )


def test_a_checkpoint_records_the_size_its_manifest_lists(world: World) -> None:
    # Given the recorded delivery, whose checkpoint reports carry their manifests' files
    deliver(RECORDED)
    job = world.repo.get(JOB_ID)
    # Then each checkpoint's size is the sum of its files' sizes (the dashboard shows it)
    assert job.checkpoints and all(c.size_bytes == 30 for c in job.checkpoints)


def test_the_size_of_a_manifest_without_files_is_unknown() -> None:
    assert _size_of(None) is None and _size_of([]) is None and _size_of("x") is None
    assert _size_of([{"size": 3}, {"size": 4}, {"size": -1}, "junk"]) == 7


@pytest.mark.parametrize(("pending", "ends"), [("pause", S.PAUSED), ("preempt", S.QUEUED)])
def test_a_stop_s_timeline_ends_checkpointing_then_paused_or_queued(pending: str, ends: JobStatus) -> None:
    # Given a training job asked to stop with a checkpoint (a pause or a budget pause; a reclaim: preempt)
    w = World()
    job = w.submit(max_steps=40)
    w.to_training(job.job_id)
    w.repo.update(job.job_id, w.repo.get(job.job_id).version, {"pending_action": pending, "pending_reason": "stop"})

    def phase(name: str, seq: int) -> None:
        w.svc.on_trainer_event(job.job_id, 1, TrainerEvent(kind=TrainerEventKind.PHASE, time=0, data={"phase": name}, seq=seq))

    # When the trainer reports its stop's checkpoint and then (an older trainer) TRAINING as it exits
    phase("CHECKPOINTING", 1)
    phase("TRAINING", 2)
    # Then the job stays CHECKPOINTING, and the run's end lands it from there
    assert w.repo.get(job.job_id).status == S.CHECKPOINTING
    w.svc.on_run_finished(job.job_id, 1, RunDescription(state=RunState.STOPPED))
    assert w.statuses(job.job_id)[-3:] == ["TRAINING", "CHECKPOINTING", ends.value]


def test_without_a_pending_stop_training_follows_a_checkpoint(world: World) -> None:
    # A periodic checkpoint (nothing pending): the trainer goes back to TRAINING, and so does the job
    world.svc.on_trainer_event(JOB_ID, 1, TrainerEvent(kind=TrainerEventKind.PHASE, time=0, data={"phase": "CHECKPOINTING"}, seq=1))
    world.svc.on_trainer_event(JOB_ID, 1, TrainerEvent(kind=TrainerEventKind.PHASE, time=0, data={"phase": "TRAINING"}, seq=2))
    assert world.repo.get(JOB_ID).status == S.TRAINING
