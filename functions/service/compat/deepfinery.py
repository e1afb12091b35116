"""DeepFinery's POST /train and GET /train/{run_id} (seeds/004) as ordinary trainplane jobs.

The payload is translated into a SubmitJobRequest and submitted through JobService.submit, the very
validation POST /jobs runs (schema, training shapes, compute, and the caller's path confinement), as
the caller. How the fields map:

| /train                 | the job                                                                     |
|------------------------|-----------------------------------------------------------------------------|
| framework hf / meta    | training_config.framework.type HF_TRAINER / FSDP; nemo: 422 until real      |
| model_id               | training_config.base_model.model_id (hub id, s3:// or a local path)         |
| run_id                 | the job's name and label train_run_id; the run's prefix                     |
| num_nodes, gpus_per_node, cpus_per_node, memory_per_node_gb | resource_config node_count, gpu_count, cpu_cores, ram_min_mb |
| checkpoint_base_uri    | output_config.output_path = <base>/<run_id>/framework=<f>, layout deepfinery |
| dataset_uri            | data_config.sources[0].path                                                 |
| resume_from_checkpoint | training_config.resume_from_checkpoint = "latest" (the highest step there)  |
| extra_args             | the seed's knobs to their fields (lr, num_epochs, max_steps, batch_size,    |
|                        | gradient_accumulation, max_seq_len, save_steps, dataset_text_field,         |
|                        | precision); for hf any other key is a trainer argument (hyperparameter,     |
|                        | checked as any job's: an unknown one is a 422 naming extra_args.<key>)      |
| env                    | training_config.environment (plus FRAMEWORK, RUN_ID, CHECKPOINT_PREFIX)     |
| labels / annotations   | labels / the description (as JSON)                                          |
| image                  | DeepFinery's stock trainer (Settings.train_stock_images): our trainer runs  |
|                        | it, label train_image records it; any other: training_config.image, the job |
|                        | runs that image (SageMaker/EC2, allowed repositories, the trainer contract);|
|                        | refused (422) where it cannot run                                           |
| config_path            | refused (422) until the trainer reads one                                   |

The dataset is read as the seed expects by default ({"text": ...} per line: CONTINUED_PRETRAIN);
extra_args.training_type picks another of our training types (SFT, LORA, ...).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from functions.errors import InvalidRequest, JobNotFound, NameTaken, RunActive, RunNotFound
from functions.service.ports import JobQuery, NameClaim
from functions.service.principal import Principal
from functions.service.run_specs import LATEST
from schemas.configs import FrameworkType
from schemas.job import Job, SubmitJobRequest
from schemas.status import TERMINAL, JobStatus
from schemas.train import ExtraArg, TrainRequest, TrainStatus

RUN_LABEL = "train_run_id"
FRAMEWORK_LABEL = "train_framework"
IMAGE_LABEL = "train_image"
FRAMEWORKS = {"hf": FrameworkType.HF_TRAINER, "meta": FrameworkType.FSDP}
# The seed's knobs and where each goes: (section, path inside it, how the value is written).
_KNOBS: dict[str, tuple[str, str]] = {
    "lr": ("hyperparameters", "learning_rate"),
    "num_epochs": ("hyperparameters", "num_train_epochs"),
    "max_steps": ("hyperparameters", "max_steps"),
    "batch_size": ("data_config", "batch_size"),
    "gradient_accumulation": ("data_config", "gradient_accumulation_steps"),
    "max_seq_len": ("data_config", "max_seq_length"),
    "save_steps": ("checkpoint", "save_steps"),
    "dataset_text_field": ("field_mapping", "text"),
    "precision": ("base_model", "dtype"),
    "training_type": ("training_config", "training_type"),
    "tokenizer_id": ("base_model", "tokenizer_id"),
}
# The meta (FSDP) runner of the seed accepts only these; hf forwards anything else to the trainer.
_META_KNOBS = frozenset({"batch_size", "num_epochs", "lr", "max_seq_len", "save_steps", "precision", "training_type", "tokenizer_id"})
_PRECISION = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16", "fp32": "float32", "float32": "float32"}
_SUBMITTED = frozenset({JobStatus.PENDING, JobStatus.QUEUED, JobStatus.SCHEDULING, JobStatus.PAUSED})


def run_claim_key(owner: str, run_id: str) -> str:
    """The NameClaim of a run: one per owner and run_id (another principal's run of that id is theirs)."""
    return f"train#{owner}#{run_id}"


def run_root(request: TrainRequest) -> str:
    return f"{request.checkpoint_base_uri.rstrip('/')}/{request.run_id}/framework={request.framework}"


def is_stock_image(image: str, stock: tuple[str, ...]) -> bool:
    """`image` is one of the `stock` repositories, at any tag or digest (ghcr.io/deepfinery/trainer:latest)."""
    repository = image.split("@", 1)[0]
    last = repository.rsplit("/", 1)[-1]
    if ":" in last:
        repository = repository[: len(repository) - len(last)] + last.split(":", 1)[0]
    return repository in stock


def to_submit_request(request: TrainRequest, stock_images: tuple[str, ...] = ()) -> SubmitJobRequest:
    """The job a /train payload is (InvalidRequest naming the /train field when it cannot be one)."""
    if request.framework not in FRAMEWORKS:
        raise InvalidRequest("framework", f"{request.framework} is not supported yet; use hf (HF_TRAINER) or meta (FSDP)")
    if request.config_path is not None:
        raise InvalidRequest("config_path", "not supported yet: pass the settings as extra_args")
    root = run_root(request)
    hyperparameters: dict[str, str] = {}
    data: dict[str, Any] = {"sources": [{"path": request.dataset_uri}]}
    checkpoint: dict[str, Any] = {}
    base_model: dict[str, Any] = {"model_id": request.model_id}
    training_type = "CONTINUED_PRETRAIN"
    for key, value in request.extra_args.items():
        if request.framework == "meta" and key not in _META_KNOBS:
            known = ", ".join(sorted(_META_KNOBS))
            raise InvalidRequest(f"extra_args.{key}", f"not an option of the meta (FSDP) runner; known: {known}")
        section, name = _KNOBS.get(key, ("hyperparameters", key))
        if section == "hyperparameters":
            hyperparameters[name] = _text(value)
        elif section == "data_config":
            data[name] = value
        elif section == "checkpoint":
            checkpoint[name] = value
        elif section == "field_mapping":
            data.setdefault("preprocess", {"field_mapping": {}})["field_mapping"][name] = _text(value)
        elif key == "precision":
            if _text(value) not in _PRECISION:
                raise InvalidRequest("extra_args.precision", f"one of {', '.join(sorted(_PRECISION))}")
            base_model["dtype"] = _PRECISION[_text(value)]
        elif key == "training_type":
            training_type = _text(value).upper()
        else:
            base_model[name] = value
    environment = {
        **request.env,
        "FRAMEWORK": request.framework,
        "RUN_ID": request.run_id,
        "CHECKPOINT_PREFIX": root,
    }
    labels = {**request.labels, RUN_LABEL: request.run_id, FRAMEWORK_LABEL: request.framework}
    image = request.image
    if image and is_stock_image(image, stock_images):
        labels[IMAGE_LABEL], image = image, None
    resources: dict[str, Any] = {"gpu_count": request.gpus_per_node, "node_count": request.num_nodes}
    if request.cpus_per_node is not None:
        resources["cpu_cores"] = request.cpus_per_node
    if request.memory_per_node_gb is not None:
        resources["ram_min_mb"] = request.memory_per_node_gb * 1024
    body: dict[str, Any] = {
        "name": request.run_id,
        "labels": labels,
        "training_config": {
            "training_type": training_type,
            "base_model": base_model,
            "framework": {"type": FRAMEWORKS[request.framework].value},
            "hyperparameters": hyperparameters,
            "environment": environment,
            **({"resume_from_checkpoint": LATEST} if request.resume_from_checkpoint else {}),
            **({"image": image} if image else {}),
        },
        "data_config": data,
        "resource_config": resources,
        "output_config": {"output_path": root, "layout": "deepfinery", **({"checkpoint": checkpoint} if checkpoint else {})},
    }
    if request.annotations:
        body["description"] = json.dumps({"annotations": request.annotations}, sort_keys=True)
    try:
        return SubmitJobRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = _train_field(tuple(str(p) for p in first.get("loc", ())))
        raise InvalidRequest(where, str(first.get("msg", exc)).removeprefix("Value error, ")) from exc


def _text(value: ExtraArg) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _train_field(loc: tuple[str, ...]) -> str:
    """A field of the job as the /train field it came from (what the caller wrote)."""
    path = ".".join(loc)
    direct = {
        "name": "run_id",
        "training_config.base_model.model_id": "model_id",
        "resource_config.gpu_count": "gpus_per_node",
        "resource_config.node_count": "num_nodes",
        "resource_config.cpu_cores": "cpus_per_node",
        "resource_config.ram_min_mb": "memory_per_node_gb",
        "data_config.sources.0.path": "dataset_uri",
        "output_config.output_path": "checkpoint_base_uri",
        "description": "annotations",
        "training_config.environment": "env",
        "training_config.image": "image",
    }
    if path in direct:
        return direct[path]
    if path.startswith("training_config.hyperparameters."):
        name = path.removeprefix("training_config.hyperparameters.")
        seed_name = {target: key for key, (section, target) in _KNOBS.items() if section == "hyperparameters"}.get(name, name)
        return f"extra_args.{seed_name}"
    if path.startswith("labels"):
        return path
    for key, (section, name) in _KNOBS.items():
        if path.endswith(f".{name}") and section in {"data_config", "checkpoint", "base_model", "training_config"}:
            return f"extra_args.{key}"
    return path or "body"


class TrainApi:
    """The two routes' use cases over JobService (submit validation, ownership, listing)."""

    def __init__(self, jobs: Any) -> None:
        self.jobs = jobs  # JobService (typed loosely: the service imports this module's neighbours)

    def submit(self, request: TrainRequest, principal: Principal) -> TrainStatus:
        """One job per run_id at a time, decided atomically: the job is created in the same transaction that
        makes it the run's holder, conditioned on the holder read here (finished, or none), so of two
        concurrent POST /train of one run exactly one creates a job and the other gets RunActive (409)."""
        submit_request = to_submit_request(request, self.jobs.settings.train_stock_images)
        key = run_claim_key(principal.arn, request.run_id)
        holder_id = self.jobs.repo.name_holder(key)
        holder = self._job(holder_id) if holder_id else self._newest(request.run_id, principal.arn)  # runs from before claims
        if holder is not None and holder.status not in TERMINAL:
            raise RunActive(request.run_id, holder.job_id, holder.status.value)
        claim = NameClaim(key, holder_id)
        try:
            job = self.jobs.submit(submit_request, principal, reason=f"POST /train run {request.run_id}", claim=claim)
        except InvalidRequest as exc:
            # The submit validation names the job's fields; the caller wrote /train's.
            raise InvalidRequest(_train_field(tuple(exc.field.replace("[", ".").replace("]", "").split("."))), exc.message) from exc
        except NameTaken as exc:
            winner = self._job(exc.holder) if exc.holder else None
            status = winner.status.value if winner is not None else "just submitted"
            raise RunActive(request.run_id, exc.holder or "?", status) from exc
        return status_of(job, request.run_id)

    def status(self, run_id: str, principal: Principal) -> TrainStatus:
        job = self._newest(run_id, principal.owner_scope)
        if job is None:
            raise RunNotFound(run_id)
        return status_of(job, run_id)

    def _job(self, job_id: str | None) -> Job | None:
        try:
            return self.jobs.repo.get(job_id) if job_id else None
        except JobNotFound:
            return None  # the holder was deleted: the run is free

    def _newest(self, run_id: str, owner: str | None) -> Job | None:
        jobs, _ = self.jobs.repo.list_jobs(JobQuery(owner=owner, labels={RUN_LABEL: run_id}, limit=1))
        return jobs[0] if jobs else None


def status_of(job: Job, run_id: str) -> TrainStatus:
    """Our lifecycle in the seed's four words; `detail` says where the job really stands."""
    s = job.status
    where = f"job {job.job_id} is {s.value}"
    if s == JobStatus.COMPLETED:
        return TrainStatus(status="succeeded", detail=where, run_id=run_id, job_id=job.job_id)
    if s in {JobStatus.FAILED, JobStatus.CANCELLED} or (s == JobStatus.PREEMPTED and job.run_outcome != "resume_preempted"):
        error = ": ".join(x for x in (job.error_type.value if job.error_type else None, job.error_message) if x)
        return TrainStatus(status="failed", detail=f"{where}{': ' + error if error else ''}", run_id=run_id, job_id=job.job_id)
    if s in _SUBMITTED:
        extra = f" (position {job.queue_position} in queue {job.queue})" if job.queue_position else ""
        return TrainStatus(status="submitted", detail=where + extra, run_id=run_id, job_id=job.job_id)
    step = f" at step {job.progress.step}" + (f"/{job.progress.total_steps}" if job.progress.total_steps else "")
    return TrainStatus(status="running", detail=where + step, run_id=run_id, job_id=job.job_id)
