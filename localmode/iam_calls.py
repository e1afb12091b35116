"""Records every AWS API call the control plane makes, and who made it (`make iam-check`, docs/DEPLOY.md).

Switched on by TRAINPLANE_IAM_CALLS_FILE (a JSON-lines file; tests/conftest.py names one per pytest run
and `trainplane up` subprocesses inherit it): `install()` adds two botocore handlers to every session
created from then on (botocore.handlers.BUILTIN_HANDLERS): `before-parameter-build` keeps the call's
parameters, `before-call` writes one line per call:

    {"caller": "Api", "service": "dynamodb", "operation": "PutItem", "compute": "sagemaker",
     "authorizations": [{"action": "dynamodb:PutItem", "resource": "arn:...:table/${JobsTable}", "context": {}}]}

Who calls: the role the call runs as in the cloud. `acting_as(role)` sets it for the code it wraps;
`install()` wraps each Lambda handler (HANDLER_ROLES) with it, wherever it is invoked from (moto's
in-process Lambda, the front door, a test); local mode wraps what runs outside a handler here but in one
in the cloud (the reconciler and trainer reports: Events, the sweep worker: Sweeps, the schedule
ticker: Scheduler, the webhook delivery loop: WebhookDelivery), and the methods of METHOD_ROLES (the
webhook fan-out, which local mode's publisher loop runs and the cloud's delivery function does). moto's
Step Functions engine calls with the access key "ak": StateMachine.
A call from a control-plane client (functions.adapters.aws.AwsClients) outside any of these is
recorded as "unattributed", with its `origin()`: "tests" (a test's set-up, or a test calling the control
plane's code directly) or the control-plane loop that made it (which the check reports: it must be
attributed). Any other client (test setup, local mode's deployers) is not recorded.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from functions import constants
from localmode.iam_actions import authorizations

CALLS_FILE_ENV = "TRAINPLANE_IAM_CALLS_FILE"
# The trainer subprocess (localmode/iam_site/sitecustomize.py): the role its whole process runs as, and
# the deployment's names as tokens (it has no settings of the control plane's).
PROCESS_ROLE_ENV = "TRAINPLANE_IAM_PROCESS_ROLE"
PROCESS_NAMES_ENV = "TRAINPLANE_IAM_PROCESS_NAMES"
UNATTRIBUTED = "unattributed"
LOCAL_ONLY = "local-only"  # local_only(): not recorded
STATE_MACHINE = "StateMachine"
_SFN_ENGINE_KEY = "ak"  # moto's Step Functions engine signs its service integrations with this key

# Each Lambda handler -> the role it runs as (tools/iam maps the handler to its role in the template).
HANDLER_ROLES = {
    "functions.handlers.api.lambda_handler": "Api",
    "functions.handlers.lifecycle.handler": "Lifecycle",
    "functions.handlers.events.lambda_handler": "Events",
    "functions.handlers.retraining.lambda_handler": "Retraining",
    "functions.handlers.sweeps_controller.handler": "Sweeps",
    "functions.handlers.event_publisher.lambda_handler": "EventPublisher",
    "functions.handlers.webhook_delivery.lambda_handler": "WebhookDelivery",
}
WEBHOOK_DELIVERY = "WebhookDelivery"
# Work local mode runs inside another loop that the cloud runs in one function only -> that function's role:
# the webhook fan-out is the delivery Lambda's (infra/constructs/webhooks.py: a rule on the bus feeds its
# queue), while local mode's publisher does it before PutEvents (functions/composition.py, WebhookFanoutBus).
METHOD_ROLES = {
    ("functions.service.webhooks", "WebhookService", "fan_out"): WEBHOOK_DELIVERY,
}
# Local mode's own names of the deployed functions (localmode/deploy) -> the token tools/iam resolves.
_LOCAL_FUNCTIONS = {
    "trainplane-lifecycle": "LifecycleFunction",
    constants.EVENTS_FUNCTION_NAME: "EventsFunction",
    "trainplane-retraining": "RetrainingFunction",
}

_caller: contextvars.ContextVar[str | None] = contextvars.ContextVar("trainplane_iam_caller", default=None)
_lock = threading.Lock()
_installed = False
_path: str | None = None
_process_role: str | None = None
_process_names: dict[str, Any] | None = None


@contextlib.contextmanager
def acting_as(role: str) -> Iterator[None]:
    token = _caller.set(role)
    try:
        yield
    finally:
        _caller.reset(token)


@contextlib.contextmanager
def local_only() -> Iterator[None]:
    """Local mode's own upkeep, which no role of the cloud does (as local mode's deployers): not recorded."""
    with acting_as(LOCAL_ONLY):
        yield


def as_role(role: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if getattr(fn, "__trainplane_iam_role__", None) == role:
        return fn

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with acting_as(role):
            return fn(*args, **kwargs)

    wrapper.__trainplane_iam_role__ = role  # type: ignore[attr-defined]
    return wrapper


def enabled() -> bool:
    return _path is not None


def install_from_env() -> bool:
    path = os.environ.get(CALLS_FILE_ENV)
    if path:
        install(path)
    return bool(path)


def install(path: str) -> None:
    """Record from now on into `path` (appended: several processes share one run's file). Idempotent."""
    global _installed, _path
    import botocore.handlers

    _path = path
    with _lock:
        if _installed:
            return
        botocore.handlers.BUILTIN_HANDLERS.append(("before-parameter-build", _keep_params))
        botocore.handlers.BUILTIN_HANDLERS.append(("before-call", _on_call))
        from functions.adapters import aws as aws_clients

        aws_clients.add_client_hook(_mark_control_plane)
        for spec, role in HANDLER_ROLES.items():
            module_name, _, attr = spec.rpartition(".")
            module = importlib.import_module(module_name)
            setattr(module, attr, as_role(role, getattr(module, attr)))
        for (module_name, class_name, method), role in METHOD_ROLES.items():
            owner = getattr(importlib.import_module(module_name), class_name)
            setattr(owner, method, as_role(role, getattr(owner, method)))
        _installed = True


def trainer_environment(role: str, artifacts_bucket: str, compute: str) -> dict[str, str]:
    """What the emulated compute adds to its trainers' environment while recording: they record their
    own calls as `role` (the SageMaker execution role or the EC2 instance role). Empty when not recording."""
    if _path is None:
        return {}
    site = str(Path(__file__).with_name("iam_site"))
    names = {"compute": compute, "tokens": [["bucket", artifacts_bucket, "${ArtifactsBucket}"]]}
    return {
        CALLS_FILE_ENV: _path,
        PROCESS_ROLE_ENV: role,
        PROCESS_NAMES_ENV: json.dumps(names),
        "PYTHONPATH": os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")])),
    }


def install_process(path: str, role: str, names: str) -> None:
    """Record every call of this process, all as `role` (the trainer: any client, no handlers to wrap)."""
    global _installed, _path, _process_role, _process_names
    import botocore.handlers

    with _lock:
        _path, _process_role, _process_names = path, role, json.loads(names)
        if not _installed:
            botocore.handlers.BUILTIN_HANDLERS.append(("before-parameter-build", _keep_params))
            botocore.handlers.BUILTIN_HANDLERS.append(("before-call", _on_call))
            _installed = True


def _mark_control_plane(service: str, client: Any) -> None:
    client._request_signer.__dict__["_trainplane_control_plane"] = True


def _keep_params(params: Mapping[str, Any], context: dict[str, Any], **kwargs: Any) -> None:
    if _path is not None:
        context["trainplane_iam_params"] = params


def _on_call(model: Any, request_signer: Any, context: dict[str, Any], **kwargs: Any) -> None:
    if _path is None:
        return
    caller = _caller_for(request_signer)
    if caller is None:
        return
    params = context.get("trainplane_iam_params") or {}
    region = request_signer._region_name or constants.LOCAL_REGION
    record(caller, model.service_model.signing_name or model.service_model.endpoint_prefix, model.name, params, region)


def _caller_for(request_signer: Any) -> str | None:
    if _process_role is not None:
        return _process_role
    credentials = request_signer._credentials
    access_key = credentials.access_key if credentials is not None else ""
    if access_key == _SFN_ENGINE_KEY:
        return STATE_MACHINE
    caller = _caller.get()
    if caller == LOCAL_ONLY:
        return None
    if caller is not None:
        return caller
    return UNATTRIBUTED if request_signer.__dict__.get("_trainplane_control_plane") else None


_ROOT = str(Path(__file__).resolve().parents[1]) + os.sep
_TESTS = _ROOT + "tests" + os.sep
_SELF = {__file__, str(Path(__file__).resolve())}
_VENDORED = (os.sep + ".venv" + os.sep, os.sep + "site-packages" + os.sep)
TESTS_ORIGIN = "tests"


def origin() -> str:
    """Where an unattributed call comes from: "tests" when a test's frame is on the stack (its set-up, or a test
    calling the control plane's code directly), else the outermost frame of this repository on the thread (the
    loop of the control plane that made it: such a call belongs to a role and must be attributed)."""
    frame = sys._getframe(1)
    outermost = "(no frame of this repository)"
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_TESTS):
            return TESTS_ORIGIN
        if name.startswith(_ROOT) and name not in _SELF and not any(v in name for v in _VENDORED):
            outermost = f"{name[len(_ROOT) :]}:{frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return outermost


