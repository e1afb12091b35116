"""Domain errors, below both the service and the adapters (adapters raise them, the service re-raises or adds its own);
functions/handlers/errors.py maps them to HTTP, once."""

from __future__ import annotations

from schemas.status import JobStatus


class DomainError(Exception):
    """Base of every error the service raises on purpose."""


class JobNotFound(DomainError):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} not found")
        self.job_id = job_id


class CheckpointNotFound(DomainError):
    def __init__(self, job_id: str, checkpoint_id: str) -> None:
        super().__init__(f"job {job_id} has no checkpoint {checkpoint_id!r}")
        self.job_id = job_id
        self.checkpoint_id = checkpoint_id


class IllegalTransition(DomainError):
    """The job's status does not allow the action (409)."""

    def __init__(self, job_id: str, current: JobStatus, action: str, allowed_from: frozenset[JobStatus] | None = None) -> None:
        allowed = f"; allowed from {', '.join(sorted(allowed_from))}" if allowed_from else ""
        super().__init__(f"cannot {action} job {job_id} while it is {current}{allowed}")
        self.job_id = job_id
        self.current = current
        self.action = action


class ConcurrentModification(DomainError):
    """A conditional write lost a race with another writer (409)."""

    def __init__(self, job_id: str, detail: str = "") -> None:
        super().__init__(f"job {job_id} was changed by another request{': ' + detail if detail else ''}; reload and retry")
        self.job_id = job_id


class InvalidRequest(DomainError):
    """Input that passed the schema but not the domain rules (422), naming the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class Unsupported(DomainError):
    """A feature the control plane cannot offer (yet) in this deployment (422)."""


class PolicyNotFound(DomainError):
    """No such retraining policy, or another principal's (404: policy ids are not disclosed either)."""

    def __init__(self, policy_id: str) -> None:
        super().__init__(f"retraining policy {policy_id} not found")
        self.policy_id = policy_id


class PolicyConflict(ConcurrentModification):
    """A policy was changed by another request between read and write (409)."""

    def __init__(self, policy_id: str, detail: str = "") -> None:
        DomainError.__init__(
            self, f"retraining policy {policy_id} was changed by another request{': ' + detail if detail else ''}; reload and retry"
        )
        self.job_id = policy_id  # ConcurrentModification's attribute, for handlers that read it
        self.policy_id = policy_id


class WebhookNotFound(DomainError):
    """No such webhook, or another principal's (404: webhook ids are not disclosed either)."""

    def __init__(self, webhook_id: str) -> None:
        super().__init__(f"webhook {webhook_id} not found")
        self.webhook_id = webhook_id


class SweepNotFound(DomainError):
    """No such sweep, or another principal's (404: sweep ids are not disclosed either)."""

    def __init__(self, sweep_id: str) -> None:
        super().__init__(f"sweep {sweep_id} not found")
        self.sweep_id = sweep_id


class ShapeNotFound(DomainError):
    """No such training shape (or version) in this deployment (404 on /training-shapes)."""

    def __init__(self, name: str, version: int | None = None) -> None:
        super().__init__(f"training shape {name}{'@' + str(version) if version else ''} not found")
        self.name = name
        self.version = version


class RunNotFound(DomainError):
    """POST /train never made a job of this run_id for the caller (404)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} not found")
        self.run_id = run_id


class RunActive(DomainError):
    """A /train run_id whose newest job has not finished yet (409): one job per run at a time."""

    def __init__(self, run_id: str, job_id: str, status: str) -> None:
        super().__init__(f"run {run_id} is still going as job {job_id} ({status}); wait for it, or cancel it first")
        self.run_id = run_id
        self.job_id = job_id


class NameTaken(DomainError):
    """A NameClaim lost: another job holds the name now (the caller read an older holder, or none)."""

    def __init__(self, key: str, holder: str | None) -> None:
        super().__init__(f"{key} is held by job {holder}")
        self.key = key
        self.holder = holder


class TooLarge(DomainError):
    """Input that passes the schema but cannot be stored: a record over its size budget (413)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class TeamNotFound(DomainError):
    """No such team, or one the (non-admin) caller is not a member of (404: team names are not disclosed)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"team {name!r} not found")
        self.name = name


class AdminOnly(DomainError):
    """An action only the deployment's admins may take (403), e.g. defining teams."""


class TeamChanged(ConcurrentModification):
    """A team's conditional write lost a race (409)."""

    def __init__(self, name: str, detail: str = "another request changed it first") -> None:
        DomainError.__init__(self, f"team {name!r}: {detail}; read it again and retry")
        self.job_id = ""


class BudgetNotFound(DomainError):
    """No such budget, or one the caller may not see (404: budget ids are not disclosed either)."""

    def __init__(self, budget_id: str) -> None:
        super().__init__(f"budget {budget_id} not found")
        self.budget_id = budget_id


class BudgetChanged(ConcurrentModification):
    """A budget was changed by another writer between read and write (409; the meter and admission re-read)."""

    def __init__(self, budget_id: str, detail: str = "") -> None:
        DomainError.__init__(self, f"budget {budget_id} was changed by another request{': ' + detail if detail else ''}; reload and retry")
        self.job_id = budget_id
        self.budget_id = budget_id


class GroupsUnavailable(Exception):
    """The user pool did not answer for a dashboard user's groups (the UserGroups port) and no earlier answer is
    kept, so their team cannot be decided now: a 503 with Retry-After. Not a DomainError: a sweep's trial or a
    policy's job submitted meanwhile is not failed for it (the sweep controller fails a trial on a DomainError);
    the invocation submitting it ends with the error, as on any AWS fault."""

    def __init__(self, message: str, *, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds
