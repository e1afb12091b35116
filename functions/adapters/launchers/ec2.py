"""EC2Launcher: one attempt of a job = one EC2 GPU instance from a launch template, through boto3 only.

The instance runs user_data.sh: pull the trainer image, run it with the trainer environment
contract, watch for a spot interruption notice / a stop request / the runtime limit, write the exit
status object to S3 and terminate itself.

How a graceful stop reaches the trainer: by TAG, not SSM. stop() tags the instance
`trainplane:stop=graceful`; the user-data watcher reads its own tags from instance metadata
(InstanceMetadataTags enabled below) every few seconds and runs `docker stop -t <grace>` (SIGTERM,
then SIGKILL after the grace). Why: the watcher already polls metadata for the spot notice, so one
loop serves both; it needs no SSM agent, no ssm:SendCommand permission and no SSM endpoint in
private subnets; and a tag is a durable request: an instance still booting sees it when its watcher
starts, where a SendCommand sent too early is lost. A cancel (graceful=False) also tags, then
terminates the instance at once.

Multi-node (resource_config.node_count = N > 1): one RunInstances call with MinCount = MaxCount = N
(all or nothing: EC2 places the whole group or none of it) into the deployment's cluster placement
group (settings.ec2_placement_group). The instances share one user data; each learns its node rank from
its AMI launch index (instance metadata), and the master's address from the rendezvous object
`jobs/<job_id>/runs/<attempt>/rendezvous.json` that this launcher writes right after RunInstances, from
the private addresses RunInstances returned (node 0 = launch index 0 is the master). Nothing is guessed
and no node needs EC2 permissions. The handle's run_id is the N instance ids in rank order, joined by
commas; each node writes its own exit status (node 0: exit.json, node k: exit-node<k>.json). describe()
folds the N nodes into one verdict: a lost node makes the whole run PREEMPTED, a failed one FAILED, and
either way the surviving instances are terminated at once, so the nodes stop together (docs/DESIGN.md,
"Multi-node on EC2").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import shlex
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from functions import constants
from functions.adapters.launchers.cloud import (
    ClientSource,
    LaunchCapacityError,
    check_request,
    launch_environment,
    launch_tags,
    run_image,
)
from functions.adapters.launchers.ec2_fleet import fleet_extra, launch_fleet
from functions.adapters.launchers.sagemaker import classify_failure
from functions.catalog.instances import InstanceChoice, select_instance
from functions.catalog.job_names import TAG_INTERRUPTED, TAG_STOP, exit_status_key, job_ref_from_tags, node_exit_status_key
from functions.errors import Unsupported
from functions.service.ports import TERMINAL_RUN_STATES, LaunchHandle, LaunchRequest, PoolFailure, RunDescription, RunState
from functions.settings import Settings
from schemas.job import ErrorType
from schemas.trainer import ENV_GRACE_SECONDS, EXIT_CODE_ERRORS, ExitCode

logger = logging.getLogger(__name__)

NAME = "ec2"
USER_DATA_TEMPLATE = "user_data.sh"
MAX_USER_DATA_BYTES = 16 * 1024  # RunInstances' limit on the raw user data
# Spot gives two minutes' notice; leave the watcher's poll interval and the upload some room.
SPOT_GRACE_SECONDS = 110
_PLACEHOLDER = re.compile(r"@@([A-Z_]+)@@")
# With instance tags in metadata, tag keys may only hold these characters (no '/', no spaces).
_TAG_KEY_BAD = re.compile(r"[^A-Za-z0-9+\-=._:@]")
_CAPACITY_CODES = {
    "InsufficientInstanceCapacity",
    "InstanceLimitExceeded",
    "MaxSpotInstanceCountExceeded",
    "SpotMaxPriceTooLow",
    "VcpuLimitExceeded",
}
_NOT_FOUND = {"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"}
# StateReason codes of a terminated instance that was taken from us (not the trainer's doing).
_LOST = {"Server.SpotInstanceTermination": ErrorType.PREEMPTED, "Server.InsufficientInstanceCapacity": ErrorType.CAPACITY}
_LOST_PREFIXES = ("Server.InternalError", "Server.ScheduledStop")
# torch.distributed's default port; one job per instance on EC2, so every job can use it.
MASTER_PORT = 29500
# How long a node waits for the rendezvous object before it gives up (bootstrap error, exit 70).
RENDEZVOUS_TIMEOUT_SECONDS = 600
_LIVE = frozenset({RunState.STARTING, RunState.RUNNING, RunState.STOPPING})


def rendezvous_key(job_id: str, attempt: int) -> str:
    """The object that tells the nodes of a multi-node attempt who the master is (written by launch())."""
    return f"{constants.job_prefix(job_id)}runs/{attempt:03d}/rendezvous.json"


def instance_ids(handle: LaunchHandle) -> list[str]:
    """The instances of one attempt, in node-rank order (one for a single-node job)."""
    return [i for i in handle.run_id.split(",") if i]


def rendezvous_document(job_id: str, attempt: int, instances: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """RunInstances' instances -> the rendezvous object: node rank = AMI launch index, node 0 the master."""
    nodes = sorted(instances, key=lambda i: int(i.get("AmiLaunchIndex", 0)))
    missing = [i["InstanceId"] for i in nodes if not i.get("PrivateIpAddress")]
    if missing:
        raise RuntimeError(f"RunInstances returned no private address for {', '.join(missing)}: no rendezvous possible")
    return {
        "job_id": job_id,
        "attempt": attempt,
        "node_count": len(nodes),
        "master_addr": nodes[0]["PrivateIpAddress"],
        "master_port": MASTER_PORT,
        "nodes": [{"rank": r, "instance_id": i["InstanceId"], "private_ip": i["PrivateIpAddress"]} for r, i in enumerate(nodes)],
    }