def record_direct(service: str, operation: str, params: Mapping[str, Any], region: str) -> None:
    """A call answered without botocore (localmode.moto_inprocess.DirectGetItem): recorded all the same."""
    caller = _caller.get()
    if _path is not None and caller != LOCAL_ONLY:
        record(caller or UNATTRIBUTED, service, operation, params, region)


def record(caller: str, service: str, operation: str, params: Mapping[str, Any], region: str, path: str | None = None) -> None:
    names = DeploymentNames(region)
    authorized = authorizations(service, operation, params, names)
    where = None
    if caller == STATE_MACHINE and not any("${" in a["resource"] for a in authorized):
        # moto's engine runs every state machine; one that touches none of the deployment's resources is a
        # test's own machine, not the control plane's.
        caller, where = UNATTRIBUTED, TESTS_ORIGIN
    line = {"caller": caller, "service": service, "operation": operation, "compute": names.compute, "authorizations": authorized}
    if caller == UNATTRIBUTED:
        line["origin"] = where or origin()
    data = (json.dumps(line, default=str, separators=(",", ":")) + "\n").encode()
    path = path or _path
    if path is None:
        return
    # One write per line, O_APPEND: lines from several processes do not interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


class DeploymentNames:
    """The deployment's names as tokens the synthesized template resolves (`${JobsTable}`), from the
    settings the control plane runs with (the composition's, else the environment's)."""

    account = constants.LOCAL_ACCOUNT_ID

    def __init__(self, region: str) -> None:
        self.region = region
        self._tokens: dict[tuple[str, str], str] = {}
        if _process_names is not None:
            self.compute = str(_process_names["compute"])
            self._tokens.update({(kind, name): token for kind, name, token in _process_names["tokens"]})
            return
        settings = _settings()
        self.compute = settings.compute if settings is not None else "local"
        if settings is None:
            return
        add = self._tokens.__setitem__
        add(("table", settings.jobs_table), "${JobsTable}")
        add(("table", settings.idempotency_table), "${IdempotencyTable}")
        add(("bucket", settings.artifacts_bucket), "${ArtifactsBucket}")
        if settings.state_machine_arn:
            add(("state-machine", settings.state_machine_arn.rsplit(":", 1)[-1]), "${StateMachine}")
        add(("log-group", settings.trainer_log_group), "${TrainerLogGroup}")
        for kind, value, token in (
            ("role-arn", settings.sagemaker_role_arn, "${SageMakerRoleArn}"),
            ("role-arn", settings.retraining_scheduler_role_arn, "${SchedulerRoleArn}"),
            ("instance-profile-role", settings.ec2_instance_profile_arn, "${InstanceRoleArn}"),
            ("launch-template", settings.ec2_launch_template_id, "${LaunchTemplate}"),
            ("launch-template", settings.ec2_launch_template_name, "${LaunchTemplate}"),
            ("placement-group", settings.ec2_placement_group, "${PlacementGroup}"),
            ("schedule-group", settings.retraining_schedule_group, "${ScheduleGroup}"),
            ("function", _name_of(settings.retraining_function_arn), "${RetrainingFunction}"),
            ("function", settings.sweep_controller_function, "${SweepsFunction}"),
            ("user-pool", settings.dashboard_user_pool_id, "${DashboardUserPool}"),
        ):
            if value:
                add((kind, value), token)
        if settings.ec2_instance_profile_arn:
            self._profile = settings.ec2_instance_profile_arn
        for name, token in _LOCAL_FUNCTIONS.items():
            self._tokens.setdefault(("function", name), "${" + token + "}")
        self._tokens.setdefault(("event-bus", settings.event_bus_name), "${EventBus}")
        self._tokens.setdefault(("event-bus", settings.trainplane_bus_name), "${TrainplaneBus}")

    def of(self, kind: str, name: str) -> str:
        if kind == "instance-profile-of":
            return _instance_profile_of(name, self) or name
        return self._tokens.get((kind, str(name)), str(name))


