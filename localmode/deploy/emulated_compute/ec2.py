"""The emulated EC2: a poller finds the instances the launcher tagged, runs each one's trainer, and does what
the user data does on a real instance: watches the trainplane:stop tag, writes the exit status object to
S3, terminates the instance.

Multi-node: the N instances of one RunInstances call run N trainers on loopback; a node's rank is its AMI
launch index, the master comes from the rendezvous object the launcher wrote (MASTER_ADDR 127.0.0.1, a
free MASTER_PORT per attempt). Spot: an `trainplane-emulator:interrupt` tag fires the interruption
warning and SIGTERMs the trainer. Host loss: a `trainplane-emulator:lose` tag SIGKILLs the trainer and
terminates the instance with EC2's Server.InternalError.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import shlex
import signal
import socket
import time
from collections.abc import Mapping
from typing import Any

from functions.adapters.launchers.ec2 import log_stream_prefix
from functions.catalog import job_names
from functions.catalog.events import EC2_SOURCE, EC2_SPOT_WARNING, EC2_STATE_CHANGE
from functions.catalog.job_names import exit_status_key
from functions.service.ports import RunDescription, RunState
from localmode.deploy.emulated_compute import moto_patches
from localmode.deploy.emulated_compute.capacity_pools import Running, ScriptedPools
from localmode.deploy.emulated_compute.core import INTERRUPT_TAG, LOSE_TAG, EmulatedCompute, Run, split_s3, with_environment, with_runtime
from schemas.job import ErrorType
from schemas.trainer import ERROR_EXIT_CODES, ERROR_FAILURE_REASONS, ExitCode, FailureReason

logger = logging.getLogger(__name__)

_RUN_SPEC_LINE = re.compile(r"^RUN_SPEC_URI=(?P<value>.+)$", re.MULTILINE)
_MAX_RUNTIME_LINE = re.compile(r"^MAX_RUNTIME_SECONDS=(?P<value>.+)$", re.MULTILINE)
_NODE_COUNT_LINE = re.compile(r"^NODE_COUNT=(?P<value>.+)$", re.MULTILINE)
_RENDEZVOUS_LINE = re.compile(r"^RENDEZVOUS_URI=(?P<value>.+)$", re.MULTILINE)


class Ec2Compute(EmulatedCompute):
    compute = "ec2"
    # Scripted capacity pools (capacity_pools.py; `trainplane up --capacity-pools FILE`): None = unlimited.
    capacity_pools: ScriptedPools | None = None

    def start(self) -> None:
        super().start()
        if self.capacity_pools is not None:
            moto_patches.set_capacity_check(self._capacity_refusal)

    def shutdown(self) -> None:
        moto_patches.set_capacity_check(None)
        super().shutdown()

    def _capacity_refusal(self, backend: Any, instance_type: str, count: int, kwargs: dict[str, Any]) -> str | None:
        """moto's RunInstances, before it starts anything: no room in the scripted pool is EC2's capacity error."""
        assert self.capacity_pools is not None
        purchase = "spot" if kwargs.get("instance_market_options") == "spot" else "on_demand"
        return self.capacity_pools.refusal(instance_type, purchase, kwargs.get("placement"), count, _running(backend.all_instances()))

    def _interrupt_scripted(self) -> None:
        """The scripted pools' interruptions that are due: the emulator's interruption tag on those instances."""
        from moto.ec2.models import ec2_backends

        if self.capacity_pools is None:
            return
        backend = ec2_backends[self.account_id][self.region]
        for instance_id in self.capacity_pools.due_interruptions(_running(backend.all_instances())):
            logger.info("emulated EC2: scripted interruption of %s", instance_id)
            self.client("ec2").create_tags(Resources=[instance_id], Tags=[{"Key": INTERRUPT_TAG, "Value": "scripted"}])

    # --- the poller finds what the launcher started ------------------------------------------------
    def _poll(self) -> None:
        ec2 = self.client("ec2")
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": "tag-key", "Values": [job_names.TAG_JOB_ID]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )
        seen: set[str] = set()
        for page in pages:
            for reservation in page["Reservations"]:
                for instance in reservation["Instances"]:
                    seen.add(instance["InstanceId"])
                    self._watch_instance(instance)
        self._interrupt_scripted()
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
            ref = job_names.job_ref_from_tags(tags)
            if ref is None:
                return
            node = int(instance.get("AmiLaunchIndex", 0))
            run = Run("ec2", instance_id, ref[0], ref[1], spot=instance.get("InstanceLifecycle") == "spot", node=node)
            try:
                user_data = self._user_data(instance_id)
                node_env = self._rendezvous(run, user_data)
                if node_env is None:
                    return  # the launcher has not written the rendezvous yet: the next poll looks again
                self._register(run)
                request = with_environment(self._request(run, _shell_value(_RUN_SPEC_LINE, user_data), tags=tags), node_env)
                runtime = _shell_value(_MAX_RUNTIME_LINE, user_data)
                limit = int(runtime) if runtime.isdigit() and int(runtime) else None
                run.handle = self._runner(run).launch(with_runtime(request, limit))
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
                EC2_SPOT_WARNING, EC2_SOURCE, self._instance_arn(instance_id), {"instance-id": instance_id, "instance-action": "terminate"}
            )
            self._stop_run(run, "spot-interruption")
        requested = tags.get(job_names.TAG_STOP)
        if requested:
            self._stop_run(run, f"stop-{requested}")

    def _end_ec2(self, run: Run, status: Mapping[str, Any]) -> None:
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
        self._emit(EC2_STATE_CHANGE, EC2_SOURCE, self._instance_arn(run.run_id), {"instance-id": run.run_id, "state": "terminated"})

    def _rendezvous(self, run: Run, user_data: str) -> dict[str, str] | None:
        """What the user data adds to the trainer's environment on a node of a multi-node job ({} for one
        node); None while the rendezvous object is not there yet."""
        count = _shell_value(_NODE_COUNT_LINE, user_data) if _NODE_COUNT_LINE.search(user_data) else "1"
        if int(count) <= 1:
            return {}
        bucket, key = split_s3(_shell_value(_RENDEZVOUS_LINE, user_data))
        try:
            rendezvous = json.loads(self.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
        except self.client("s3").exceptions.NoSuchKey:
            return None
        with self._lock:
            port = self._master_ports.setdefault((run.job_id, run.attempt), _free_port())
        logger.info("emulated EC2: %s is node %d of %s, master %s (loopback here)", run.run_id, run.node, count, rendezvous["master_addr"])
        return {"NODE_RANK": str(run.node), "NNODES": count, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}

    def _user_data(self, instance_id: str) -> str:
        raw = self.client("ec2").describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"].get("Value", "")
        return base64.b64decode(raw).decode() if raw else ""

    def _instance_arn(self, instance_id: str) -> str:
        return f"arn:aws:ec2:{self.region}:{self.account_id}:instance/{instance_id}"

    # --- the engine's side of the shared half -------------------------------------------------------
    def _end_run(self, run: Run, description: RunDescription) -> None:
        self._end_ec2(run, _exit_status(description, run))

    def _log_stream(self, run: Run) -> str:
        suffix = f"-node{run.node}" if run.node else ""
        return f"{log_stream_prefix(run.job_id, run.attempt)}trainer{suffix}"

    def _log_group(self) -> str:
        return self.trainer_log_group


def _exit_status(description: RunDescription, run: Run) -> dict[str, Any]:
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


def _running(instances: Any) -> list[Running]:
    """moto's pending and running instances as the scripted pools count them."""
    return [
        Running(i.id, i.instance_type, "spot" if i.lifecycle == "spot" else "on_demand", i.placement.zone)
        for i in instances
        if i.state in ("pending", "running")
    ]


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


def _shell_value(pattern: re.Pattern[str], text: str) -> str:
    match = pattern.search(text)
    if match is None:
        raise ValueError(f"user data has no {pattern.pattern.split('=')[0].lstrip('^')} line")
    parts = shlex.split(match.group("value"))
    return parts[0] if parts else ""
