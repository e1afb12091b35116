"""Local deployer: the lifecycle Lambda and state machine in moto, the LocalLauncher, the reconciler timer.

The state machine is created from THE definition (infra/statemachine) with the same substitutions as
the cloud stack; the Lambda function's Handler is run in-process by localmode.moto_lambda. The
composition root gets the LocalLauncher (so that the API's cancel and pause can stop local runs). The
reconciler sweeps once at start-up (executions do not survive a restart: every job that was running
or waiting gets a new one, running ones as PREEMPTED so they resume from their latest checkpoint) and
then on a timer. On shutdown every trainer is stopped with a checkpoint, before moto goes away.
"""

from __future__ import annotations

import json
import logging
import shlex
import threading
from typing import TYPE_CHECKING, Any

from functions import constants
from functions.adapters.launchers.local import DEFAULT_COMMAND, LocalLauncher
from functions.service.ports import Launcher, RunDescription
from infra.statemachine import render
from localmode import iam_calls
from schemas.trainer import TrainerEvent

if TYPE_CHECKING:
    from localmode.deploy import LocalContext

logger = logging.getLogger(__name__)

FUNCTION_NAME = "trainplane-lifecycle"
HANDLER = "functions.handlers.lifecycle.handler"
LOCAL_HEARTBEAT_SECONDS = "60"  # the launcher's monitor heartbeats every few seconds; a minute is plenty
LOCAL_STOP_GRACE_SECONDS = "30"
SHUTDOWN_GRACE_SECONDS = 15.0


class _ServiceObserver:
    """Forwards the launcher's reports to the lifecycle service, resolved when the first report arrives."""

    def _service(self) -> Any:
        from functions import composition

        return composition.lifecycle_service()

    # In the cloud, trainer reports and run ends reach the events function (make iam-check's caller).

    def on_trainer_event(self, job_id: str, attempt: int, event: TrainerEvent) -> None:
        with iam_calls.acting_as("Events"):
            self._service().on_trainer_event(job_id, attempt, event)

    def on_run_finished(self, job_id: str, attempt: int, run: RunDescription) -> None:
        with iam_calls.acting_as("Events"):
            self._service().on_run_finished(job_id, attempt, run)

    def on_run_alive(self, job_id: str, attempt: int) -> None:
        with iam_calls.acting_as("Events"):
            self._service().on_run_alive(job_id, attempt)


def deploy(ctx: LocalContext) -> None:
    from localmode import moto_lambda

    moto_lambda.install()
    ctx.env.setdefault("TRAINPLANE_RUN_HEARTBEAT_SECONDS", LOCAL_HEARTBEAT_SECONDS)
    ctx.env.setdefault("TRAINPLANE_STOP_GRACE_SECONDS", LOCAL_STOP_GRACE_SECONDS)
    settings = ctx.settings()
    role = ctx.client("iam").create_role(
        RoleName="trainplane-lifecycle",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": ["lambda.amazonaws.com", "states.amazonaws.com"]},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    function_arn = ctx.client("lambda").create_function(
        FunctionName=FUNCTION_NAME,
        Runtime="python3.12",
        Role=role,
        Handler=HANDLER,
        Code={"ZipFile": b"run in-process by localmode.moto_lambda"},
        Timeout=900,
    )["FunctionArn"]
    definition = render(
        {
            "LifecycleFunctionArn": function_arn,
            "JobsTableName": settings.jobs_table,
            "ArtifactsBucketName": settings.artifacts_bucket,
            "EventBusName": settings.event_bus_name,
        }
    )
    machine = ctx.client("stepfunctions").create_state_machine(name=constants.STATE_MACHINE_NAME, definition=definition, roleArn=role)
    ctx.set_setting("state_machine_arn", machine["stateMachineArn"])

    s3 = ctx.client("s3")
    bucket = settings.artifacts_bucket
    launcher = LocalLauncher(
        ctx.state_dir / "runs",
        command=shlex.split(settings.trainer_command) if settings.trainer_command else DEFAULT_COMMAND,
        s3_endpoint_url=ctx.endpoint_url,
        upload_log=lambda key, body: s3.put_object(Bucket=bucket, Key=key, Body=body),
        stop_grace_seconds=float(ctx.settings().stop_grace_seconds),
    )
    launcher.observer = _ServiceObserver()
    _wire(launcher)
    ctx.add_background("reconciler", lambda stop: _reconcile_forever(stop, ctx.settings().reconcile_interval_seconds))
    # Bounded: `trainplane up` must exit promptly on SIGTERM; a trainer still saving after this is killed
    # and resumes from its previous checkpoint.
    ctx.on_shutdown(lambda: launcher.shutdown(timeout=min(float(ctx.settings().stop_grace_seconds), SHUTDOWN_GRACE_SECONDS)))


def _wire(launcher: LocalLauncher) -> None:
    """Hand the composition root the local launcher, beside whatever cloud launcher --compute names."""
    from functions import composition

    def launchers(root: composition.Composition) -> dict[str, Launcher]:
        return {"local": launcher, **composition.cloud_launchers(root.settings, root.clients)}

    composition.configure(launchers=launchers)


def _reconcile_forever(stop: threading.Event, interval: float) -> None:
    from functions import composition

    reconciler = composition.current().new_reconciler()
    startup = True
    while not stop.is_set():
        try:
            # In the cloud the reconciler runs in the events function (its role's grants say so).
            with iam_calls.acting_as("Events"):
                report = reconciler.run_once(startup=startup)
                composition.current().budget_meter.tick()  # budgets meter on the reconciler's interval
            if report.preempted or report.restarted or report.reported_ends or report.released:
                logger.info("reconciler: %s", report)
        except Exception:
            logger.exception("reconciler sweep failed; next one in %.0fs", interval)
        startup = False
        stop.wait(interval)
