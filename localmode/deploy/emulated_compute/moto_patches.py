"""The moto patches of the emulated compute (moto pinned: localmode/moto_pin.py).

moto's training job is `Completed` the moment it is created and has no StopTrainingJob (docs/LOCAL_AWS.md):
CreateTrainingJob hands the new job to the active SageMaker emulator, which makes it one that has yet to
run; StopTrainingJob is implemented by it. One emulator is active in a process at a time.
EC2's RunInstances asks the active emulator's scripted capacity pools first (capacity_pools.py): a pool
without room answers InsufficientInstanceCapacity, as EC2 does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol


class TrainingJobs(Protocol):
    """What moto's SageMaker calls hand on (sagemaker.py's SageMakerCompute)."""

    def sagemaker_created(self, job: Any) -> None: ...

    def sagemaker_stop(self, job: Any) -> None: ...


_active: object | None = None
_training_jobs: TrainingJobs | None = None
_active_lock = threading.Lock()
_installed = False
# (backend, instance type, count, run_instances kwargs) -> why there is no capacity, or None.
CapacityCheck = Callable[[Any, str, int, dict[str, Any]], "str | None"]
_capacity_check: CapacityCheck | None = None


def set_capacity_check(check: CapacityCheck | None) -> None:
    global _capacity_check
    _capacity_check = check
    _install()


def activate(emulator: object, training_jobs: TrainingJobs | None) -> None:
    """Make `emulator` the process's one emulated compute (RuntimeError if another is), and patch moto."""
    global _active, _training_jobs
    with _active_lock:
        if _active is not None and _active is not emulator:
            raise RuntimeError("another EmulatedCompute is active in this process")
        _active, _training_jobs = emulator, training_jobs
    _install()


def deactivate(emulator: object) -> None:
    global _active, _training_jobs
    with _active_lock:
        if _active is emulator:
            _active, _training_jobs = None, None


def training_job(account_id: str, region: str, name: str) -> Any:
    from moto.sagemaker.models import sagemaker_backends

    return sagemaker_backends[account_id][region].training_jobs.get(name)


def _install() -> None:
    """CreateTrainingJob -> not yet run (the emulator starts it); StopTrainingJob -> implemented."""
    global _installed
    if _installed:
        return
    from moto.core.responses import EmptyResult
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.models import SageMakerModelBackend
    from moto.sagemaker.responses import SageMakerResponse

    original_create = SageMakerModelBackend.create_training_job

    def create_training_job(self: Any, *args: Any, **kwargs: Any) -> Any:
        job = original_create(self, *args, **kwargs)
        emulator = _training_jobs
        if emulator is not None:
            emulator.sagemaker_created(job)
        return job

    def stop_training_job(self: Any) -> Any:
        name = self._get_param("TrainingJobName")
        job = self.sagemaker_backend.training_jobs.get(name)
        if job is None:
            arn = f"arn:aws:sagemaker:{self.region}:{self.current_account}:training-job/{name}"
            raise ValidationError(message=f"Could not find training job '{arn}'.")
        emulator = _training_jobs
        if emulator is None:
            raise NotImplementedError("StopTrainingJob needs trainplane's emulated compute (trainplane up --compute sagemaker)")
        emulator.sagemaker_stop(job)
        return EmptyResult()

    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.models.instances import InstanceBackend

    original_run = InstanceBackend.run_instances

    def run_instances(self: Any, image_id: str, count: int, user_data: Any, security_group_names: list[str], **kwargs: Any) -> Any:
        check = _capacity_check
        if check is not None:
            refusal = check(self, kwargs.get("instance_type", ""), int(count), kwargs)
            if refusal is not None:
                raise EC2ClientError("InsufficientInstanceCapacity", refusal)
        return original_run(self, image_id, count, user_data, security_group_names, **kwargs)

    InstanceBackend.run_instances = run_instances  # type: ignore[method-assign]
    SageMakerModelBackend.create_training_job = create_training_job  # type: ignore[method-assign]
    SageMakerResponse.stop_training_job = stop_training_job  # type: ignore[attr-defined]
    _installed = True
