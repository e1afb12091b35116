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

Scripted capacity pools (EC2; `trainplane up --compute ec2 --capacity-pools FILE`, capacity_pools.py):
each pool's free units and interruptions over time; RunInstances into a full pool is EC2's
InsufficientInstanceCapacity, a due interruption tags the pool's instances as above.
"""

from __future__ import annotations

import json
import os
import shlex
import threading
from typing import TYPE_CHECKING, Any

from functions.adapters.launchers.local import DEFAULT_COMMAND, LocalLauncher
from localmode import iam_calls
from localmode.deploy.emulated_compute.capacity_pools import ScriptedPools
from localmode.deploy.emulated_compute.core import ClientFactory, EmulatedCompute
from localmode.deploy.emulated_compute.ec2 import Ec2Compute
from localmode.deploy.emulated_compute.sagemaker import SageMakerCompute

if TYPE_CHECKING:
    from localmode.deploy import LocalContext

EMULATED_AMI = "ami-0trainplane0local0"
LAUNCH_TEMPLATE = "trainplane-trainer"
PLACEMENT_GROUP = "trainplane-multinode"
# The role each engine's trainer runs as in the cloud (make iam-check's callers; scripts/iam_check.py).
TRAINER_ROLES = {"sagemaker": "SageMakerTrainer", "ec2": "Ec2Trainer"}
ENGINES: dict[str, type[EmulatedCompute]] = {"sagemaker": SageMakerCompute, "ec2": Ec2Compute}


def create(compute: str, client: ClientFactory, runner: LocalLauncher, **options: Any) -> EmulatedCompute:
    """The emulated compute of `compute` ("sagemaker" | "ec2"); `options` as EmulatedCompute takes them."""
    engine = ENGINES.get(compute)
    if engine is None:
        raise ValueError(f"no emulated compute for {compute!r}")
    return engine(client, runner, **options)


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

    emulator = create(
        ctx.compute,
        client,
        runner,
        bucket=settings.artifacts_bucket,
        trainer_log_group=settings.trainer_log_group,
        region=ctx.region,
        account_id=ctx.account_id,
    )

    if ctx.capacity_pools is not None and isinstance(emulator, Ec2Compute):
        emulator.capacity_pools = ScriptedPools.from_file(ctx.capacity_pools)

    def serve(stop: threading.Event) -> None:
        emulator.start()
        stop.wait()

    ctx.add_background(f"emulated-{ctx.compute}", serve)
    ctx.on_shutdown(emulator.shutdown)