def bootstrap_log_key(job_id: str, attempt: int) -> str:
    return f"{constants.job_prefix(job_id)}runs/{attempt:03d}/bootstrap.log"


def log_stream_prefix(job_id: str, attempt: int) -> str:
    """CloudWatch stream prefix of one attempt in settings.trainer_log_group."""
    return f"{job_id}/{attempt:03d}/"


def client_token(job_id: str, attempt: int) -> str:
    # RunInstances idempotency (<= 64 ASCII chars): a retried Launch task gets the same instance back.
    token = f"tp-{job_id}-a{attempt}"
    return token if len(token) <= 64 else f"tp-{hashlib.sha256(job_id.encode()).hexdigest()[:40]}-a{attempt}"


def render_user_data(request: LaunchRequest, settings: Settings, choice: InstanceChoice) -> str:
    runtime = request.max_runtime_seconds or request.run_spec.max_runtime_seconds or 0
    env = launch_environment(request)
    env[ENV_GRACE_SECONDS] = str(SPOT_GRACE_SECONDS)
    bucket = settings.artifacts_bucket
    values = {
        "IMAGE_URI": run_image(request, settings, NAME),
        "REGION": settings.region,
        "JOB_ID": request.job_id,
        "ATTEMPT": str(request.attempt),
        "RUN_SPEC_URI": request.run_spec_uri,
        "EXIT_STATUS_URI": f"s3://{bucket}/{exit_status_key(request.job_id, request.attempt)}",
        "BOOTSTRAP_LOG_URI": f"s3://{bucket}/{bootstrap_log_key(request.job_id, request.attempt)}",
        "LOG_GROUP": settings.trainer_log_group,
        "LOG_STREAM": f"{log_stream_prefix(request.job_id, request.attempt)}trainer",
        "GRACE_SECONDS": str(SPOT_GRACE_SECONDS),
        "MAX_RUNTIME_SECONDS": str(runtime),
        "NODE_COUNT": str(request.run_spec.resource_config.node_count),
        "RENDEZVOUS_URI": f"s3://{bucket}/{rendezvous_key(request.job_id, request.attempt)}",
        "RENDEZVOUS_TIMEOUT_SECONDS": str(RENDEZVOUS_TIMEOUT_SECONDS),
    }
    quoted = {key: shlex.quote(value) for key, value in values.items()}
    quoted["GPU_FLAGS"] = "--gpus all" if choice.spec.gpus else ""
    quoted["TRAINER_ENV"] = " ".join(f"-e {shlex.quote(f'{k}={v}')}" for k, v in sorted(env.items()))
    template = resources.files(__package__).joinpath(USER_DATA_TEMPLATE).read_text(encoding="utf-8")
    rendered = _PLACEHOLDER.sub(lambda m: quoted[m.group(1)], template)
    if len(rendered.encode()) > MAX_USER_DATA_BYTES:
        size = len(rendered.encode())
        raise Unsupported(f"the EC2 user data is {size} bytes, over AWS's {MAX_USER_DATA_BYTES}: shorten training_config.environment")
    return rendered


def build_run_instances_request(request: LaunchRequest, settings: Settings, choice: InstanceChoice | None = None) -> dict[str, Any]:
    """The RunInstances parameters for one attempt (pure: no AWS call)."""
    if not settings.trainer_image_uri:
        raise Unsupported("compute 'ec2' needs the trainer_image_uri setting")
    if not (settings.ec2_launch_template_id or settings.ec2_launch_template_name):
        raise Unsupported("compute 'ec2' needs the ec2_launch_template_id or ec2_launch_template_name setting")
    check_request(request, NAME)
    choice = choice or select_instance(request.run_spec.resource_config, "ec2", request.run_spec.training_shape)
    template: dict[str, str] = {"Version": settings.ec2_launch_template_version}
    if settings.ec2_launch_template_id:
        template["LaunchTemplateId"] = settings.ec2_launch_template_id
    else:
        template["LaunchTemplateName"] = settings.ec2_launch_template_name or ""
    tags = [{"Key": ec2_tag_key(k), "Value": v} for k, v in launch_tags(request).items()]
    nodes = choice.instance_count
    if nodes > 1 and not settings.ec2_placement_group:
        raise Unsupported("multi-node jobs on compute 'ec2' need the ec2_placement_group setting (a cluster placement group)")
    params: dict[str, Any] = {
        "LaunchTemplate": template,
        "InstanceType": choice.instance_type,
        # All nodes in one call: EC2 starts the whole group or none of it (no half-started job holding GPUs).
        "MinCount": nodes,
        "MaxCount": nodes,
        "ClientToken": client_token(request.job_id, request.attempt),
        "UserData": render_user_data(request, settings, choice),  # boto3 base64-encodes it
        # The instance powers itself off when the trainer exits: that must end the bill, not park it.
        "InstanceInitiatedShutdownBehavior": "terminate",
        # Tags in metadata: the watcher reads trainplane:stop there. Hop limit 2 lets the container reach IMDS.
        "MetadataOptions": {
            "HttpTokens": "required",
            "HttpEndpoint": "enabled",
            "HttpPutResponseHopLimit": 2,
            "InstanceMetadataTags": "enabled",
        },
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}, {"ResourceType": "volume", "Tags": tags}],
    }
    if request.preemptible:
        params["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
        }
    if nodes > 1:
        # A cluster placement group: the nodes on one low-latency network segment (EFA / NCCL bandwidth).
        params["Placement"] = {"GroupName": settings.ec2_placement_group}
    if request.zone:
        # The zone placement chose (docs/PLACEMENT.md): its pool health is kept per zone.
        params.setdefault("Placement", {})["AvailabilityZone"] = request.zone
    if settings.ec2_instance_profile_arn:
        params["IamInstanceProfile"] = {"Arn": settings.ec2_instance_profile_arn}
    if settings.vpc_subnet_ids:
        params["SubnetId"] = settings.vpc_subnet_ids[0]
    if settings.vpc_security_group_ids:
        params["SecurityGroupIds"] = list(settings.vpc_security_group_ids)
    if request.run_spec.resource_config.storage_min_mb is not None:
        ebs: dict[str, Any] = {"VolumeSize": choice.volume_size_gb, "VolumeType": "gp3", "DeleteOnTermination": True, "Encrypted": True}
        if settings.kms_key_id:
            ebs["KmsKeyId"] = settings.kms_key_id
        params["BlockDeviceMappings"] = [{"DeviceName": settings.ec2_root_device_name, "Ebs": ebs}]
    return params


