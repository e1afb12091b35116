"""DeepFinery's /train (seeds/004) as trainplane jobs: the payload's mapping, the refusals naming the
/train field, one job per run at a time, the status in the seed's words, and the run layout's run spec."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from functions.errors import InvalidRequest, RunActive, RunNotFound
from functions.service.compat.deepfinery import TrainApi, status_of, to_submit_request
from functions.service.jobs import JobService
from functions.service.ports import Transition
from functions.service.principal import Principal
from functions.service.run_specs import RunSpecs
from functions.settings import Settings
from schemas.access import BucketGrant
from schemas.configs import DType, FrameworkType, TrainingType
from schemas.job import ErrorType
from schemas.status import JobStatus
from schemas.train import TrainRequest
from tests.fakes import InMemoryArtifactStore, InMemoryJobRepository
from tests.helpers.jobs import ALICE, BOB

S = JobStatus
alice, bob = Principal(ALICE), Principal(BOB)

# seeds/004's sample request, exactly as the seed prints it.
SEED_PAYLOAD: dict[str, Any] = {
    "framework": "hf",
    "model_id": "meta-llama/Llama-3-8B",
    "run_id": "aml_ruleset_v4",
    "num_nodes": 1,
    "gpus_per_node": 8,
    "cpus_per_node": 48,
    "memory_per_node_gb": 512,
    "image": "ghcr.io/deepfinery/trainer:latest",
    "checkpoint_base_uri": "s3://deepfinery-training/runs",
    "dataset_uri": "s3://deepfinery-datasets/fraud/aml_ruleset.jsonl",
    "resume_from_checkpoint": True,
    "extra_args": {"max_steps": 50000, "lr": 3e-5, "batch_size": 128},
}


def payload(**changes: Any) -> TrainRequest:
    return TrainRequest.model_validate({**copy.deepcopy(SEED_PAYLOAD), **changes})


# The seed's buckets, granted as a deployment grants buckets outside its own (docs/SECURITY.md).
GRANTS = (
    BucketGrant(uri="s3://deepfinery-training/runs/", access="read-write"),
    BucketGrant(uri="s3://deepfinery-datasets/", access="read"),
)


def make_service(compute: str = "local", grants: tuple[BucketGrant, ...] = GRANTS) -> JobService:
    counter = itertools.count(1)
    settings = Settings(compute=compute, bucket_grants=grants)
    return JobService(InMemoryJobRepository(), InMemoryArtifactStore(), None, settings, ids=lambda: f"job-{next(counter):04d}")


def test_the_seeds_payload_maps_onto_a_job() -> None:
    request = to_submit_request(payload())
    tc, dc, rc, oc = request.training_config, request.data_config, request.resource_config, request.output_config
    assert request.name == "aml_ruleset_v4"
    assert tc.framework.type == FrameworkType.HF_TRAINER and tc.training_type == TrainingType.CONTINUED_PRETRAIN
    assert tc.base_model.model_id == "meta-llama/Llama-3-8B"
    assert tc.hyperparameters == {"max_steps": "50000", "learning_rate": "3e-05"}
    assert dc.batch_size == 128 and dc.sources[0].path == "s3://deepfinery-datasets/fraud/aml_ruleset.jsonl"
    assert (rc.gpu_count, rc.node_count, rc.cpu_cores, rc.ram_min_mb) == (8, 1, 48, 512 * 1024)
    assert oc.layout == "deepfinery" and oc.output_path == "s3://deepfinery-training/runs/aml_ruleset_v4/framework=hf"
    assert tc.resume_from_checkpoint == "latest"
    assert request.labels == {"train_run_id": "aml_ruleset_v4", "train_framework": "hf"}
    assert tc.image == "ghcr.io/deepfinery/trainer:latest"  # no stock images given: a custom image
    assert tc.environment["CHECKPOINT_PREFIX"] == oc.output_path and tc.environment["RUN_ID"] == "aml_ruleset_v4"


@pytest.mark.parametrize(
    ("image", "custom"),
    [
        ("ghcr.io/deepfinery/trainer:latest", None),
        ("ghcr.io/deepfinery/trainer", None),
        ("ghcr.io/deepfinery/trainer@sha256:" + "a" * 64, None),
        ("ghcr.io/deepfinery/trainer-fork:latest", "ghcr.io/deepfinery/trainer-fork:latest"),
        ("ghcr.io/other/trainer:latest", "ghcr.io/other/trainer:latest"),
        ("localhost:5000/deepfinery/trainer:1", "localhost:5000/deepfinery/trainer:1"),
    ],
)
def test_deepfinerys_stock_trainer_image_is_served_by_our_trainer_and_any_other_is_custom(image: str, custom: str | None) -> None:
    # Given the deployment's stock images (the default: DeepFinery's trainer)  When a payload names an image
    request = to_submit_request(payload(image=image), Settings().train_stock_images)
    # Then the stock one (any tag or digest) runs on the deployment's trainer, recorded as a label; others are custom
    assert request.training_config.image == custom
    assert request.labels.get("train_image") == (None if custom else image)


def test_meta_is_fsdp_and_the_seeds_knobs_reach_their_fields() -> None:
    extra = {"batch_size": 4, "num_epochs": 2, "lr": 0.001, "max_seq_len": 256, "save_steps": 10, "precision": "bf16"}
    request = to_submit_request(payload(framework="meta", resume_from_checkpoint=False, extra_args=extra))
    tc = request.training_config
    assert tc.framework.type == FrameworkType.FSDP and tc.resume_from_checkpoint is None
    assert tc.hyperparameters == {"num_train_epochs": "2", "learning_rate": "0.001"}
    assert request.data_config.max_seq_length == 256 and request.output_config.checkpoint.save_steps == 10
    assert tc.base_model.dtype == DType.BFLOAT16
    assert request.output_config.output_path and request.output_config.output_path.endswith("/aml_ruleset_v4/framework=meta")


def test_hf_forwards_other_extra_args_as_trainer_arguments_and_maps_the_text_field() -> None:
    extra = {"warmup_steps": 5, "gradient_checkpointing": True, "dataset_text_field": "body", "training_type": "sft"}
    request = to_submit_request(payload(extra_args=extra))
    assert request.training_config.hyperparameters == {"warmup_steps": "5", "gradient_checkpointing": "true"}
    assert request.data_config.preprocess.field_mapping == {"text": "body"}
    assert request.training_config.training_type == TrainingType.SFT


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"framework": "nemo"}, "framework", "not supported yet"),
        ({"config_path": "s3://b/cfg.yaml"}, "config_path", "not supported yet"),
        ({"framework": "meta", "extra_args": {"warmup_steps": 3}}, "extra_args.warmup_steps", "meta (FSDP)"),
        ({"extra_args": {"precision": "int3"}}, "extra_args.precision", "one of"),
        ({"extra_args": {"batch_size": 0}}, "extra_args.batch_size", "greater than or equal to 1"),
        ({"extra_args": {"training_type": "RLHF"}}, "training_config.rlhf", "RLHF needs the rlhf block"),
        ({"annotations": {"note": "x" * 5000}}, "annotations", "at most 4096"),
        ({"extra_args": {"no_such_trainer_arg": 1}}, "extra_args.no_such_trainer_arg", "unknown hyperparameter"),
        ({"extra_args": {"lr": "fast"}}, "extra_args.lr", "valid number"),
    ],
)
def test_what_cannot_be_a_job_is_refused_naming_the_train_field(changes: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        to_submit_request(payload(**changes))
    assert caught.value.field == field and words in caught.value.message


def test_submit_goes_through_the_same_validation_as_post_jobs() -> None:
    # Given a SageMaker deployment: its submit validation refuses local data paths, naming the field
    api = TrainApi(make_service(compute="sagemaker"))
    with pytest.raises(InvalidRequest) as caught:
        api.submit(payload(image=None, dataset_uri="/home/alice/data.jsonl", gpus_per_node=1), alice)
    assert caught.value.field == "dataset_uri"
    # And an impossible GPU count is refused as for POST /jobs
    with pytest.raises(InvalidRequest) as gpus:
        api.submit(payload(image=None, gpus_per_node=1000), alice)
    assert gpus.value.field == "gpus_per_node"
    # And so is a run in a bucket the deployment does not let its callers write (path confinement)
    with pytest.raises(InvalidRequest) as confined:
        TrainApi(make_service(grants=GRANTS[1:])).submit(payload(image=None, gpus_per_node=0), alice)
    assert confined.value.field == "checkpoint_base_uri" and "bucket_grants" in confined.value.message


def test_one_job_per_run_at_a_time_and_the_status_in_the_seeds_words() -> None:
    service = make_service()
    api = TrainApi(service)
    first = api.submit(payload(image=None, gpus_per_node=0), alice)
    assert first.status == "submitted" and first.run_id == "aml_ruleset_v4"
    # A second run while the first is not finished is a conflict
    with pytest.raises(RunActive):
        api.submit(payload(image=None, gpus_per_node=0), alice)
    # Bob does not see alice's run, and may use the same run_id for his own
    with pytest.raises(RunNotFound):
        api.status("aml_ruleset_v4", bob)
    assert api.submit(payload(image=None, gpus_per_node=0), bob).job_id != first.job_id
    # The job walks on: running, then succeeded
    repo = service.repo
    for status in (S.QUEUED, S.SCHEDULING, S.PREPARING, S.TRAINING):
        job = repo.get(first.job_id)
        repo.transition(Transition(job.job_id, job.version, job.status, status, actor="system"))
    assert api.status("aml_ruleset_v4", alice).status == "running"
    job = repo.get(first.job_id)
    repo.transition(Transition(job.job_id, job.version, job.status, S.COMPLETED, actor="system"))
    assert api.status("aml_ruleset_v4", alice).status == "succeeded"
    # And then a new run of the same run_id is accepted; its status is the newest job's
    second = api.submit(payload(image=None, gpus_per_node=0), alice)
    assert second.job_id != first.job_id and api.status("aml_ruleset_v4", alice).job_id == second.job_id


@pytest.mark.parametrize(
    ("status", "changes", "word"),
    [
        (S.QUEUED, {}, "submitted"),
        (S.PAUSED, {}, "submitted"),
        (S.PREPARING, {}, "running"),
        (S.EXPORTING, {}, "running"),
        (S.COMPLETED, {}, "succeeded"),
        (S.FAILED, {"error_type": ErrorType.DATA_ERROR, "error_message": "bad row"}, "failed"),
        (S.CANCELLED, {}, "failed"),
        (S.PREEMPTED, {}, "failed"),
        (S.PREEMPTED, {"run_outcome": "resume_preempted"}, "running"),
    ],
)
def test_status_words(status: JobStatus, changes: dict[str, Any], word: str) -> None:
    request = to_submit_request(payload(image=None, gpus_per_node=0))
    job = make_service().submit(request, alice).model_copy(update={"status": status, **changes})
    result = status_of(job, "r")
    assert result.status == word and status.value in (result.detail or "")
    if "error_message" in changes:
        assert "DATA_ERROR: bad row" in (result.detail or "")


def test_the_run_spec_of_a_layout_job_keeps_its_checkpoints_in_the_runs_root() -> None:
    service = make_service()
    job = service.submit(to_submit_request(payload(image=None, gpus_per_node=0)), alice)
    specs = RunSpecs(InMemoryArtifactStore(), "artifacts")
    root = "s3://deepfinery-training/runs/aml_ruleset_v4/framework=hf"
    first = specs.run_spec(job, 1, specs.resume_from(job, 1))
    assert (first.layout_uri, first.checkpoint_uri, first.output_uri) == (root, f"{root}/checkpoints", f"{root}/model")
    assert first.resume_from is None and first.resume_latest is True
    fresh = service.submit(to_submit_request(payload(image=None, gpus_per_node=0, run_id="other", resume_from_checkpoint=False)), alice)
    assert specs.run_spec(fresh, 1, None).resume_latest is False
    assert specs.run_spec(fresh, 2, None).resume_latest is True  # its own later attempts resume its checkpoints
