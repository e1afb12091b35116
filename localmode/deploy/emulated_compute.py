"""Local mode `--compute sagemaker|ec2`: the REAL launchers against the emulated AWS, the compute emulated.

The control plane runs unchanged: SageMakerLauncher calls CreateTrainingJob / StopTrainingJob /
DescribeTrainingJob on moto, EC2Launcher calls RunInstances / CreateTags / TerminateInstances /
DescribeInstances, and run ends arrive as EventBridge events at the events Lambda
(functions/handlers/events.py). What no emulator provides, this module does:

- moto's training job is `Completed` the moment it is created and has no StopTrainingJob
  (docs/LOCAL_AWS.md). Here a created job is `InProgress` (Starting, then Training) until its trainer
  ends; StopTrainingJob exists (Stopping, SIGTERM, then Stopped); the job's end fills
  TrainingTimeInSeconds, BillableTimeInSeconds, FailureReason ("AlgorithmError: DataError: ...") as
  SageMaker does. These are the only moto internals touched (pinned; tests fail on an upgrade).
- moto's instances run nothing. Here a poller finds instances tagged by the launcher, runs the
  trainer for each, and does what the user data does on a real instance: watches the
  trainplane:stop tag, writes the exit status object to S3, and terminates the instance.
- The trainer itself runs as a local process through the LocalLauncher (same environment contract).
  Its log goes to CloudWatch Logs in the group/stream the real engine uses, and to S3 as in local mode.
- Each run's state changes are delivered as EventBridge events to the events handler, in process
  (moto cannot deliver EventBridge events to a Lambda target).

Trainer reports (phases, progress, checkpoints) take the cloud's path, not a shortcut: their
TRAINPLANE_EVENT lines are put into CloudWatch Logs like every other line (as soon as the LocalLauncher
reads one, where SageMaker's agent or docker's awslogs driver batches for a few seconds), and the
log group's subscription filter delivers them to the events Lambda (localmode/deploy/trainer_reports.py).
Nothing here hands a report or a heartbeat to the lifecycle in process.

Multi-node EC2 jobs: the N instances of one RunInstances call run N trainers here, each a LocalLauncher
process with its own work directory, on loopback: each node's rank is its AMI launch index, and the
master comes from the rendezvous object the EC2 launcher wrote (waited for, as the user data waits),
with the emulated network's one difference: every instance's private address is this machine, so
MASTER_ADDR is 127.0.0.1 and MASTER_PORT a free port per attempt (several jobs share the host here).
Node k > 0 writes exit-node<k>.json and logs to CloudWatch only ("...trainer-node<k>"), as the user data does.

Emulated node loss: tag an instance `trainplane-emulator:lose` (any value): its trainer is killed with
SIGKILL and the instance terminated as EC2 does when it loses the host (StateReason
Server.InternalError, no exit status): the hard end of one node of a multi-node job.

Emulated spot interruption: tag the training job or the instance `trainplane-emulator:interrupt`
(any value) through the emulated AWS. EC2: the "Spot Instance Interruption Warning" event fires and
the trainer gets SIGTERM, as the user data's watcher would do on the two-minute notice. SageMaker:
the job goes `Interrupted`, its trainer gets SIGTERM, and spot capacity "never returns": the job ends
`Stopped` / `MaxWaitTimeExceeded`, which the control plane treats as a preemption.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import shlex
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import moto

from functions import constants
from functions.adapters.launchers import cloud, pricing
from functions.adapters.launchers.base import LaunchHandle, LaunchRequest, RunDescription, RunState
from functions.adapters.launchers.ec2 import exit_status_key, log_stream_prefix
from functions.adapters.launchers.local import DEFAULT_COMMAND, LocalLauncher
from functions.adapters.launchers.sagemaker import LOG_GROUP, RUN_SPEC_HYPERPARAMETER, parse_training_job_name, training_job_name
from functions.service.cloud_events import EC2_SPOT_WARNING, EC2_STATE_CHANGE, SAGEMAKER_STATE_CHANGE
from localmode import iam_calls
from schemas.job import ErrorType
from schemas.trainer import ERROR_EXIT_CODES, ERROR_FAILURE_REASONS, ExitCode, FailureReason, RunSpec, TrainerEvent

if TYPE_CHECKING:
    from localmode.deploy import LocalContext

logger = logging.getLogger(__name__)

# The role each engine's trainer runs as in the cloud (make iam-check's callers; scripts/iam_check.py).
TRAINER_ROLES = {"sagemaker": "SageMakerTrainer", "ec2": "Ec2Trainer"}

PINNED_MOTO_VERSION = "5.2.5"
INTERRUPT_TAG = "trainplane-emulator:interrupt"
LOSE_TAG = "trainplane-emulator:lose"
POLL_SECONDS = 0.5
LOG_DELIVERY_WAIT_SECONDS = 2.0
EMULATED_AMI = "ami-0trainplane0local0"
LAUNCH_TEMPLATE = "trainplane-trainer"
PLACEMENT_GROUP = "trainplane-multinode"
_RUN_SPEC_LINE = re.compile(r"^RUN_SPEC_URI=(?P<value>.+)$", re.MULTILINE)
_MAX_RUNTIME_LINE = re.compile(r"^MAX_RUNTIME_SECONDS=(?P<value>.+)$", re.MULTILINE)
_NODE_COUNT_LINE = re.compile(r"^NODE_COUNT=(?P<value>.+)$", re.MULTILINE)
_RENDEZVOUS_LINE = re.compile(r"^RENDEZVOUS_URI=(?P<value>.+)$", re.MULTILINE)

EventSink = Callable[[dict[str, Any]], None]
ClientFactory = Callable[[str], Any]


def deliver_to_events_handler(event: dict[str, Any]) -> None:
    """EventBridge -> the events Lambda, in process (moto raises NotImplementedError for Lambda targets)."""
    from functions.handlers import events

    events.lambda_handler(event, _LambdaContext())  # type: ignore[arg-type]


@dataclass
class _Run:
    kind: str  # "sagemaker" | "ec2"
    run_id: str  # training job name | instance id
    job_id: str
    attempt: int
    spot: bool = False
    handle: LaunchHandle | None = None  # the local process running the trainer
    started_at: float = field(default_factory=time.time)
    stop_reason: str | None = None
    interrupted: bool = False
    ended: threading.Event = field(default_factory=threading.Event)
    log_stream: str | None = None  # named once, at its first line
    node: int = 0  # EC2 multi-node: the node rank (AMI launch index)
    lost: bool = False  # emulated loss of the host (LOSE_TAG)


class EmulatedCompute:
    """The compute behind the emulated SageMaker / EC2 of one `trainplane up` (one at a time)."""

    def __init__(
        self,
        compute: str,
        client: ClientFactory,
        runner: LocalLauncher,
        *,
        bucket: str,
        trainer_log_group: str,
        region: str = constants.LOCAL_REGION,
        account_id: str = constants.LOCAL_ACCOUNT_ID,
        sink: EventSink = deliver_to_events_handler,
    ) -> None:
        if compute not in {"sagemaker", "ec2"}:
            raise ValueError(f"no emulated compute for {compute!r}")
        self.compute = compute
        self.client = client
        self.runner = runner
        self.bucket = bucket
        self.trainer_log_group = trainer_log_group
        self.region = region
        self.account_id = account_id
        self.sink = sink
        self._runs: dict[str, _Run] = {}  # by run id
        self._by_attempt: dict[tuple[str, int, int], _Run] = {}  # by (job, attempt, node)
        self._node_runners: dict[int, LocalLauncher] = {0: runner}
        self._master_ports: dict[tuple[str, int], int] = {}
        self._log_shipped: dict[str, tuple[int, int]] = {}  # stream -> (bytes shipped, last timestamp)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._upload_log = runner.upload_log
        runner.upload_log = self._ship_log
        runner.observer = self

    # --- life -------------------------------------------------------------------------------------
    def start(self) -> None:
        global _active
        if moto.__version__ != PINNED_MOTO_VERSION:
            raise RuntimeError(
                f"localmode.deploy.emulated_compute changes moto {PINNED_MOTO_VERSION}'s SageMaker internals but moto "
                f"{moto.__version__} is installed: re-check FakeTrainingJob and SageMakerResponse, then update the pin"
            )
        with _active_lock:
            if _active is not None and _active is not self:
                raise RuntimeError("another EmulatedCompute is active in this process")
            _active = self
        _install_patches()
        self._poller = threading.Thread(target=self._poll_forever, name=f"emulated-{self.compute}", daemon=True)
        self._poller.start()

    def shutdown(self) -> None:
        """Stop polling and every trainer (with a checkpoint); no events are sent any more."""
        global _active
        self._stop.set()
        started = time.monotonic()
        for node_runner in list(self._node_runners.values()):
            node_runner.shutdown()
        if self._poller is not None:
            self._poller.join(5)
        with _active_lock:
            if _active is self:
                _active = None
        logger.info("emulated %s stopped in %.1fs", self.compute, time.monotonic() - started)

    def runs(self) -> list[tuple[str, str, int]]:
        """(run id, job id, attempt) of every run started so far (for tests and logs)."""
        with self._lock:
            return [(r.run_id, r.job_id, r.attempt) for r in self._runs.values()]

    # --- SageMaker (called from moto's request threads through the patches) --------------------
    def sagemaker_created(self, job: Any) -> None:
        """A CreateTrainingJob just stored `job` as Completed: make it a job that has yet to run."""
        now = datetime.now(UTC)
        job.training_job_status = "InProgress"
        job.secondary_status = "Starting"
        job.training_start_time = None
        job.training_end_time = None
        job.final_metric_data_list = []
        job.model_artifacts = {"S3ModelArtifacts": ""}
        job.secondary_status_transitions = [
            {"Status": "Starting", "StartTime": now, "StatusMessage": "Preparing the instances for training"}
        ]
        ref = cloud.job_ref_from_tags({t["Key"]: t["Value"] for t in job.tags}) or parse_training_job_name(job.training_job_name)
        if ref is None:
            logger.warning("emulated SageMaker: %s is not a trainplane job; it stays InProgress", job.training_job_name)
            return
        run = _Run("sagemaker", job.training_job_name, ref[0], ref[1], spot=bool(job.enable_managed_spot_training))
        self._register(run)
        threading.Thread(target=self._start_sagemaker, args=(run, job), name=f"start-{run.run_id}", daemon=True).start()

    def sagemaker_stop(self, job: Any) -> None:
        """StopTrainingJob: Stopping, then SIGTERM to the trainer (Stopped when it has exited)."""
        from moto.sagemaker.exceptions import ValidationError

        if job.training_job_status not in {"InProgress", "Stopping"}:
            raise ValidationError(message=f"The request was rejected because the training job is in status {job.training_job_status}.")
        job.training_job_status = "Stopping"
        _transition(job, "Stopping", "Stopping the training job")
        run = self._runs.get(job.training_job_name)
        if run is not None:
            run.stop_reason = run.stop_reason or "stop"
            if run.handle is not None:
                threading.Thread(target=self.runner.stop, args=(run.handle,), daemon=True).start()

    def _start_sagemaker(self, run: _Run, job: Any) -> None:
        try:
            spec_uri = job.hyper_parameters[RUN_SPEC_HYPERPARAMETER]
            request = self._request(run, spec_uri, tags={t["Key"]: t["Value"] for t in job.tags})
            runtime = (job.stopping_condition or {}).get("MaxRuntimeInSeconds")
            request = _with_runtime(request, runtime)
            _transition(job, "Downloading", "Downloading the training image")
            if run.stop_reason is not None:  # stopped before it ever started
                self._end_sagemaker(run, job, RunDescription(RunState.STOPPED, message="stopped before start", run_seconds=0.0))
                return
            run.handle = self.runner.launch(request)
            run.started_at = time.time()
            job.training_start_time = datetime.now(UTC)
            _transition(job, "Training", "Training image download completed. Training in progress.")
            self._emit_sagemaker(job)
        except Exception as exc:
            logger.exception("emulated SageMaker could not start %s", run.run_id)
            self._end_sagemaker(run, job, RunDescription(RunState.FAILED, ErrorType.USER_ERROR, f"ClientError: {exc}", run_seconds=0.0))

    def _end_sagemaker(self, run: _Run, job: Any, description: RunDescription) -> None:
        seconds = float(description.run_seconds or 0.0)
        job.training_end_time = datetime.now(UTC)
        job.training_time_in_seconds = round(seconds)
        # Managed spot bills less than the run (SageMaker's own saving); emulated at the typical discount.
        billable = seconds * (1.0 - pricing.SPOT_DISCOUNT_ESTIMATE["sagemaker"]) if run.spot else seconds
        job.billable_time_in_seconds = max(round(billable), 1 if seconds else 0)
        status, secondary, failure = _sagemaker_end(description, run)
        job.training_job_status = status
        if failure:
            job.failure_reason = failure
        _transition(job, secondary, failure or f"Training job {status.lower()}")
        run.ended.set()
        self._logs_delivered()
        self._emit_sagemaker(job)

    def _emit_sagemaker(self, job: Any) -> None:
        detail = _json_safe({k: v for k, v in job.response_object.items() if k != "Tags"})
        detail["Tags"] = {t["Key"]: t["Value"] for t in job.tags}
        self._emit(SAGEMAKER_STATE_CHANGE, "aws.sagemaker", job.arn, detail)

    # --- EC2 (the poller finds what the launcher started) ----------------------------------------
    def _poll_ec2(self) -> None:
        ec2 = self.client("ec2")
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "tag-key", "Values": [cloud.TAG_JOB_ID]}, {"Name": "instance-state-name", "Values": ["pending", "running"]}]
        )
        seen: set[str] = set()
        for page in pages:
            for reservation in page["Reservations"]:
                for instance in reservation["Instances"]:
                    seen.add(instance["InstanceId"])
                    self._watch_instance(instance)
        with self._lock:
            lost = [r for r in self._runs.values() if r.kind == "ec2" and not r.ended.is_set() and r.run_id not in seen]
        for run in lost:  # terminated by someone (a cancel): the trainer dies with its instance
            run.stop_reason = run.stop_reason or "terminated"
            if run.handle is not None:
                self._runner(run).stop(run.handle, graceful=False)

    def _watch_instance(self, instance: Mapping[str, Any]) -> None:
        instance_id = instance["InstanceId"]
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
        run = self._runs.get(instance_id)
        if run is None:
            ref = cloud.job_ref_from_tags(tags)
            if ref is None:
                return
            node = int(instance.get("AmiLaunchIndex", 0))
            run = _Run("ec2", instance_id, ref[0], ref[1], spot=instance.get("InstanceLifecycle") == "spot", node=node)
            try:
                user_data = self._user_data(instance_id)
                node_env = self._rendezvous(run, user_data)
                if node_env is None:
                    return  # the launcher has not written the rendezvous yet: the next poll looks again
                self._register(run)
                request = _with_environment(self._request(run, _shell_value(_RUN_SPEC_LINE, user_data), tags=tags), node_env)
                runtime = _shell_value(_MAX_RUNTIME_LINE, user_data)
                limit = int(runtime) if runtime.isdigit() and int(runtime) else None
                run.handle = self._runner(run).launch(_with_runtime(request, limit))
            except Exception as exc:
                self._register(run)
                logger.exception("emulated EC2 could not start the trainer on %s", instance_id)
                self._end_ec2(
                    run, {"exit_code": int(ExitCode.INTERNAL_ERROR), "reason": "bootstrap-error", "failure": f"InternalError: {exc}"}
                )
            return
        if run.ended.is_set() or run.handle is None:
            return
        if LOSE_TAG in tags and not run.lost:
            # The host goes first, then its processes: EC2 shows the instance lost before any peer
            # (whose collective fails at once on loopback) can report a failure of its own.
            run.lost = True
            self.client("ec2").terminate_instances(InstanceIds=[instance_id])
            _mark_host_lost(self.account_id, self.region, instance_id)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(run.handle.run_id), signal.SIGKILL)
            return
        if INTERRUPT_TAG in tags and not run.interrupted:
            run.interrupted = True
            self._emit(
                EC2_SPOT_WARNING, "aws.ec2", self._instance_arn(instance_id), {"instance-id": instance_id, "instance-action": "terminate"}
            )
            self._stop_run(run, "spot-interruption")
        requested = tags.get(cloud.TAG_STOP)
        if requested:
            self._stop_run(run, f"stop-{requested}")

    def _end_ec2(self, run: _Run, status: Mapping[str, Any]) -> None:
        """The user data's last steps: the exit status object, the bootstrap log, then power off (terminate)."""
        ec2 = self.client("ec2")
        state = ec2.describe_instances(InstanceIds=[run.run_id])["Reservations"][0]["Instances"][0]["State"]["Name"]
        if state != "terminated":  # a terminated instance's user data never got to write anything
            document = {"started_at": run.started_at, "ended_at": time.time(), "instance_id": run.run_id, "oom_killed": False, **status}
            document["interrupted"] = run.interrupted
            key = exit_status_key(run.job_id, run.attempt, run.node)
            self.client("s3").put_object(Bucket=self.bucket, Key=key, Body=json.dumps(document).encode())
            ec2.terminate_instances(InstanceIds=[run.run_id])
        run.ended.set()
        self._logs_delivered()
        self._emit(EC2_STATE_CHANGE, "aws.ec2", self._instance_arn(run.run_id), {"instance-id": run.run_id, "state": "terminated"})

    # --- SageMaker tags (the interrupt control) --------------------------------------------------
    def _poll_sagemaker(self) -> None:
        with self._lock:
            active = [r for r in self._runs.values() if r.kind == "sagemaker" and not r.ended.is_set() and not r.interrupted]
        if not active:
            return
        sm = self.client("sagemaker")
        for run in active:
            arn = f"arn:aws:sagemaker:{self.region}:{self.account_id}:training-job/{run.run_id}"
            tags = {t["Key"] for t in sm.list_tags(ResourceArn=arn).get("Tags", [])}
            if INTERRUPT_TAG in tags:
                run.interrupted = True
                job = _training_job(self.account_id, self.region, run.run_id)
                if job is not None:
                    _transition(job, "Interrupted", "Training job interrupted (emulated spot reclaim)")
                self._stop_run(run, "spot-interruption")

    # --- LocalLauncher observer -------------------------------------------------------------------
    def on_trainer_event(self, job_id: str, attempt: int, event: TrainerEvent) -> None:
        """A report line was read: ship the run's new lines to CloudWatch Logs now (the subscription
        filter takes the report from there), not on the next tick."""
        self.node_event(job_id, attempt, 0)

    def node_event(self, job_id: str, attempt: int, node: int) -> None:
        run = self._by_attempt.get((job_id, attempt, node))
        if run is None or run.handle is None:
            return
        try:
            self._ship_to_cloudwatch(run, self._runner(run).log_path(run.handle))
        except Exception:
            logger.exception("emulated %s: log lines of %s not shipped; next tick", self.compute, job_id)

    def on_run_alive(self, job_id: str, attempt: int) -> None:
        """Nothing: in AWS no one tells the control plane a run is alive but its reports (any report is a
        heartbeat), the engine's events and the reconciler's sweeps."""

    def on_run_finished(self, job_id: str, attempt: int, run_description: RunDescription) -> None:
        self.node_finished(job_id, attempt, 0, run_description)

    def node_finished(self, job_id: str, attempt: int, node: int, run_description: RunDescription) -> None:
        run = self._by_attempt.get((job_id, attempt, node))
        if run is None or run.ended.is_set():
            return
        if run.kind == "sagemaker":
            job = _training_job(self.account_id, self.region, run.run_id)
            if job is not None:
                self._end_sagemaker(run, job, run_description)
        else:
            self._end_ec2(run, _exit_status(run_description, run))

    # --- shared -----------------------------------------------------------------------------------
    def _register(self, run: _Run) -> None:
        with self._lock:
            self._runs[run.run_id] = run
            self._by_attempt[(run.job_id, run.attempt, run.node)] = run

    def _runner(self, run: _Run) -> LocalLauncher:
        """Node 0 runs on the plane's LocalLauncher; node k on one of its own (its own work directory)."""
        with self._lock:
            if run.node not in self._node_runners:
                base = self.runner
                node_runner = LocalLauncher(
                    base.work_dir / f"node-{run.node}",
                    command=base.command,
                    env=base.env,
                    s3_endpoint_url=base.s3_endpoint_url,
                    upload_log=functools.partial(self._ship_node_log, run.node),
                    stop_grace_seconds=base.stop_grace_seconds,
                    tick_seconds=base.tick_seconds,
                )
                node_runner.observer = _NodeObserver(self, run.node)
                self._node_runners[run.node] = node_runner
            return self._node_runners[run.node]

    def _rendezvous(self, run: _Run, user_data: str) -> dict[str, str] | None:
        """What the user data adds to the trainer's environment on a node of a multi-node job ({} for one
        node); None while the rendezvous object is not there yet."""
        count = _shell_value(_NODE_COUNT_LINE, user_data) if _NODE_COUNT_LINE.search(user_data) else "1"
        if int(count) <= 1:
            return {}
        bucket, key = _split_s3(_shell_value(_RENDEZVOUS_LINE, user_data))
        try:
            rendezvous = json.loads(self.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
        except self.client("s3").exceptions.NoSuchKey:
            return None
        with self._lock:
            port = self._master_ports.setdefault((run.job_id, run.attempt), _free_port())
        logger.info("emulated EC2: %s is node %d of %s, master %s (loopback here)", run.run_id, run.node, count, rendezvous["master_addr"])
        return {"NODE_RANK": str(run.node), "NNODES": count, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}

    def _ship_node_log(self, node: int, key: str, body: bytes) -> None:
        """Node k > 0: its lines go to CloudWatch Logs only (the job's log in S3 is rank 0's)."""
        match = constants.LOG_KEY.match(key)
        if match is not None:
            self.node_event(match.group("job_id"), int(match.group("attempt")), node)

    def _request(self, run: _Run, spec_uri: str, *, tags: Mapping[str, str]) -> LaunchRequest:
        bucket, key = _split_s3(spec_uri)
        spec = RunSpec.model_validate_json(self.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
        labels = {k[len(cloud.TAG_LABEL_PREFIX) :]: v for k, v in tags.items() if k.startswith(cloud.TAG_LABEL_PREFIX)}
        return LaunchRequest(
            job_id=run.job_id,
            attempt=run.attempt,
            owner=tags.get(cloud.TAG_OWNER, ""),
            run_spec=spec,
            run_spec_uri=spec_uri,
            labels=labels,
            preemptible=run.spot,
            max_runtime_seconds=spec.max_runtime_seconds,
        )

    def _stop_run(self, run: _Run, reason: str) -> None:
        if run.stop_reason is not None or run.handle is None:
            return
        run.stop_reason = reason
        self._runner(run).stop(run.handle)

    def _user_data(self, instance_id: str) -> str:
        import base64

        raw = self.client("ec2").describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"].get("Value", "")
        return base64.b64decode(raw).decode() if raw else ""

    def _emit(self, detail_type: str, source: str, resource: str, detail: dict[str, Any]) -> None:
        if self._stop.is_set():
            return
        event = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": detail_type,
            "source": source,
            "account": self.account_id,
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": self.region,
            "resources": [resource],
            "detail": detail,
        }
        try:
            self.sink(event)
        except Exception:
            # As EventBridge: a failed delivery is not the emitter's problem; the reconciler catches up.
            logger.exception("emulated %s event for %s not delivered", detail_type, resource)

    def _logs_delivered(self) -> None:
        """Before a run's end event: the subscription deliveries of its last lines, for a moment at most.

        SageMaker and the awslogs driver flush a container's last lines as it exits, and the subscription
        usually delivers them before the end's EventBridge event is handled; here the two would race
        on every run. Not a guarantee the control plane relies on: a report that comes after the end is
        caught up from S3 (LifecycleService.catch_up), only its phase-history entry would be missing.
        """
        from localmode import moto_lambda

        if not moto_lambda.wait_for_deliveries(LOG_DELIVERY_WAIT_SECONDS):
            logger.info("emulated %s: log subscription deliveries still pending at a run's end", self.compute)

    def _instance_arn(self, instance_id: str) -> str:
        return f"arn:aws:ec2:{self.region}:{self.account_id}:instance/{instance_id}"

    def _ship_log(self, key: str, body: bytes) -> None:
        """The LocalLauncher's log upload: to S3 as in local mode, and the new lines to CloudWatch Logs."""
        if self._upload_log is not None:
            self._upload_log(key, body)
        match = constants.LOG_KEY.match(key)
        if match is None:
            return
        run = self._by_attempt.get((match.group("job_id"), int(match.group("attempt")), 0))
        if run is not None and run.handle is not None:
            self._ship_to_cloudwatch(run, self.runner.log_path(run.handle))

    def _ship_to_cloudwatch(self, run: _Run, log_path: Path) -> None:
        """The run's complete lines not shipped yet -> PutLogEvents in the group/stream its engine uses."""
        with self._lock:
            if run.log_stream is None:
                if run.kind == "sagemaker":
                    run.log_stream = f"{training_job_name(run.job_id, run.attempt)}/algo-1-{int(time.time())}"
                else:
                    suffix = f"-node{run.node}" if run.node else ""
                    run.log_stream = f"{log_stream_prefix(run.job_id, run.attempt)}trainer{suffix}"
            group = LOG_GROUP if run.kind == "sagemaker" else self.trainer_log_group
            stream = run.log_stream
            shipped, last_ms = self._log_shipped.get(stream, (0, 0))
            try:
                with log_path.open("rb") as log:
                    log.seek(shipped)
                    fresh = log.read()
            except OSError:
                return
            complete = fresh[: fresh.rfind(b"\n") + 1]  # whole lines only; the rest goes next time
            if not complete:
                return
            # Both engines ship the container's stdout and stderr as one stream: the local tags go.
            lines = [constants.untag_log_line(line)[1] for line in complete.decode("utf-8", errors="replace").splitlines()]
            now_ms = int(time.time() * 1000)
            events = []
            for i, line in enumerate(lines):
                last_ms = max(last_ms + 1, now_ms - len(lines) + i)
                events.append({"timestamp": last_ms, "message": line})
            logs = self.client("logs")
            if shipped == 0:
                _ensure_stream(logs, group, stream)
            for start in range(0, len(events), 5000):
                logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events[start : start + 5000])
            self._log_shipped[stream] = (shipped + len(complete), last_ms)

    def _poll_forever(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                if self.compute == "ec2":
                    self._poll_ec2()
                else:
                    self._poll_sagemaker()
            except Exception:
                logger.exception("emulated %s: poll failed; next in %.1fs", self.compute, POLL_SECONDS)


# --- pure helpers ---------------------------------------------------------------------------------


def _sagemaker_end(description: RunDescription, run: _Run) -> tuple[str, str, str | None]:
    """The trainer's end -> (TrainingJobStatus, SecondaryStatus, FailureReason) as SageMaker reports them."""
    state = description.state
    if run.interrupted and state in {RunState.STOPPED, RunState.PREEMPTED, RunState.UNKNOWN}:
        return "Stopped", "MaxWaitTimeExceeded", "Training job interrupted and spot capacity did not return within MaxWaitTimeInSeconds"
    if state == RunState.COMPLETED:
        return "Completed", "Completed", None
    if state == RunState.STOPPED:
        return "Stopped", "Stopped", None
    if state == RunState.FAILED and description.error_type == ErrorType.TIMEOUT:
        return "Stopped", "MaxRuntimeExceeded", None
    if state == RunState.FAILED:
        word = ERROR_FAILURE_REASONS.get(description.error_type or ErrorType.INTERNAL, FailureReason.INTERNAL.value)
        return "Failed", "Failed", f"AlgorithmError: {word}: {description.message or 'the trainer failed'}"
    return "Stopped", "Interrupted", "Training job interrupted: the training instance was lost"


def _exit_status(description: RunDescription, run: _Run) -> dict[str, Any]:
    """The trainer's end -> what the user data writes: exit code, why it stopped, the failure file."""
    reason = run.stop_reason or "exited"
    state = description.state
    if state == RunState.COMPLETED:
        return {"exit_code": int(ExitCode.COMPLETED), "reason": reason, "failure": None}
    if state == RunState.STOPPED:
        return {"exit_code": int(ExitCode.STOPPED_WITH_CHECKPOINT), "reason": reason, "failure": None}
    if state == RunState.FAILED and description.error_type == ErrorType.TIMEOUT:
        return {"exit_code": int(ExitCode.STOPPED_WITH_CHECKPOINT), "reason": "max-runtime", "failure": None}
    if state == RunState.FAILED:
        error = description.error_type or ErrorType.INTERNAL
        word = ERROR_FAILURE_REASONS.get(error, FailureReason.INTERNAL.value)
        return {
            "exit_code": int(ERROR_EXIT_CODES.get(error, ExitCode.INTERNAL_ERROR)),
            "reason": reason,
            "failure": f"{word}: {description.message}",
        }
    return {"exit_code": 137, "reason": reason, "failure": None}


def _with_environment(request: LaunchRequest, extra: Mapping[str, str]) -> LaunchRequest:
    """The user data's `-e` additions (a node's rank and master) on top of the job's environment."""
    if not extra:
        return request
    from dataclasses import replace

    training = request.run_spec.training_config
    training = training.model_copy(update={"environment": {**training.environment, **extra}})
    return replace(request, run_spec=request.run_spec.model_copy(update={"training_config": training}))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _mark_host_lost(account_id: str, region: str, instance_id: str) -> None:
    """EC2's word for an instance whose host failed (moto only knows user-initiated terminations)."""
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.instances import StateReason

    instance = ec2_backends[account_id][region].get_instance(instance_id)
    instance.state_reason = StateReason("Server.InternalError: Internal error on the host", "Server.InternalError")


class _NodeObserver:
    """The LocalLauncher observer of node k > 0: its reports are not the job's (rank 0 reports), its end is."""

    def __init__(self, emulator: EmulatedCompute, node: int) -> None:
        self.emulator, self.node = emulator, node

    def on_trainer_event(self, job_id: str, attempt: int, event: TrainerEvent) -> None:
        self.emulator.node_event(job_id, attempt, self.node)

    def on_run_alive(self, job_id: str, attempt: int) -> None:
        """Nothing, as for node 0."""

    def on_run_finished(self, job_id: str, attempt: int, run_description: RunDescription) -> None:
        self.emulator.node_finished(job_id, attempt, self.node, run_description)


def _with_runtime(request: LaunchRequest, runtime: int | None) -> LaunchRequest:
    from dataclasses import replace

    return replace(request, max_runtime_seconds=runtime or request.max_runtime_seconds)


def _transition(job: Any, status: str, message: str) -> None:
    now = datetime.now(UTC)
    transitions = list(job.secondary_status_transitions or [])
    if transitions and "EndTime" not in transitions[-1]:
        transitions[-1] = {**transitions[-1], "EndTime": now}
    transitions.append({"Status": status, "StartTime": now, "StatusMessage": message})
    job.secondary_status_transitions = transitions
    job.secondary_status = status
    job.last_modified_time = now


def _json_safe(value: Any) -> Any:
    """EventBridge renders SageMaker's timestamps as epoch milliseconds."""
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _shell_value(pattern: re.Pattern[str], text: str) -> str:
    match = pattern.search(text)
    if match is None:
        raise ValueError(f"user data has no {pattern.pattern.split('=')[0].lstrip('^')} line")
    parts = shlex.split(match.group("value"))
    return parts[0] if parts else ""


def _split_s3(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise ValueError(f"not an s3:// URI: {uri!r}")
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


def _ensure_stream(logs: Any, group: str, stream: str) -> None:
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=group)
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_stream(logGroupName=group, logStreamName=stream)


class _LambdaContext:
    function_name = constants.EVENTS_FUNCTION_NAME
    function_version = "$LATEST"
    memory_limit_in_mb = 512
    invoked_function_arn = f"arn:aws:lambda:{constants.LOCAL_REGION}:{constants.LOCAL_ACCOUNT_ID}:function:{constants.EVENTS_FUNCTION_NAME}"
    aws_request_id = "emulated"


# --- moto patches (SageMaker only; pinned) ----------------------------------------------------------

_active: EmulatedCompute | None = None
_active_lock = threading.Lock()
_installed = False


def _training_job(account_id: str, region: str, name: str) -> Any:
    from moto.sagemaker.models import sagemaker_backends

    return sagemaker_backends[account_id][region].training_jobs.get(name)


def _install_patches() -> None:
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
        emulator = _active
        if emulator is not None:
            emulator.sagemaker_created(job)
        return job

    def stop_training_job(self: Any) -> Any:
        name = self._get_param("TrainingJobName")
        job = self.sagemaker_backend.training_jobs.get(name)
        if job is None:
            arn = f"arn:aws:sagemaker:{self.region}:{self.current_account}:training-job/{name}"
            raise ValidationError(message=f"Could not find training job '{arn}'.")
        emulator = _active
        if emulator is None:
            raise NotImplementedError("StopTrainingJob needs trainplane's emulated compute (trainplane up --compute sagemaker)")
        emulator.sagemaker_stop(job)
        return EmptyResult()

    SageMakerModelBackend.create_training_job = create_training_job  # type: ignore[method-assign]
    SageMakerResponse.stop_training_job = stop_training_job  # type: ignore[attr-defined]
    _installed = True


# --- the local deployer -----------------------------------------------------------------------------


def deploy(ctx: LocalContext) -> None:
    """localmode/deploy deployer: the cloud launcher's resources in moto, and the emulated compute behind them."""
    if ctx.compute not in {"sagemaker", "ec2"}:
        return
    # moto's EC2 loads thousands of default AMIs on first use (seconds); the template names its own.
    os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    iam = ctx.client("iam")
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}],
    }
    role = iam.create_role(RoleName="trainplane-sagemaker", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    ctx.set_setting("sagemaker_role_arn", role)
    ctx.set_setting("trainer_image_uri", f"{ctx.account_id}.dkr.ecr.{ctx.region}.amazonaws.com/trainplane-trainer:local")
    profile = iam.create_instance_profile(InstanceProfileName="trainplane-trainer")["InstanceProfile"]["Arn"]
    ctx.set_setting("ec2_instance_profile_arn", profile)
    ctx.client("ec2").create_launch_template(LaunchTemplateName=LAUNCH_TEMPLATE, LaunchTemplateData={"ImageId": EMULATED_AMI})
    ctx.set_setting("ec2_launch_template_name", LAUNCH_TEMPLATE)
    # moto has no placement groups (CreatePlacementGroup is not implemented, RunInstances drops the
    # group): the name is passed on as the stack's would be; the nodes here all share one host anyway.
    ctx.set_setting("ec2_placement_group", PLACEMENT_GROUP)

    settings = ctx.settings()
    s3 = ctx.client("s3")
    runner = LocalLauncher(
        ctx.state_dir / f"emulated-{ctx.compute}",
        command=shlex.split(settings.trainer_command) if settings.trainer_command else DEFAULT_COMMAND,
        s3_endpoint_url=ctx.endpoint_url,
        upload_log=lambda key, body: s3.put_object(Bucket=settings.artifacts_bucket, Key=key, Body=body),
        stop_grace_seconds=float(settings.stop_grace_seconds),
        # While make iam-check records: the trainer's calls as the engine's trainer role's.
        env=iam_calls.trainer_environment(TRAINER_ROLES[ctx.compute], settings.artifacts_bucket, ctx.compute),
    )
    clients: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in clients:
            clients[service] = ctx.client(service)
        return clients[service]

    emulator = EmulatedCompute(
        ctx.compute,
        client,
        runner,
        bucket=settings.artifacts_bucket,
        trainer_log_group=settings.trainer_log_group,
        region=ctx.region,
        account_id=ctx.account_id,
    )

    def serve(stop: threading.Event) -> None:
        emulator.start()
        stop.wait()

    ctx.add_background(f"emulated-{ctx.compute}", serve)
    ctx.on_shutdown(emulator.shutdown)