def ec2_tag_key(key: str) -> str:
    return _TAG_KEY_BAD.sub("_", key)


def describe_instance(
    instance: Mapping[str, Any] | None, exit_status: Mapping[str, Any] | None, *, now: float | None = None
) -> RunDescription:
    """DescribeInstances' instance (None when it is gone) plus the exit status object -> the attempt's state."""
    tags = {t["Key"]: t["Value"] for t in (instance or {}).get("Tags", [])}
    common: dict[str, Any] = {
        "instance_type": (instance or {}).get("InstanceType"),
        "spot": (instance or {}).get("InstanceLifecycle") == "spot",
    }
    interrupted = tags.get(TAG_INTERRUPTED) == "true"
    if exit_status is not None:
        seconds = max(0.0, float(exit_status.get("ended_at", 0)) - float(exit_status.get("started_at", 0)))
        return _from_exit_status(exit_status, interrupted, run_seconds=seconds, billable_seconds=seconds, **common)
    if instance is None:
        return RunDescription(state=RunState.UNKNOWN, message="the instance is gone and left no exit status")
    state = instance.get("State", {}).get("Name", "")
    launched = _epoch(instance.get("LaunchTime"))
    elapsed = max(0.0, (now or datetime.now(UTC).timestamp()) - launched) if launched else None
    common.update(run_seconds=elapsed, billable_seconds=elapsed, secondary_status=state)
    if state == "pending":
        return RunDescription(state=RunState.STARTING, **common)
    if state == "running":
        return RunDescription(state=RunState.STOPPING if tags.get(TAG_STOP) else RunState.RUNNING, **common)
    if state in {"shutting-down", "stopping"}:
        return RunDescription(state=RunState.STOPPING, **common)
    reason = str(instance.get("StateReason", {}).get("Code", ""))
    message = str(instance.get("StateReason", {}).get("Message", "")) or reason
    if state == "terminated":
        if reason in _LOST or interrupted:
            error = _LOST.get(reason, ErrorType.PREEMPTED)
            return RunDescription(RunState.PREEMPTED, error, f"instance lost: {message}", **common)
        if reason.startswith(_LOST_PREFIXES):
            return RunDescription(RunState.PREEMPTED, ErrorType.PREEMPTED, f"instance lost: {message}", **common)
        if tags.get(TAG_STOP) == "cancel":
            return RunDescription(RunState.STOPPED, None, "terminated on cancel", **common)
        why = f"the instance ended without an exit status ({message}); see the bootstrap log"
        return RunDescription(RunState.FAILED, ErrorType.INTERNAL, why, **common)
    return RunDescription(RunState.FAILED, ErrorType.INTERNAL, f"instance is {state} ({message})", **common)


