"""Which tracker secrets a job may name, and where W&B may log (docs/SECURITY.md, docs/TRACKING.md).

A job never carries a tracker's API key: it names a Secrets Manager secret (`api_key_secret_arn`) that the
trainer reads at start with its role. One principal must not use another's key (it would log into the
other's W&B account, and read the key through a CUSTOM script it ships), so the rule is a name prefix per
principal, the same key as its data area (paths.principal_key):

    trainplane/<principal key>/...     e.g. trainplane/123456789012/user/alice/wandb

Admins may name any secret under `trainplane/`. The secret must be in the deployment's region (the
trainer role's GetSecretValue is scoped to `secret:trainplane/*` of its own account and region: IAM
cannot tell alice's run from bob's, as for paths, so the per-principal part is this check at submit and
at PREPARING, and the trainer's own check of the run spec's `AccessSet.secrets`).
"""

from __future__ import annotations

from functions.errors import InvalidRequest
from functions.service.principal import Principal
from functions.settings import Settings
from schemas.access import SECRET_ROOT, secret_allowed, secret_parts
from schemas.job import SubmitJobRequest

WANDB_FIELD = "output_config.tracking.wandb"
LOCAL_MODE_ONLINE = (
    "local mode's trainers log W&B offline only (local mode is for machines without a route to a W&B server, and "
    "its Secrets Manager is emulated): set mode 'offline' and `wandb sync` the run's files (docs/TRACKING.md)"
)


def secret_prefixes(owner: Principal, principal_key: str | None) -> list[str]:
    """The secret name prefixes `owner` (whose data-area key is `principal_key`, None for an identity without one)
    may name: its own, or every trainplane secret for an admin."""
    if owner.is_admin:
        return [SECRET_ROOT]
    return [f"{SECRET_ROOT}{principal_key}/"] if principal_key else []


def deployment_account(settings: Settings) -> str | None:
    """The AWS account the deployment (and its trainer roles) lives in: its state machine's, None before one exists."""
    arn = settings.state_machine_arn
    parts = arn.split(":") if arn else []
    return parts[4] if len(parts) > 4 and parts[4] else None


def check_tracking_secrets(request: SubmitJobRequest, owner: Principal, principal_key: str | None, settings: Settings) -> list[str]:
    """InvalidRequest naming the field when the job's W&B block is not allowed for `owner` here; else the
    secret name prefixes the run spec's AccessSet grants."""
    tracking = request.output_config.tracking
    wandb = tracking.wandb if tracking is not None else None
    if wandb is None:
        return []
    if settings.local_mode and wandb.mode == "online":
        raise InvalidRequest(f"{WANDB_FIELD}.mode", LOCAL_MODE_ONLINE)
    prefixes = secret_prefixes(owner, principal_key)
    arn = wandb.api_key_secret_arn
    if arn is not None:
        field = f"{WANDB_FIELD}.api_key_secret_arn"
        region, account, name = secret_parts(arn)
        if region != settings.region:
            message = f"the secret is in {region}; the trainers read secrets of this deployment's region, {settings.region}"
            raise InvalidRequest(field, message)
        home = deployment_account(settings)
        if home is not None and account != home:
            message = f"the secret is in account {account}; the trainers read secrets of this deployment's account, {home}"
            raise InvalidRequest(field, message)
        if not secret_allowed(arn, prefixes):
            allowed = prefixes[0] if prefixes else "(none: your identity has no principal key)"
            raise InvalidRequest(field, f"the secret {name!r} is not one you may use: name it under {allowed} (docs/SECURITY.md)")
    return prefixes