def _name_of(function: str | None) -> str | None:
    return function.split(":function:", 1)[1].split(":", 1)[0] if function and ":function:" in function else function


def _settings() -> Any:
    from functions import composition

    root = composition._current
    if root is not None and root._settings is not None:
        return root._settings
    try:
        from functions.settings import Settings

        return Settings.from_env()
    except Exception:
        return None


def _instance_profile_of(instance_id: str, names: DeploymentNames) -> str | None:
    """The instance's profile, from the emulated EC2 (the condition key AWS fills from the instance).

    AWS gives every instance of a RunInstances call the call's profile; moto associates it with the call's
    first instance only, so a node of a multi-node run takes its reservation's profile."""
    try:
        from moto.ec2.models import ec2_backends

        backend = ec2_backends[names.account][names.region]
        instance = backend.get_instance(instance_id)
    except Exception:
        return None
    arn = _profile_arn(instance)
    if arn is None:
        reservation = next((r for r in backend.reservations.values() if instance in r.instances), None)
        arn = next((a for i in (reservation.instances if reservation else []) if (a := _profile_arn(i))), None)
    return "${InstanceProfileArn}" if arn and arn == getattr(names, "_profile", None) else arn


def _profile_arn(instance: Any) -> str | None:
    profile = getattr(instance, "iam_instance_profile", None)
    return profile.get("Arn") if isinstance(profile, dict) else None