def _from_exit_status(status: Mapping[str, Any], interrupted_tag: bool, **common: Any) -> RunDescription:
    code = int(status.get("exit_code", ExitCode.INTERNAL_ERROR))
    reason = str(status.get("reason") or "")
    failure = status.get("failure") or None
    interrupted = bool(status.get("interrupted")) or interrupted_tag or reason == "spot-interruption"
    killed = code in {137, 143}  # SIGKILL after the grace / SIGTERM without a handler
    if code == ExitCode.COMPLETED:
        return RunDescription(RunState.COMPLETED, **common)
    if interrupted and (code == ExitCode.STOPPED_WITH_CHECKPOINT or killed):
        return RunDescription(RunState.PREEMPTED, ErrorType.PREEMPTED, "spot instance reclaimed (two-minute notice)", **common)
    if reason == "max-runtime" and (code == ExitCode.STOPPED_WITH_CHECKPOINT or killed):
        return RunDescription(RunState.FAILED, ErrorType.TIMEOUT, "the run passed max_runtime_seconds", **common)
    if code == ExitCode.STOPPED_WITH_CHECKPOINT or (killed and reason.startswith("stop-")):
        return RunDescription(RunState.STOPPED, None, failure, **common)
    if status.get("oom_killed"):
        return RunDescription(RunState.FAILED, ErrorType.OUT_OF_MEMORY, failure or "the container was killed for memory", **common)
    if failure:
        state, error = classify_failure(failure)
        return RunDescription(state, error, failure, **common)
    error = EXIT_CODE_ERRORS.get(code, ErrorType.INTERNAL)
    return RunDescription(RunState.FAILED, error, f"trainer exited with code {code} ({reason or 'no reason'})", **common)


