"""Hyperparameter sweeps (issue 15): the sweep controller, its own Lambda with its own bundle and role.

The controller (functions/handlers/sweeps_controller.py) is the only function with Optuna: its code is
a bundle of its own (infra/bundling.py, `build_bundle(sweeps=True)`), never the API's. It is woken by an
asynchronous Invoke from the API (a sweep created, paused, resumed, cancelled) and from the functions
that record trainer reports and run ends (functions/service/sweeps/hooks.py), and by a schedule every
minute that decides for every active sweep (the reconciler: a lost wake-up changes nothing).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from functions.catalog.areas import DATA_PREFIX
from infra.config import StageConfig
from infra.constructs.common import allow, arn
from infra.constructs.compute import Compute
from infra.constructs.events import lambda_target
from infra.constructs.function import FunctionSpec, TrainplaneFunction
from infra.constructs.lifecycle import Lifecycle
from infra.constructs.storage import Storage

SWEEPS = FunctionSpec(
    name="sweeps",
    handler="functions.handlers.sweeps_controller.handler",
    description="trainplane sweep controller: Optuna decides which trials to start, prune or end",
    memory_mb=1024,  # a decision rebuilds the study from every trial (docs/BENCHMARKS.md)
    timeout_s=120,
)
RECONCILE_EVERY = Duration.minutes(1)


class Sweeps(Construct):
    """Built in two steps: the controller's name first (it goes into every function's settings), then the function."""

    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.function_name = config.name(SWEEPS.name)
        self.function_arn = arn(self, "lambda", f"function:{self.function_name}")

    def settings(self) -> dict[str, str]:
        return {"sweep_controller_function": self.function_name}

    def add_controller(
        self,
        *,
        storage: Storage,
        compute: Compute,
        lifecycle: Lifecycle,
        dead_letter_queue: sqs.IQueue,
        code: lambda_.Code,
        environment: Mapping[str, str],
    ) -> TrainplaneFunction:
        self.controller = TrainplaneFunction(
            self,
            "Controller",
            spec=SWEEPS,
            code=code,
            config=self.config,
            environment=environment,
            reserved_concurrency=self.config.reserved_concurrency.sweeps,
            dead_letter_queue=dead_letter_queue,
        )
        role = self.controller.role
        storage.grant_jobs(role, write=True)  # sweeps, trials, and the trial jobs it submits
        lifecycle.grant_start(role)  # a trial job's execution
        # A trial's paths get submit's check: an output_path in a data area is probed (read-only).
        storage.grant_artifacts(role, prefixes=[DATA_PREFIX])
        lifecycle.grant_answer_tasks(role)  # pause/resume/cancel of trial jobs, through the same service as the API
        compute.grant_stop(role)  # pruning or pausing a running trial stops its run
        self.reconciler = events.Rule(
            self,
            "Reconcile",
            description="decide for every active sweep (covers a lost wake-up)",
            schedule=events.Schedule.rate(RECONCILE_EVERY),
            targets=[lambda_target(self.controller.function, dead_letter_queue)],
        )
        return self.controller

    def grant_wake(self, role: iam.IRole) -> None:
        """Wake the controller: an asynchronous Invoke of this one function."""
        allow(role, ["lambda:InvokeFunction"], [self.function_arn])
