"""The `trainplane` CLI (typer's CliRunner) against the stand-in API."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from schemas.status import JobStatus
from schemas.tracking import TrackingRecord
from tests.unit import test_client_standin
from tests.unit.test_client_standin import ACCESS_KEY, MINIMAL_REQUEST, SECRET_KEY, StandInApi
from trainplane.cli import app

standin = test_client_standin.standin  # the fixture


@pytest.fixture
def cli(standin: StandInApi, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    # The stand-in's keys in the chain, its URL as the endpoint, a wide terminal for whole table cells.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("TRAINPLANE_ENDPOINT", standin.url)
    monkeypatch.setenv("TRAINPLANE_STATE_DIR", str(tmp_path / "no-state"))
    runner = CliRunner()

    def invoke(*args: str, stdin: str | None = None) -> Result:
        return runner.invoke(app, list(args), input=stdin, env={"COLUMNS": "250"}, catch_exceptions=False)

    return invoke


def write(tmp_path: Path, name: str, doc: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc) if name.endswith((".yaml", ".yml")) else json.dumps(doc))
    return str(path)


def test_submit_a_yaml_file_prints_the_new_job(cli: Any, standin: StandInApi, tmp_path: Path) -> None:
    # Given a job file in YAML
    path = write(tmp_path, "job.yaml", MINIMAL_REQUEST)
    # When it is submitted with an idempotency key
    result = cli("jobs", "submit", path, "--idempotency-key", "abc")
    # Then the job exists, the key was sent, and its id is printed
    assert result.exit_code == 0, result.output
    (job_id,) = standin.jobs
    assert job_id in result.stdout
    assert "PENDING" in result.stdout
    assert standin.calls("POST", "/jobs")[0].headers["idempotency-key"] == "abc"


def test_submit_json_from_stdin_with_json_output(cli: Any, standin: StandInApi) -> None:
    # Given a job on stdin  When submitted with --output json
    result = cli("--output", "json", "jobs", "submit", "-", stdin=json.dumps(MINIMAL_REQUEST))
    # Then stdout is the job as JSON
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["job_id"] in standin.jobs


def test_submit_wait_watches_to_completion(cli: Any, standin: StandInApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a job file and a server that walks every new job to COMPLETED
    path = write(tmp_path, "job.json", MINIMAL_REQUEST)
    original = standin._create

    def create_and_script(*args: Any, **kwargs: Any) -> Any:
        job = original(*args, **kwargs)
        standin.script[job.job_id] = [JobStatus.QUEUED, JobStatus.TRAINING, JobStatus.COMPLETED]
        return job

    monkeypatch.setattr(standin, "_create", create_and_script)
    monkeypatch.setattr("trainplane.client.time.sleep", lambda s: None)
    # When submitted with --wait
    result = cli("jobs", "submit", path, "--wait")
    # Then it exits 0 after the job completed
    assert result.exit_code == 0, result.output
    assert "COMPLETED" in result.stdout


def test_watch_exits_non_zero_when_the_job_fails(cli: Any, standin: StandInApi, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a training job that fails on the next read
    job = standin.add_job(status=JobStatus.TRAINING)
    standin.script[job.job_id] = [JobStatus.FAILED]
    monkeypatch.setattr("trainplane.client.time.sleep", lambda s: None)
    # When it is watched
    result = cli("jobs", "watch", job.job_id)
    # Then the CLI reports FAILED and exits 1
    assert result.exit_code == 1
    assert "FAILED" in result.stdout


def test_watch_timeout_names_the_last_status(cli: Any, standin: StandInApi) -> None:
    # Given a job stuck in TRAINING  When watched with a short timeout
    job = standin.add_job(status=JobStatus.TRAINING)
    result = cli("jobs", "watch", job.job_id, "--timeout", "0.2", "--poll", "0.1")
    # Then it exits 1 saying where it was stuck
    assert result.exit_code == 1
    assert "last status TRAINING" in result.stderr


def test_invalid_job_file_prints_each_field_error(cli: Any, tmp_path: Path) -> None:
    # Given a job whose batch size and priority are out of range
    bad = {**MINIMAL_REQUEST, "data_config": {"sources": [{"path": "x"}], "batch_size": 0}, "scheduling_config": {"priority": 42}}
    path = write(tmp_path, "bad.yaml", bad)
    # When it is submitted
    result = cli("jobs", "submit", path)
    # Then the API's message and both fields are printed on stderr, exit 1
    assert result.exit_code == 1
    assert "422" in result.stderr
    assert "data_config.batch_size" in result.stderr
    assert "scheduling_config.priority" in result.stderr


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("broken.yaml", "name: [unclosed", "not valid YAML"),
        ("broken.json", "{", "not valid JSON"),
        ("list.yaml", "- a\n- b\n", "must hold a mapping"),
        ("missing.yaml", None, "cannot read"),
    ],
)
def test_unreadable_job_files_are_usage_errors(cli: Any, tmp_path: Path, name: str, content: str | None, message: str) -> None:
    # Given a file that is not a job document (or no file)
    if content is not None:
        (tmp_path / name).write_text(content)
    # When it is submitted
    result = cli("jobs", "submit", str(tmp_path / name))
    # Then it is a usage error (exit 2) that says why
    assert result.exit_code == 2
    assert message in result.stderr


def test_list_filters_and_renders_a_table(cli: Any, standin: StandInApi) -> None:
    # Given three jobs with labels
    a = standin.add_job(name="alpha", labels={"team": "x", "exp": "1"})
    b = standin.add_job(name="beta", labels={"team": "x", "exp": "2"})
    standin.add_job(name="gamma", labels={"team": "y"})
    # When listed with two labels, and with one
    one = cli("jobs", "list", "--label", "team=x", "--label", "exp=2")
    two = cli("jobs", "list", "--label", "team=x", "--status", "queued")
    # Then the labels were ANDed on the server and the table shows the matching jobs
    assert one.exit_code == 0, one.output
    assert b.job_id in one.stdout
    assert a.job_id not in one.stdout
    assert a.job_id in two.stdout
    assert "gamma" not in two.stdout
    assert dict(standin.calls("GET", "/jobs")[0].query)["labels.exp"] == "2"


def test_list_limit_stops_paging_and_json_output_is_parseable(cli: Any, standin: StandInApi) -> None:
    # Given 120 jobs
    for i in range(120):
        standin.add_job(name=f"j{i}")
    # When at most 105 are listed as JSON
    result = cli("-o", "json", "jobs", "list", "--limit", "105")
    # Then exactly 105 come back, newest first, in two pages
    jobs = json.loads(result.stdout)["jobs"]
    assert len(jobs) == 105
    assert jobs[0]["name"] == "j119"
    assert len(standin.calls("GET", "/jobs")) == 2


def test_bad_label_and_status_are_usage_errors(cli: Any) -> None:
    # Given the CLI  When a label lacks '=' or a status is unknown  Then exit 2 naming the option
    bad_label = cli("jobs", "list", "--label", "team")
    bad_status = cli("jobs", "list", "--status", "RUNNING")
    assert bad_label.exit_code == 2
    assert "--label expects KEY=VALUE" in bad_label.stderr
    assert bad_status.exit_code == 2


def test_get_shows_the_job_and_json_gives_the_record(cli: Any, standin: StandInApi) -> None:
    # Given a job
    job = standin.add_job(name="shown", labels={"team": "x"})
    # When shown as a table and as JSON
    table = cli("jobs", "get", job.job_id)
    as_json = cli("jobs", "get", job.job_id, "--json")
    # Then both describe it
    assert table.exit_code == 0, table.output
    assert "shown" in table.stdout
    assert "team=x" in table.stdout
    assert "cpu only" in table.stdout
    assert json.loads(as_json.stdout)["job_id"] == job.job_id


def test_get_shows_the_tracker_run_the_trainer_reported(cli: Any, standin: StandInApi) -> None:
    # Given a job tracked on MLflow and TensorBoard, before and after its trainer reported the run
    tracking = {"mlflow": {"tracking_uri": "http://127.0.0.1:5000", "experiment_name": "team"}, "tensorboard": {}}
    job = standin.add_job(name="tracked", output_config={"tracking": tracking})
    before = cli("jobs", "get", job.job_id)
    url = "http://127.0.0.1:5000/#/experiments/3/runs/abc123"
    record = {
        "mlflow_run_id": "abc123",
        "mlflow_run_url": url,
        "mlflow_parent_run_id": "p1",
        "tensorboard_uri": "s3://b/jobs/j/tensorboard",
    }
    standin.set_status(job.job_id, JobStatus.TRAINING, tracking=TrackingRecord.model_validate(record).model_dump())
    after = cli("jobs", "get", job.job_id)
    as_json = cli("jobs", "get", job.job_id, "--json")
    # Then `jobs get` says where the run will be, then shows it (URL, parent run, event files), and JSON has the record
    assert before.exit_code == 0 and after.exit_code == 0, after.output
    assert "not started yet" in before.stdout and "http://127.0.0.1:5000" in before.stdout
    flat = " ".join(after.stdout.split())
    assert url in flat
    assert "p1" in after.stdout and "s3://b/jobs/j/tensorboard" in flat.replace(" ", "")
    assert json.loads(as_json.stdout)["tracking"]["mlflow_run_id"] == "abc123"


def test_get_shows_the_wandb_run_online_and_offline(cli: Any, standin: StandInApi) -> None:
    # Given an online W&B job whose trainer reported its run, and an offline retry of another job
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:trainplane/123456789012/user/alice/wandb"
    online = standin.add_job(
        name="online", output_config={"tracking": {"wandb": {"project": "bot", "entity": "acme", "api_key_secret_arn": secret}}}
    )
    before = cli("jobs", "get", online.job_id)
    url = "https://wandb.ai/acme/bot/runs/job-1"
    standin.set_status(online.job_id, JobStatus.TRAINING, tracking={"wandb_run_id": "job-1", "wandb_run_url": url, "wandb_group": "job-1"})
    offline = standin.add_job(name="offline", output_config={"tracking": {"wandb": {"project": "bot", "mode": "offline"}}})
    files = "s3://b/jobs/job-2/wandb"
    record = {"wandb_run_id": "job-2", "wandb_group": "job-0", "wandb_parent_run_id": "job-0", "wandb_offline_uri": files}
    standin.set_status(offline.job_id, JobStatus.TRAINING, tracking=record)
    # When `jobs get` shows them
    after, shown_offline = cli("jobs", "get", online.job_id), cli("jobs", "get", offline.job_id)
    # Then the online run is its URL (and where it will be before), the offline one its files and its parent's run
    assert "not started yet, in acme/bot (online)" in " ".join(before.stdout.split())
    assert url in " ".join(after.stdout.split())
    flat = " ".join(shown_offline.stdout.split())
    assert "job-2 in bot (offline)" in flat and files.replace(" ", "") in flat.replace(" ", "") and "job-0 (group job-0)" in flat


def test_unknown_job_prints_the_404_message(cli: Any) -> None:
    # Given no such job  When it is read  Then exit 1 with the API's message
    result = cli("jobs", "get", "job-missing")
    assert result.exit_code == 1
    assert "404" in result.stderr
    assert "job job-missing not found" in result.stderr


def test_lifecycle_verbs(cli: Any, standin: StandInApi) -> None:
    # Given a training job
    job = standin.add_job(status=JobStatus.TRAINING, resource_config={"gpu_count": 1, "gpu_type": "L4"})
    # When it is paused without a checkpoint, resumed from one, cancelled, and retried on two GPUs
    paused = cli("jobs", "pause", job.job_id, "--no-save-checkpoint")
    resumed = cli("jobs", "resume", job.job_id, "--checkpoint", "step-000004")
    cancelled = cli("jobs", "cancel", job.job_id, "--reason", "done")
    retried = cli("jobs", "retry", job.job_id, "--gpu-count", "2")
    # Then each verb succeeded with the contract's body
    for result in (paused, resumed, cancelled, retried):
        assert result.exit_code == 0, result.output
    bodies = {r.path.rsplit("/", 1)[-1]: r.body for r in standin.calls("POST", f"/jobs/{job.job_id}/")}
    assert bodies["pause"] == {"save_checkpoint": False}
    assert bodies["resume"] == {"checkpoint_id": "step-000004"}
    assert bodies["cancel"] == {"reason": "done"}
    # And the retry kept the parent's GPU type while changing the count
    assert bodies["retry"]["modify_resources"] is True
    assert bodies["retry"]["new_resource_config"]["gpu_count"] == 2
    assert bodies["retry"]["new_resource_config"]["gpu_type"] == "L4"
    assert "retry of" in retried.stdout


def test_a_verb_the_status_forbids_is_reported_as_conflict(cli: Any, standin: StandInApi) -> None:
    # Given a queued job  When it is paused  Then exit 1 with the 409's message
    job = standin.add_job(status=JobStatus.QUEUED)
    result = cli("jobs", "pause", job.job_id)
    assert result.exit_code == 1
    assert "409" in result.stderr
    assert "allowed from TRAINING" in result.stderr


def test_patch_and_delete(cli: Any, standin: StandInApi) -> None:
    # Given a queued job and a finished one
    queued = standin.add_job(status=JobStatus.QUEUED)
    done = standin.add_job(status=JobStatus.COMPLETED)
    # When the first is renamed (with a hyperparameter) and the second deleted
    patched = cli("jobs", "patch", queued.job_id, "--name", "renamed", "--hp", "learning_rate=1e-4")
    deleted = cli("jobs", "delete", done.job_id)
    nothing = cli("jobs", "patch", queued.job_id)
    # Then both succeed, the patch body holds the changes, and an empty patch is a usage error
    assert patched.exit_code == 0, patched.output
    assert standin.calls("PATCH")[0].body == {"name": "renamed", "hyperparameters": {"learning_rate": "1e-4"}}
    assert deleted.exit_code == 0
    assert done.job_id not in standin.jobs
    assert nothing.exit_code == 2


def test_events_metrics_logs_and_summary(cli: Any, standin: StandInApi) -> None:
    # Given a completed job with history, metrics and logs
    job = standin.add_job(status=JobStatus.QUEUED)
    standin.set_status(job.job_id, JobStatus.SCHEDULING)
    standin.metrics[job.job_id] = [{"step": s, "loss": 3.0 - s / 10, "learning_rate": 1e-3} for s in range(1, 6)]
    standin.logs[job.job_id] = [{"timestamp": 1_700_000_000.0 + i, "attempt": 1, "message": f"hello {i}"} for i in range(3)]
    # When each is shown
    events = cli("jobs", "events", job.job_id)
    metrics = cli("jobs", "metrics", job.job_id, "--tail", "2")
    logs = cli("jobs", "logs", job.job_id)
    summary = cli("summary")
    # Then the history, the last metric points with a loss summary, every log line and the counts appear
    assert "SCHEDULING" in events.stdout
    assert "LEARNING_RATE" in metrics.stdout
    assert "5 points; loss 2.9000 -> 2.5000" in metrics.stdout
    assert [line.split("] ", 1)[1] for line in logs.stdout.splitlines()] == ["hello 0", "hello 1", "hello 2"]
    assert summary.exit_code == 0, summary.output
    assert "SCHEDULING" in summary.stdout


def test_endpoint_command_shows_where_requests_go(cli: Any, standin: StandInApi) -> None:
    # Given the endpoint in the environment  When asked  Then the URL and the signing key are shown
    result = cli("-o", "json", "endpoint")
    info = json.loads(result.stdout)
    assert info["url"] == standin.url
    assert info["access_key_id"] == ACCESS_KEY
    assert info["url_source"] == "$TRAINPLANE_ENDPOINT"


def test_no_endpoint_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Given no endpoint anywhere
    monkeypatch.delenv("TRAINPLANE_ENDPOINT", raising=False)
    # When a job command runs
    result = CliRunner().invoke(app, ["--state-dir", str(tmp_path), "jobs", "list"])
    # Then it says how to get one
    assert result.exit_code == 1
    assert "trainplane up" in result.stderr


def test_up_hands_its_options_to_local_mode(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Given local mode's entry point replaced by a recorder
    calls: list[tuple[Any, ...]] = []
    fake = types.ModuleType("localmode.up")
    fake.run_up = lambda *args, **kwargs: calls.append((*args, kwargs))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "localmode.up", fake)
    # When `up` runs with every option, and with the global --state-dir only
    every = ["--state-dir", str(tmp_path), "--compute", "sagemaker", "--allow-dir", "/data/a", "--allow-dir", "/data/b", "--gpus", "H100=4"]
    every += ["--principal", "bob", "--principal", "carol"]
    CliRunner().invoke(app, ["up", "--host", "0.0.0.0", "--port", "0", *every, "--capacity-pools", str(tmp_path / "pools.yaml")])
    CliRunner().invoke(app, ["--state-dir", str(tmp_path / "g"), "up"])
    # Then run_up got them, with the defaults filled in (no --allow-dir: no local files allowed)
    assert calls == [
        (
            "0.0.0.0",
            0,
            tmp_path,
            "sagemaker",
            {
                "allow_dirs": [Path("/data/a"), Path("/data/b")],
                "gpus": "H100=4",
                "capacity_pools": tmp_path / "pools.yaml",
                "principals": ["bob", "carol"],
                "dashboard_users": [],
            },
        ),
        (
            "127.0.0.1",
            8080,
            tmp_path / "g",
            "local",
            {"allow_dirs": [], "gpus": "", "capacity_pools": None, "principals": [], "dashboard_users": []},
        ),
    ]


def test_watch_follow_prints_the_log_and_a_failure_with_its_last_lines(
    cli: Any, standin: StandInApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a training job with a log, that fails on the next read
    job = standin.add_job(status=JobStatus.TRAINING)
    standin.logs[job.job_id] = [{"timestamp": 1.0 + i, "attempt": 1, "message": f"step {i}"} for i in range(3)]
    standin.script[job.job_id] = [JobStatus.FAILED]
    monkeypatch.setattr("trainplane.client.time.sleep", lambda s: None)
    # When it is watched with --follow
    result = cli("jobs", "watch", job.job_id, "--follow")
    # Then the lines were printed once each, and the failure with the last lines went to stderr; exit 1
    assert result.exit_code == 1
    assert [line for line in result.stdout.splitlines() if line.startswith("[1] step")] == ["[1] step 0", "[1] step 1", "[1] step 2"]
    assert "FAILED" in result.stderr and "| step 2" in result.stderr


def test_watch_of_a_paused_job_exits_zero(cli: Any, standin: StandInApi) -> None:
    job = standin.add_job(status=JobStatus.PAUSED)
    result = cli("jobs", "watch", job.job_id)
    assert result.exit_code == 0, result.output
    assert "PAUSED" in result.stdout


def test_reconnect_resumes_a_paused_job_until_it_trains(cli: Any, standin: StandInApi, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a paused job that the engine schedules once it is resumed
    job = standin.add_job(status=JobStatus.PAUSED)
    monkeypatch.setattr("trainplane.client.time.sleep", lambda s: None)
    original = standin.set_status

    def set_status(job_id: str, status: JobStatus, **changes: Any) -> Any:
        if status == JobStatus.QUEUED:
            standin.script[job_id] = [JobStatus.SCHEDULING, JobStatus.TRAINING]
        return original(job_id, status, **changes)

    monkeypatch.setattr(standin, "set_status", set_status)
    # When reconnected  Then it was resumed and the CLI exits 0 with the job training
    result = cli("-o", "json", "jobs", "reconnect", job.job_id, "--poll", "0.1")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "TRAINING"
    assert len(standin.calls("POST", f"/jobs/{job.job_id}/resume")) == 1
