"""The emulated compute's shared half: the runs, their trainers (a LocalLauncher per node), the trainer
lines shipped to CloudWatch Logs, the EventBridge events to the events handler, the poller's thread.

The engines (sagemaker.py, ec2.py) say what a run looks like to AWS: what the poller watches, how a run
ends, where its log lines go. The package's docstring says what is emulated and why.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from functions import constants
from functions.adapters.launchers.local import LocalLauncher
from functions.catalog import job_names
from functions.service.ports import LaunchHandle, LaunchRequest, RunDescription
from localmode import moto_pin
from localmode.deploy.emulated_compute import moto_patches
from schemas.trainer import RunSpec, TrainerEvent

logger = logging.getLogger(__name__)

INTERRUPT_TAG = "trainplane-emulator:interrupt"
LOSE_TAG = "trainplane-emulator:lose"
POLL_SECONDS = 0.5
LOG_DELIVERY_WAIT_SECONDS = 2.0

EventSink = Callable[[dict[str, Any]], None]
ClientFactory = Callable[[str], Any]


def deliver_to_events_handler(event: dict[str, Any]) -> None:
    """EventBridge -> the events Lambda, in process (moto raises NotImplementedError for Lambda targets)."""
    from functions.handlers import events

    events.lambda_handler(event, LambdaContext())  # type: ignore[arg-type]


@dataclass
class Run:
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


class EmulatedCompute(ABC):
    """The compute behind the emulated SageMaker / EC2 of one `trainplane up` (one at a time)."""

    compute: str  # "sagemaker" | "ec2"

    def __init__(
        self,
        client: ClientFactory,
        runner: LocalLauncher,
        *,
        bucket: str,
        trainer_log_group: str,
        region: str = constants.LOCAL_REGION,
        account_id: str = constants.LOCAL_ACCOUNT_ID,
        sink: EventSink = deliver_to_events_handler,
    ) -> None:
        self.client = client
        self.runner = runner
        self.bucket = bucket
        self.trainer_log_group = trainer_log_group
        self.region = region
        self.account_id = account_id
        self.sink = sink
        self._runs: dict[str, Run] = {}  # by run id
        self._by_attempt: dict[tuple[str, int, int], Run] = {}  # by (job, attempt, node)
        self._node_runners: dict[int, LocalLauncher] = {0: runner}
        self._master_ports: dict[tuple[str, int], int] = {}
        self._log_shipped: dict[str, tuple[int, int]] = {}  # stream -> (bytes shipped, last timestamp)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._upload_log = runner.upload_log
        runner.upload_log = self._ship_log
        runner.observer = self

    def start(self) -> None:
        moto_pin.check("localmode.deploy.emulated_compute", "FakeTrainingJob, SageMakerResponse and EC2's StateReason (moto_patches.py)")
        moto_patches.activate(self, self._training_jobs())
        self._poller = threading.Thread(target=self._poll_forever, name=f"emulated-{self.compute}", daemon=True)
        self._poller.start()

    def shutdown(self) -> None:
        """Stop polling and every trainer (with a checkpoint); no events are sent any more."""
        self._stop.set()
        started = time.monotonic()
        for node_runner in list(self._node_runners.values()):
            node_runner.shutdown()
        if self._poller is not None:
            self._poller.join(5)
        moto_patches.deactivate(self)
        logger.info("emulated %s stopped in %.1fs", self.compute, time.monotonic() - started)

    def runs(self) -> list[tuple[str, str, int]]:
        """(run id, job id, attempt) of every run started so far (for tests and logs)."""
        with self._lock:
            return [(r.run_id, r.job_id, r.attempt) for r in self._runs.values()]

    # --- the LocalLauncher observer -------------------------------------------------------------------
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
        return

    def on_run_finished(self, job_id: str, attempt: int, run_description: RunDescription) -> None:
        self.node_finished(job_id, attempt, 0, run_description)

    def node_finished(self, job_id: str, attempt: int, node: int, run_description: RunDescription) -> None:
        run = self._by_attempt.get((job_id, attempt, node))
        if run is None or run.ended.is_set():
            return
        self._end_run(run, run_description)

    # --- what each engine says (sagemaker.py, ec2.py) ---------------------------------------------
    @abstractmethod
    def _poll(self) -> None:
        """One tick of the poller: what the engine watches in the emulated AWS (instances, tags)."""

    @abstractmethod
    def _end_run(self, run: Run, description: RunDescription) -> None:
        """The trainer of `run` ended as `description`: end the run as the engine does, and say so."""

    @abstractmethod
    def _log_stream(self, run: Run) -> str:
        """The CloudWatch Logs stream the engine writes the run's trainer lines to (named at its first line)."""

    @abstractmethod
    def _log_group(self) -> str:
        """The CloudWatch Logs group of the engine's trainer lines."""

    def _training_jobs(self) -> moto_patches.TrainingJobs | None:
        """What handles moto's CreateTrainingJob / StopTrainingJob while this emulator runs (SageMaker's)."""
        return None

    # --- shared -----------------------------------------------------------------------------------
    def _register(self, run: Run) -> None:
        with self._lock:
            self._runs[run.run_id] = run
            self._by_attempt[(run.job_id, run.attempt, run.node)] = run

    def _runner(self, run: Run) -> LocalLauncher:
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
                node_runner.observer = NodeObserver(self, run.node)
                self._node_runners[run.node] = node_runner
            return self._node_runners[run.node]

    def _ship_node_log(self, node: int, key: str, body: bytes) -> None:
        """Node k > 0: its lines go to CloudWatch Logs only (the job's log in S3 is rank 0's)."""
        match = constants.LOG_KEY.match(key)
        if match is not None:
            self.node_event(match.group("job_id"), int(match.group("attempt")), node)

    def _request(self, run: Run, spec_uri: str, *, tags: Mapping[str, str]) -> LaunchRequest:
        bucket, key = split_s3(spec_uri)
        spec = RunSpec.model_validate_json(self.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
        labels = {k[len(job_names.TAG_LABEL_PREFIX) :]: v for k, v in tags.items() if k.startswith(job_names.TAG_LABEL_PREFIX)}
        return LaunchRequest(
            job_id=run.job_id,
            attempt=run.attempt,
            owner=tags.get(job_names.TAG_OWNER, ""),
            run_spec=spec,
            run_spec_uri=spec_uri,
            labels=labels,
            preemptible=run.spot,
            max_runtime_seconds=spec.max_runtime_seconds,
        )

    def _stop_run(self, run: Run, reason: str) -> None:
        if run.stop_reason is not None or run.handle is None:
            return
        run.stop_reason = reason
        self._runner(run).stop(run.handle)

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

    def _ship_to_cloudwatch(self, run: Run, log_path: Path) -> None:
        """The run's complete lines not shipped yet -> PutLogEvents in the group/stream its engine uses."""
        with self._lock:
            if run.log_stream is None:
                run.log_stream = self._log_stream(run)
            group = self._log_group()
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
                ensure_stream(logs, group, stream)
            for start in range(0, len(events), 5000):
                logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events[start : start + 5000])
            self._log_shipped[stream] = (shipped + len(complete), last_ms)

    def _poll_forever(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                self._poll()
            except Exception:
                logger.exception("emulated %s: poll failed; next in %.1fs", self.compute, POLL_SECONDS)


class NodeObserver:
    """The LocalLauncher observer of node k > 0: its reports are not the job's (rank 0 reports), its end is."""

    def __init__(self, emulator: EmulatedCompute, node: int) -> None:
        self.emulator, self.node = emulator, node

    def on_trainer_event(self, job_id: str, attempt: int, event: TrainerEvent) -> None:
        self.emulator.node_event(job_id, attempt, self.node)

    def on_run_alive(self, job_id: str, attempt: int) -> None:
        """Nothing, as for node 0."""

    def on_run_finished(self, job_id: str, attempt: int, run_description: RunDescription) -> None:
        self.emulator.node_finished(job_id, attempt, self.node, run_description)


def with_environment(request: LaunchRequest, extra: Mapping[str, str]) -> LaunchRequest:
    """The user data's `-e` additions (a node's rank and master) on top of the job's environment."""
    if not extra:
        return request
    training = request.run_spec.training_config
    training = training.model_copy(update={"environment": {**training.environment, **extra}})
    return replace(request, run_spec=request.run_spec.model_copy(update={"training_config": training}))


def with_runtime(request: LaunchRequest, runtime: int | None) -> LaunchRequest:
    return replace(request, max_runtime_seconds=runtime or request.max_runtime_seconds)


def split_s3(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise ValueError(f"not an s3:// URI: {uri!r}")
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


def ensure_stream(logs: Any, group: str, stream: str) -> None:
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=group)
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_stream(logGroupName=group, logStreamName=stream)


class LambdaContext:
    function_name = constants.EVENTS_FUNCTION_NAME
    function_version = "$LATEST"
    memory_limit_in_mb = 512
    invoked_function_arn = f"arn:aws:lambda:{constants.LOCAL_REGION}:{constants.LOCAL_ACCOUNT_ID}:function:{constants.EVENTS_FUNCTION_NAME}"
    aws_request_id = "emulated"
