"""The path-confinement matrix (docs/SECURITY.md, issue 11): every path field a job names x every kind of
location -> 201 or 422 naming the field, for jobs, retries, resumes and retraining policy templates
(create, PATCH, fire), through the API Lambda on moto with local mode's settings.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from functions import composition
from functions.adapters.aws import AwsClients
from functions.handlers import api
from functions.service.paths import principal_key
from functions.settings import Settings
from schemas.access import BucketGrant
from schemas.job import CheckpointRef, Job, StatusEvent, SubmitJobRequest
from schemas.status import JobStatus
from tests.fakes import RecordingWorkflow
from tests.helpers.aws import fresh_resources
from tests.helpers.events import FakeLambdaContext, api_event
from tests.helpers.jobs import ADMIN, ALICE, BOB, request_body
from tests.helpers.retraining import policy_body

RW_BUCKET = "team-bucket"  # granted read-write to everyone
RO_BUCKET = "reference-bucket"  # granted read to everyone
COLLECTION = "/retraining-policies"

READ_FIELDS = (
    "data_config.sources[0].path",
    "training_config.base_model.model_id",
    "training_config.base_model.tokenizer_id",
    "training_config.resume_from_checkpoint",
    "training_config.framework.custom_script_path",
    "training_config.rlhf.reward_model",
    "training_config.rlhf.reward_script_path",
)
WRITE_FIELD = "output_config.output_path"
LOCATIONS = (
    "own_job",
    "other_principals_job",
    "own_data_area",
    "shared_area",
    "allowed_bucket",
    "bucket_not_allowed",
    "local_allowed",
    "local_not_allowed",
    "state_dir",
    "dotdot_escape",
    "symlink_escape",
    "relative_path",
)
READABLE = {"own_job", "own_data_area", "shared_area", "allowed_bucket", "local_allowed"}
# Exports go to the owner's data area, a read-write grant or an allowed local directory; never into any
# job's prefix (the job's own default is its own prefix: output_path unset) nor a read-only area.
WRITABLE = {"own_data_area", "allowed_bucket", "local_allowed"}


@dataclass
class Reply:
    status: int
    body: Any

    def field(self) -> str:
        return str(self.body["errors"][0]["field"]) if self.status == 422 else ""


class Plane:
    def __init__(self, clients: AwsClients, settings: Settings, root: Path, own_job: str, bobs_job: str) -> None:
        self.clients = clients
        self.settings = settings
        self.root = root
        self.own_job = own_job
        self.bobs_job = bobs_job

    @property
    def bucket(self) -> str:
        return self.settings.artifacts_bucket

    def call(self, name: str, *, user: str = ALICE, **changes: Any) -> Reply:
        raw = api.lambda_handler(api_event(name, user_arn=user, headers={"Idempotency-Key": ""}, **changes), FakeLambdaContext())
        return Reply(raw["statusCode"], json.loads(raw["body"]) if raw.get("body") else None)

    def policy(self, method: str, policy_id: str | None = None, *, body: Any = None, user: str = ALICE) -> Reply:
        event = copy.deepcopy(api_event("api_list_jobs", user_arn=user, query={}))
        resource = COLLECTION if policy_id is None else COLLECTION + "/{policy_id}"
        path = COLLECTION if policy_id is None else f"{COLLECTION}/{policy_id}"
        event.update(resource=resource, path=path, httpMethod=method, pathParameters={"policy_id": policy_id} if policy_id else None)
        event["requestContext"].update(resourcePath=resource, httpMethod=method, path=f"/prod{path}")
        event["body"] = None if body is None else json.dumps(body)
        raw = api.lambda_handler(event, FakeLambdaContext())
        return Reply(raw["statusCode"], json.loads(raw["body"]) if raw.get("body") else None)

    def location(self, where: str, *, write: bool = False) -> str:
        """A path of that kind for a read (an existing file or directory) or a write (a fresh place)."""
        leaf = "fresh-out" if write else "thing"
        local = self.root / "allowed"
        return {
            "own_job": f"s3://{self.bucket}/jobs/{self.own_job}/{leaf}",
            "other_principals_job": f"s3://{self.bucket}/jobs/{self.bobs_job}/{leaf}",
            "own_data_area": f"s3://{self.bucket}/data/{principal_key(ALICE)}/{leaf}",
            "shared_area": f"s3://{self.bucket}/shared/{leaf}",
            "allowed_bucket": f"s3://{RW_BUCKET}/team/{leaf}",
            "bucket_not_allowed": f"s3://not-granted/{leaf}",
            "local_allowed": str(local / (leaf if write else "data")),
            "local_not_allowed": str(self.root / "outside" / "data"),
            "state_dir": str(local / "state" / "journal"),
            "dotdot_escape": f"{local}/../outside/data",
            "symlink_escape": str(local / "link"),
            "relative_path": "allowed/data",
        }[where]

    def repo_job(self, body: dict[str, Any], status: JobStatus, checkpoints: list[str] = ()) -> str:  # type: ignore[assignment]
        """A job stored as is (as one stored before the rule, or before the settings changed)."""
        request = SubmitJobRequest.model_validate(body)
        now = datetime.now(UTC)
        job = Job(
            job_id=f"job-{os.urandom(6).hex()}",
            owner=ALICE,
            name=request.name,
            status=status,
            training_config=request.training_config,
            data_config=request.data_config,
            resource_config=request.resource_config,
            output_config=request.output_config,
            scheduling_config=request.scheduling_config,
            created_at=now,
            updated_at=now,
        )
        repo = composition.current().repository
        repo.create(job, StatusEvent(at=now, from_status=None, to_status=status, reason="test", actor="system"))
        for n, uri in enumerate(checkpoints, start=1):
            repo.add_checkpoint(job.job_id, CheckpointRef(checkpoint_id=f"step-{n:06d}", step=n, uri=uri))
        return job.job_id


def with_path(field: str, value: str) -> dict[str, Any]:
    body = request_body()
    tc, dc = body["training_config"], body["data_config"]
    if field == "data_config.sources[0].path":
        dc["sources"] = [{"path": value}]
    elif field == "training_config.base_model.model_id":
        tc["base_model"] = {**tc["base_model"], "model_id": value, "source": "s3" if value.startswith("s3://") else "local"}
        tc["base_model"].pop("model_kwargs")
    elif field == "training_config.base_model.tokenizer_id":
        tc["base_model"]["tokenizer_id"] = value if value.startswith(("s3://", "/")) else "./" + value
    elif field == "training_config.resume_from_checkpoint":
        tc["resume_from_checkpoint"] = value
    elif field == "training_config.framework.custom_script_path":
        tc["framework"] = {"type": "CUSTOM", "custom_script_path": value}
    elif field == "training_config.rlhf.reward_model":
        reward_model = value if value.startswith(("s3://", "/")) else "./" + value
        tc.update(training_type="RLHF", rlhf={"reward_model": reward_model, "num_generations": 2})
    elif field == "training_config.rlhf.reward_script_path":
        tc.update(training_type="RLHF", rlhf={"reward_script_path": value, "num_generations": 2})
    elif field == WRITE_FIELD:
        body["output_config"] = {"output_path": value}
    else:
        raise AssertionError(field)
    return body


def expected(field: str, where: str) -> int:
    if field in ("training_config.base_model.tokenizer_id", "training_config.rlhf.reward_model") and where == "relative_path":
        return 422  # './allowed/data': relative, refused
    return 201 if where in (WRITABLE if field == WRITE_FIELD else READABLE) else 422


@pytest.fixture
def plane(aws: AwsClients, tmp_path: Path) -> Iterator[Plane]:
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    (allowed / "state" / "journal").mkdir(parents=True)
    (outside / "data").mkdir(parents=True)
    (allowed / "data").mkdir()
    (allowed / "data" / "train.jsonl").write_text('{"text": "hi"}\n')
    (allowed / "link").symlink_to(outside / "data")
    settings = fresh_resources(
        aws,
        admin_arns=(ADMIN,),
        local_state_dir=str(allowed / "state"),  # inside an allowed directory, and refused all the same
        local_allowed_dirs=(str(allowed),),
        state_machine_arn="arn:aws:states:us-east-1:123456789012:stateMachine:trainplane-lifecycle",  # its account
        bucket_grants=(
            BucketGrant(uri=f"s3://{RW_BUCKET}/team/", access="read-write"),
            BucketGrant(uri=f"s3://{RO_BUCKET}", access="read"),
            BucketGrant(uri="s3://trainplane-artifacts/shared/"),
        ),
    )
    composition.configure(settings=settings, clients=aws, workflow=RecordingWorkflow())
    try:
        first = Plane(aws, settings, tmp_path, "", "")
        own = first.call("api_submit_job", body=request_body())
        bobs = first.call("api_submit_job", body=request_body(), user=BOB)
        assert own.status == bobs.status == 201, (own.body, bobs.body)
        yield Plane(aws, settings, tmp_path, own.body["job_id"], bobs.body["job_id"])
    finally:
        composition.reset()


MATRIX = [(f, w) for f in (*READ_FIELDS, WRITE_FIELD) for w in LOCATIONS]


@pytest.mark.parametrize(("field", "where"), MATRIX)
def test_submit(plane: Plane, field: str, where: str) -> None:
    reply = plane.call("api_submit_job", body=with_path(field, plane.location(where, write=field == WRITE_FIELD)))
    assert reply.status == expected(field, where), reply.body
    assert reply.field() == ("" if reply.status == 201 else field)


@pytest.mark.parametrize(("field", "where"), MATRIX)
def test_retry_of_a_job_naming_the_path(plane: Plane, field: str, where: str) -> None:
    # Given a failed job of alice's stored with that path (before the rule, or before the settings changed)
    parent = plane.repo_job(with_path(field, plane.location(where, write=field == WRITE_FIELD)), JobStatus.FAILED)
    # When she retries it, the child gets the same check as a submission
    reply = plane.call("api_retry_job", job_id=parent, body={})
    assert reply.status == expected(field, where), reply.body
    assert reply.field() == ("" if reply.status == 201 else field)


@pytest.mark.parametrize("where", LOCATIONS)
@pytest.mark.parametrize("verb", ["resume", "retry"])
def test_the_checkpoint_of_a_resume_or_retry(plane: Plane, verb: str, where: str) -> None:
    # Given alice's job whose recorded checkpoint lies there (checkpoint URIs came from trainer reports)
    uri = plane.location(where)
    status = JobStatus.PAUSED if verb == "resume" else JobStatus.FAILED
    job_id = plane.repo_job(request_body(), status, checkpoints=[uri])
    # When she resumes or retries from it by id
    reply = plane.call(f"api_{verb}_job", job_id=job_id, body={"checkpoint_id": "step-000001"})
    ok = 200 if verb == "resume" else 201
    readable = where in READABLE and where != "relative_path"
    assert reply.status == (ok if readable else 422), reply.body
    if not readable:
        assert reply.field() == "checkpoint_id"


def test_the_job_being_resumed_reads_its_own_checkpoint(plane: Plane) -> None:
    job_id = plane.repo_job(request_body(), JobStatus.PAUSED)
    own = f"s3://{plane.bucket}/jobs/{job_id}/checkpoints/step-000001"
    composition.current().repository.add_checkpoint(job_id, CheckpointRef(checkpoint_id="step-000001", step=1, uri=own))
    assert plane.call("api_resume_job", job_id=job_id, body={"checkpoint_id": "step-000001"}).status == 200


@pytest.mark.parametrize(("field", "where"), MATRIX)
def test_policy_template_at_create_and_on_patch(plane: Plane, field: str, where: str) -> None:
    template = with_path(field, plane.location(where, write=field == WRITE_FIELD))
    body = policy_body(job_template=template, input_mapping=[])
    created = plane.policy("POST", body=body)
    assert created.status == expected(field, where), created.body
    assert created.field() == ("" if created.status == 201 else f"job_template.{field}")
    # And the same template through PATCH of a valid policy
    valid = plane.policy("POST", body=policy_body(input_mapping=[]))
    assert valid.status == 201, valid.body
    patched = plane.policy("PATCH", valid.body["policy_id"], body={"job_template": template})
    assert patched.status == (200 if expected(field, where) == 201 else 422), patched.body
    assert patched.field() == ("" if patched.status == 200 else f"job_template.{field}")


def test_a_fired_job_whose_path_is_not_allowed_is_not_created_and_the_reason_is_recorded(plane: Plane) -> None:
    # Given alice's policy on new objects of a bucket she may not read, mapping the object into the data path
    body = policy_body(trigger={"type": "s3", "bucket": "not-granted", "prefix": "in/"})
    created = plane.policy("POST", body=body)
    assert created.status == 201, created.body
    policy_id = created.body["policy_id"]
    # When an object arrives there and the policy fires
    from tests.helpers.retraining import s3_event

    service = composition.current().retraining
    results = service.dispatch(s3_event("in/new.jsonl", bucket="not-granted", event_id="evt-denied"))
    # Then no job is created, and the decision says why
    mine = [r for r in results if r.policy_id == policy_id]
    assert [r.outcome for r in mine] == ["invalid"] and mine[0].job_id is None
    assert "data_config.sources[0].path" in mine[0].detail and "not-granted" in mine[0].detail
    jobs = plane.call("api_list_jobs", query={"labels.retraining_policy": policy_id})
    assert jobs.status == 200 and jobs.body["jobs"] == []
    # And the same event delivered again stays decided
    again = service.dispatch(s3_event("in/new.jsonl", bucket="not-granted", event_id="evt-denied"))
    assert [r.outcome for r in again if r.policy_id == policy_id] == ["duplicate"]


def test_a_fired_job_whose_path_is_allowed_is_created(plane: Plane) -> None:
    body = policy_body(trigger={"type": "s3", "bucket": RO_BUCKET, "prefix": "in/"})
    policy_id = plane.policy("POST", body=body).body["policy_id"]
    results = composition.current().retraining.dispatch(s3_event_for(RO_BUCKET, "in/ok.jsonl"))
    assert [r.outcome for r in results if r.policy_id == policy_id] == ["started"]


def s3_event_for(bucket: str, key: str) -> dict[str, Any]:
    from tests.helpers.retraining import s3_event

    return s3_event(key, bucket=bucket, event_id=f"evt-{key}")


def test_admins_may_name_any_s3_path_but_never_write_into_a_jobs_prefix(plane: Plane) -> None:
    bobs_data = f"s3://{plane.bucket}/jobs/{plane.bobs_job}/model"
    assert plane.call("api_submit_job", body=with_path("data_config.sources[0].path", bobs_data), user=ADMIN).status == 201
    assert plane.call("api_submit_job", body=with_path("data_config.sources[0].path", "s3://not-granted/x"), user=ADMIN).status == 201
    refused = plane.call("api_submit_job", body=with_path(WRITE_FIELD, bobs_data), user=ADMIN)
    assert refused.status == 422 and refused.field() == WRITE_FIELD
    # Local files stay confined for admins too: the state directory is never a path a job may name
    state = plane.call("api_submit_job", body=with_path("data_config.sources[0].path", plane.location("state_dir")), user=ADMIN)
    assert state.status == 422


def test_an_output_path_holding_another_principals_export_or_foreign_objects_is_refused(plane: Plane) -> None:
    s3 = plane.clients.s3()
    # Given (by an admin's hand) bob's export and some foreign objects inside alice's data area
    area = f"data/{principal_key(ALICE)}"
    s3.put_object(Bucket=plane.bucket, Key=f"{area}/bobs-model/.trainplane-export.json", Body=json.dumps({"owner": BOB}).encode())
    s3.put_object(Bucket=plane.bucket, Key=f"{area}/notes/readme.txt", Body=b"mine")
    s3.put_object(Bucket=plane.bucket, Key=f"{area}/mine/.trainplane-export.json", Body=json.dumps({"owner": ALICE}).encode())
    for place, status in (("bobs-model", 422), ("bobs-model/sub", 422), ("notes", 422), ("mine", 201), ("mine-2", 201)):
        reply = plane.call("api_submit_job", body=with_path(WRITE_FIELD, f"s3://{plane.bucket}/{area}/{place}"))
        assert reply.status == status, (place, reply.body)
    # And the same rule for local directories
    local = plane.root / "allowed"
    (local / "theirs").mkdir()
    (local / "theirs" / ".trainplane-export.json").write_text(json.dumps({"owner": BOB}))
    (local / "data" / "more.txt").write_text("x")
    assert plane.call("api_submit_job", body=with_path(WRITE_FIELD, str(local / "theirs"))).status == 422
    assert plane.call("api_submit_job", body=with_path(WRITE_FIELD, str(local / "data"))).status == 422


def test_a_symlink_inside_an_allowed_data_directory_is_refused(plane: Plane) -> None:
    data = plane.root / "allowed" / "data"
    (data / "sneaky.jsonl").symlink_to(plane.root / "allowed" / "state" / "journal")
    reply = plane.call("api_submit_job", body=with_path("data_config.sources[0].path", str(data)))
    assert reply.status == 422 and reply.field() == "data_config.sources[0].path" and "state directory" in reply.body["message"]


def test_the_run_spec_carries_the_access_set_the_trainer_enforces(plane: Plane) -> None:
    # The lifecycle's run spec gets the job's AccessSet (what tests/trainer/test_access.py enforces)
    from functions.service.paths import PathRules

    repo = composition.current().repository
    rules = PathRules(plane.settings, repo, composition.current().artifacts)
    job = repo.get(plane.own_job)
    access = rules.access_for(job)
    own = f"s3://{plane.bucket}/jobs/{plane.own_job}/"
    assert access.owner == ALICE and access.write == [own] and not access.read_any_s3
    assert access.can_read(f"s3://{plane.bucket}/data/{principal_key(ALICE)}/x") and access.can_read(f"s3://{RO_BUCKET}/y")
    assert not access.can_read(f"s3://{plane.bucket}/jobs/{plane.bobs_job}/model")
    assert not access.can_read(str(plane.root / "allowed" / "state" / "journal"))
    # A path that is no longer allowed when the job is prepared fails it there (ValueError naming the field)
    stale = plane.repo_job(with_path("data_config.sources[0].path", "s3://not-granted/x"), JobStatus.QUEUED)
    with pytest.raises(Exception, match=r"data_config.sources\[0\].path"):
        rules.access_for(repo.get(stale))


@pytest.mark.parametrize(
    "key",
    [
        "TRAINPLANE_CACHE_DIR",
        "HF_HOME",
        "TMPDIR",
        "AWS_ENDPOINT_URL_S3",
        "SM_MODEL_DIR",
        "PYTHONPATH",
        # issue 21: XDG_CONFIG_HOME pointed into the state directory made the trainer write there
        "XDG_CONFIG_HOME",
        "xdg_data_home",
        "HUGGINGFACE_HUB_CACHE",
        "TRANSFORMERS_CACHE",
        "TORCH_HOME",
        "WANDB_DIR",
        "MLFLOW_TRACKING_URI",
        "HOME",
        "LD_PRELOAD",
        "TRITON_CACHE_DIR",
        "MPLCONFIGDIR",
    ],
)
def test_environment_variables_that_move_the_trainers_files_are_refused(plane: Plane, key: str) -> None:
    body = request_body()
    body["training_config"]["environment"] = {key: str(plane.root / "allowed" / "state")}
    reply = plane.call("api_submit_job", body=body)
    assert reply.status == 422 and reply.field() == f"training_config.environment.{key}", reply.body
    body["training_config"]["environment"] = {"MY_FLAG": "1", "HF_ENDPOINT": "http://127.0.0.1:1"}
    assert plane.call("api_submit_job", body=body).status == 201


@pytest.mark.parametrize("where", ["local_allowed", "local_not_allowed", "state_dir", "dotdot_escape", "symlink_escape"])
def test_an_mlflow_file_store_is_confined_like_a_local_output(plane: Plane, where: str) -> None:
    # Given a job logging to a local MLflow file store at that place
    body = request_body()
    store = plane.location(where, write=True) if where == "local_allowed" else plane.location(where)
    body["output_config"] = {"tracking": {"mlflow": {"tracking_uri": f"file://{store}"}}}
    # When it is submitted
    reply = plane.call("api_submit_job", body=body)
    # Then only a directory the owner may use is accepted; anything else is a 422 naming the field
    if where == "local_allowed":
        assert reply.status == 201, reply.body
        job = composition.current().repository.get(reply.body["job_id"])
        rules = composition.current().path_rules
        # and the trainer may write there (its access set), as well as its TensorBoard files in its own prefix
        assert rules.access_for(job).can_write(f"{store}/0/meta.yaml")
    else:
        assert reply.status == 422 and reply.field() == "output_config.tracking.mlflow.tracking_uri", reply.body


def test_a_tracking_block_the_trainer_cannot_use_is_a_422_at_the_api(plane: Plane) -> None:
    for tracking, field in (
        ({"mlflow": {"tracking_uri": "https://user:pw@mlflow.example.com"}}, "output_config.tracking.mlflow.tracking_uri"),
        ({"wandb": {"project": "p"}}, "output_config.tracking.wandb.api_key_secret_arn"),
    ):
        body = request_body()
        body["output_config"] = {"tracking": tracking}
        reply = plane.call("api_submit_job", body=body)
        assert reply.status == 422 and reply.field() == field, reply.body


def _secret(owner_key: str, region: str = "us-east-1", account: str = "123456789012") -> str:
    return f"arn:aws:secretsmanager:{region}:{account}:secret:trainplane/{owner_key}/wandb-AbCdEf"


def test_a_wandb_key_secret_is_one_the_owner_may_use(plane: Plane) -> None:
    def submit(wandb: dict[str, Any], user: str = ALICE) -> Reply:
        body = request_body()
        body["output_config"] = {"tracking": {"wandb": {"project": "p", **wandb}}}
        return plane.call("api_submit_job", body=body, user=user)

    field = "output_config.tracking.wandb.api_key_secret_arn"
    # Given alice's own secret (named under trainplane/<her principal key>/): accepted, and her job's access set
    # lets the trainer read it and nothing of bob's
    own = submit({"mode": "offline", "api_key_secret_arn": _secret(principal_key(ALICE))})
    assert own.status == 201, own.body
    access = composition.current().path_rules.access_for(composition.current().repository.get(own.body["job_id"]))
    assert access.can_read_secret(_secret(principal_key(ALICE))) and not access.can_read_secret(_secret(principal_key(BOB)))
    # When she names bob's secret, one outside trainplane/, or one in another region or account (which the
    # trainer role could not read): a 422 naming the field
    for arn in (
        _secret(principal_key(BOB)),
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/wandb",
        _secret(principal_key(ALICE), region="eu-west-1"),
        _secret(principal_key(ALICE), account="210987654321"),
    ):
        reply = submit({"mode": "offline", "api_key_secret_arn": arn})
        assert reply.status == 422 and reply.field() == field, reply.body
    # and an admin may name any trainplane secret (bob's team key, for a job of his own)
    assert submit({"mode": "offline", "api_key_secret_arn": _secret(principal_key(BOB))}, user=ADMIN).status == 201
    # and local mode refuses online W&B at submit, naming the mode (its trainers log offline)
    reply = submit({"api_key_secret_arn": _secret(principal_key(ALICE))})
    assert reply.status == 422 and reply.field() == "output_config.tracking.wandb.mode" and "offline" in reply.body["message"], reply.body


def test_a_bare_checkpoint_id_on_a_new_job_is_refused_at_submit(plane: Plane) -> None:
    # Given a new job naming a checkpoint by id only (it used to be accepted and fail at PREPARING:
    # the id names a checkpoint of the job itself, and a new job has none)
    body = request_body()
    body["training_config"]["resume_from_checkpoint"] = "step-000500"
    # When it is submitted, then it is a 422 naming the field and saying what to give instead
    reply = plane.call("api_submit_job", body=body)
    assert reply.status == 422 and reply.field() == "training_config.resume_from_checkpoint", reply.body
    assert "URI" in reply.body["errors"][0]["message"]
    # And 'latest' (the newest of its own, none on a first run) is still accepted
    body["training_config"]["resume_from_checkpoint"] = "latest"
    assert plane.call("api_submit_job", body=body).status == 201