class EC2Launcher:
    """The Launcher port over RunInstances / CreateTags + TerminateInstances / DescribeInstances."""

    name = NAME

    def __init__(self, settings: Settings, clients: ClientSource) -> None:
        self._settings = settings
        self._clients = clients

    @property
    def _ec2(self) -> Any:
        return self._clients.client("ec2")

    def launch(self, request: LaunchRequest) -> LaunchHandle:
        from botocore.exceptions import ClientError

        choice = select_instance(request.run_spec.resource_config, "ec2", request.run_spec.training_shape)
        params = build_run_instances_request(request, self._settings, choice)
        failures: list[PoolFailure] = []
        try:
            if request.fleet_pools:
                instances, failures = launch_fleet(self._ec2, request, params)
            else:
                instances = self._ec2.run_instances(**params)["Instances"]
        except ClientError as exc:
            code, message = _error(exc)
            if code in _CAPACITY_CODES:
                why = f"EC2 has no {choice.instance_type} for us now ({code}): {message}"
                raise LaunchCapacityError(choice.instance_type, why) from exc
            raise
        if not instances:
            pools = ", ".join(f"{f.instance_type}/{f.zone or 'any'} ({f.code})" for f in failures) or "none answered"
            why = f"EC2 Fleet found no capacity in any of the attempt's pools: {pools}"
            raise LaunchCapacityError(choice.instance_type, why, tuple(failures))
        instances = sorted(instances, key=lambda i: int(i.get("AmiLaunchIndex", 0)))
        ids = [i["InstanceId"] for i in instances]
        if len(ids) > 1:
            self._write_rendezvous(request, instances)
        instance_type = str(instances[0].get("InstanceType") or choice.instance_type)
        logger.info("launched instances", extra={"job_id": request.job_id, "instance_ids": ids, "type": instance_type})
        extra = {
            "instance_type": instance_type,
            "instance_count": str(len(ids)),
            "spot": str(request.preemptible).lower(),
            "launched_at": f"{datetime.now(UTC).timestamp():.3f}",
            "exit_status_key": exit_status_key(request.job_id, request.attempt),
        }
        if request.fleet_pools:
            extra.update(fleet_extra(instances, failures))
        return LaunchHandle(launcher=NAME, run_id=",".join(ids), attempt=request.attempt, extra=extra)

    def stop(self, handle: LaunchHandle, *, graceful: bool = True) -> None:
        """Every node of the attempt: each watcher SIGTERMs its own trainer; the trainer's ranks agree on
        the stop step (a stop on any rank stops all), so rank 0's checkpoint holds for the whole job."""
        ids = instance_ids(handle)
        try:
            self._stop_instances(ids, graceful=graceful)
        except _StopRefused:
            if len(ids) == 1:
                return
            # One id unknown fails the whole call: stop the others one by one.
            for instance_id in ids:
                with contextlib.suppress(_StopRefused):
                    self._stop_instances([instance_id], graceful=graceful)

    def _stop_instances(self, ids: list[str], *, graceful: bool) -> None:
        from botocore.exceptions import ClientError

        try:
            self._ec2.create_tags(Resources=ids, Tags=[{"Key": TAG_STOP, "Value": "graceful" if graceful else "cancel"}])
            if not graceful:
                self._ec2.terminate_instances(InstanceIds=ids)
        except ClientError as exc:
            code, message = _error(exc)
            if code in _NOT_FOUND or code == "IncorrectInstanceState":
                logger.info("stop: nothing to stop", extra={"instance_ids": ids, "reason": message})
                raise _StopRefused(message) from exc
            raise

    def describe(self, handle: LaunchHandle) -> RunDescription:
        ids = instance_ids(handle)
        if len(ids) > 1:
            return self._describe_nodes(handle, ids)
        instance = self.instance(handle.run_id)
        state = (instance or {}).get("State", {}).get("Name")
        key = handle.extra.get("exit_status_key") or _exit_key_from_tags(instance)
        # The exit status exists only once the trainer ended: skip the S3 read while it runs.
        ended = instance is None or state not in {"pending", "running"}
        return describe_instance(instance, self._read_exit_status(key) if key and ended else None)

    def _describe_nodes(self, handle: LaunchHandle, ids: list[str]) -> RunDescription:
        found = self._instances(ids)
        node0_key = handle.extra.get("exit_status_key") or _exit_key_from_tags(found.get(ids[0]))
        nodes, graceful = [], []
        for node, instance_id in enumerate(ids):
            instance = found.get(instance_id)
            ended = instance is None or instance.get("State", {}).get("Name") not in {"pending", "running"}
            status = self._read_exit_status(node_exit_status_key(node0_key, node)) if node0_key and ended else None
            nodes.append(describe_instance(instance, status))
            graceful.append(status is not None and nodes[-1].state != RunState.FAILED)
        verdict = combine_nodes(nodes, graceful)
        survivors = [i for i, d in zip(ids, nodes, strict=True) if d.state in _LIVE]
        if verdict.state in TERMINAL_RUN_STATES and survivors:
            # One run on N nodes: once a node is lost or failed, the others would only wait in a collective
            # (NCCL/gloo time out after minutes) on the bill. They go now, with the run.
            logger.info("multi-node run ended on one node: terminating the rest", extra={"instance_ids": survivors})
            self.stop(LaunchHandle(NAME, ",".join(survivors), handle.attempt, handle.extra), graceful=False)
        return verdict

    def _write_rendezvous(self, request: LaunchRequest, instances: list[dict[str, Any]]) -> None:
        document = rendezvous_document(request.job_id, request.attempt, instances)
        try:
            self._clients.client("s3").put_object(
                Bucket=self._settings.artifacts_bucket,
                Key=rendezvous_key(request.job_id, request.attempt),
                Body=json.dumps(document).encode(),
                ContentType="application/json",
            )
        except Exception:
            # Nodes without a rendezvous would wait for nothing: give them back and let the launch fail.
            self._ec2.terminate_instances(InstanceIds=[n["instance_id"] for n in document["nodes"]])
            raise

    def _instances(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        from botocore.exceptions import ClientError

        try:
            reservations = self._ec2.describe_instances(InstanceIds=ids)["Reservations"]
        except ClientError as exc:
            if _error(exc)[0] not in _NOT_FOUND:
                raise
            return {i: found for i in ids if (found := self.instance(i)) is not None}
        return {i["InstanceId"]: i for r in reservations for i in r.get("Instances", [])}

    def instance(self, instance_id: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            reservations = self._ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        except ClientError as exc:
            if _error(exc)[0] in _NOT_FOUND:
                return None
            raise
        found = [i for r in reservations for i in r.get("Instances", [])]
        return found[0] if found else None

    def job_ref(self, instance_id: str) -> tuple[str, int] | None:
        """(job_id, attempt) from the instance's tags; None for instances that are not ours or gone."""
        instance = self.instance(instance_id)
        return job_ref_from_tags({t["Key"]: t["Value"] for t in instance.get("Tags", [])}) if instance else None

    def mark_interrupted(self, instance_id: str) -> None:
        """Record the spot warning on the instance, so describe() says PREEMPTED whatever the exit code."""
        from botocore.exceptions import ClientError

        try:
            self._ec2.create_tags(Resources=[instance_id], Tags=[{"Key": TAG_INTERRUPTED, "Value": "true"}])
        except ClientError as exc:
            if _error(exc)[0] not in _NOT_FOUND:
                raise

    def _read_exit_status(self, key: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            body = self._clients.client("s3").get_object(Bucket=self._settings.artifacts_bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if _error(exc)[0] in {"NoSuchKey", "404", "NotFound"}:
                return None
            raise
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            logger.warning("unreadable exit status", extra={"key": key})
            return None
        return data if isinstance(data, dict) else None


class _StopRefused(Exception):
    """EC2 refused a stop for an instance that is gone or already ending."""


def combine_nodes(nodes: list[RunDescription], graceful: list[bool]) -> RunDescription:
    """The verdicts of the N nodes of one run (node-rank order) -> the run's.

    `graceful[k]`: node k's trainer ended on its own terms and wrote its exit status (completed, or
    stopped with the ranks' agreed checkpoint, also on a spot notice). While any node is live and no node
    ended abruptly, the run is live: rank 0 may still be writing the checkpoint the stop agreed on.
    Else a lost node (spot reclaimed, hardware) preempts the whole job; else a failed node fails it (its
    own error, e.g. a data error on rank 3); at the end, node 0 (rank 0, the one that writes checkpoints
    and the model) says whether it completed or stopped.
    """
    common: dict[str, Any] = {
        "instance_type": next((d.instance_type for d in nodes if d.instance_type), None),
        "instance_count": len(nodes),
        "spot": any(d.spot for d in nodes),
        "run_seconds": max((d.run_seconds for d in nodes if d.run_seconds is not None), default=None),
        "billable_seconds": max((d.billable_seconds for d in nodes if d.billable_seconds is not None), default=None),
    }
    states = {d.state for d in nodes}
    abrupt = any(d.state not in _LIVE and not ok for d, ok in zip(nodes, graceful, strict=True))
    if states & _LIVE and not abrupt:
        state = RunState.STOPPING if states - _LIVE or RunState.STOPPING in states else RunState.RUNNING
        state = RunState.STARTING if RunState.STARTING in states and state == RunState.RUNNING else state
        return RunDescription(state, secondary_status=nodes[0].secondary_status, **common)
    for node, d in enumerate(nodes):
        if d.state in {RunState.PREEMPTED, RunState.UNKNOWN}:
            why = f"node {node} of {len(nodes)} lost: {d.message or 'the instance is gone'}"
            return RunDescription(RunState.PREEMPTED, d.error_type or ErrorType.PREEMPTED, why, **common)
    for node, d in enumerate(nodes):
        if d.state == RunState.FAILED:
            return RunDescription(RunState.FAILED, d.error_type, f"node {node} of {len(nodes)}: {d.message}", **common)
    return RunDescription(nodes[0].state, nodes[0].error_type, nodes[0].message, **common)


def _exit_key_from_tags(instance: Mapping[str, Any] | None) -> str | None:
    ref = job_ref_from_tags({t["Key"]: t["Value"] for t in (instance or {}).get("Tags", [])})
    return exit_status_key(*ref) if ref else None


def _error(exc: Any) -> tuple[str, str]:
    err = exc.response.get("Error", {})
    return str(err.get("Code", "")), str(err.get("Message", ""))


def _epoch(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None
