"""Where training runs: the trainer image, SageMaker's execution role, the EC2 launch template and profile.

Both engines run the same image with the same contract (schemas/trainer.py). The roles the trainer
runs under may read and write only the jobs/ prefix of the artifacts bucket, read training data from
datasets/ (and the extra locations the stage config names), pull the trainer image and write their logs.
"""

from __future__ import annotations

import re
from pathlib import Path

from aws_cdk import Acknowledgment, IgnoreMode, Stack, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from functions import constants
from functions.catalog.areas import DATA_PREFIX, SHARED_PREFIX
from infra.config import ConfigError, StageConfig
from infra.constructs.common import allow, arn, log_retention, removal_policy
from infra.constructs.storage import Storage
from schemas.access import SECRET_ROOT

REPO_ROOT = Path(__file__).resolve().parents[2]
# The image's build context is the repository root because the trainer imports schemas/; only
# these paths are sent to `docker build` (the rest, .venv and cdk.out above all, stays out).
TRAINER_DOCKERFILE = "trainer_image/Dockerfile"
TRAINER_BUILD_CONTEXT = ("trainer_image", "schemas")  # tests/infra check the Dockerfile COPYs nothing else
SAGEMAKER_LOG_GROUP = constants.SAGEMAKER_TRAINING_LOG_GROUP
# The Deep Learning AMI (Ubuntu) boots from /dev/sda1; Settings.ec2_root_device_name says the same.
ROOT_DEVICE = "/dev/sda1"
_ECR_REGISTRY = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
_ECR_URI = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?/(?P<repo>[a-z0-9._/-]+)[:@]")


class Compute(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig, storage: Storage) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.storage = storage
        self._sagemaker_log_group: logs.ILogGroup | None = None
        self.image_uri, self._grant_pull = self._trainer_image(config)
        self.trainer_log_group = logs.LogGroup(
            self,
            "TrainerLogs",
            log_group_name=f"/trainplane/{config.stage}/trainer",
            retention=log_retention(config),
            removal_policy=removal_policy(config),
        )
        self.security_group_ids, self.subnet_ids = self._network(config)
        self.sagemaker_role = iam.Role(
            self,
            "SageMakerExecutionRole",
            assumed_by=iam.ServicePrincipal(
                "sagemaker.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}}
            ),
            description=f"trainplane {config.stage}: SageMaker training jobs run the trainer image as this role",
        )
        self._trainer_access(self.sagemaker_role, "sagemaker")
        allow(
            self.sagemaker_role,
            ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            [arn(self, "logs", f"log-group:{SAGEMAKER_LOG_GROUP}"), arn(self, "logs", f"log-group:{SAGEMAKER_LOG_GROUP}:log-stream:*")],
            why="SageMaker writes one log stream per training job and host into its own log group; stream names are made at run time.",
        )
        allow(
            self.sagemaker_role,
            ["cloudwatch:PutMetricData"],
            ["*"],
            why="cloudwatch:PutMetricData has no resource type; the cloudwatch:namespace condition keeps it to SageMaker training metrics.",
            conditions={"StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/TrainingJobs"}},
        )
        # The training volume (VolumeKmsKeyId) is encrypted with the stack's key as this role.
        self.grant_volume_key(self.sagemaker_role, "sagemaker")
        if self.subnet_ids:
            self._sagemaker_vpc_access()
        self.instance_role = iam.Role(
            self,
            "InstanceRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"trainplane {config.stage}: EC2 GPU instances run the trainer image as this role",
        )
        self._trainer_access(self.instance_role, "ec2")
        allow(
            self.instance_role,
            # CreateLogGroup: docker's awslogs driver runs with awslogs-create-group (user_data.sh).
            ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            [self.trainer_log_group.log_group_arn],
        )
        self.instance_profile = iam.InstanceProfile(self, "InstanceProfile", role=self.instance_role)
        self.launch_template = self._launch_template(config)
        # Every multi-node EC2 job launches all its instances in one RunInstances call into this group: a
        # cluster group packs them on one low-latency network segment (NCCL / EFA bandwidth between nodes).
        self.placement_group = ec2.CfnPlacementGroup(self, "NodesPlacementGroup", strategy="cluster")

    # --- the image ------------------------------------------------------------------------------

    def _trainer_image(self, config: StageConfig) -> tuple[str, ecr.IRepository]:
        if config.trainer_image_uri:
            match = _ECR_URI.match(config.trainer_image_uri)
            if not match:
                raise ConfigError(
                    f"trainer_image_uri: {config.trainer_image_uri!r} is not an ECR image URI "
                    f"(<account>.dkr.ecr.<region>.amazonaws.com/<repo>:<tag>)"
                )
            repository = ecr.Repository.from_repository_attributes(
                self,
                "TrainerRepository",
                repository_name=match["repo"],
                repository_arn=f"arn:{Stack.of(self).partition}:ecr:{match['region']}:{match['account']}:repository/{match['repo']}",
            )
            return config.trainer_image_uri, repository
        if not (REPO_ROOT / TRAINER_DOCKERFILE).exists():
            raise ConfigError(
                f"{TRAINER_DOCKERFILE} not found: the trainer image is built from it at deploy time "
                "(or pass -c trainer_image_uri=<ECR URI> to deploy a prebuilt image)"
            )
        asset = ecr_assets.DockerImageAsset(
            self,
            "TrainerImage",
            directory=str(REPO_ROOT),
            file=TRAINER_DOCKERFILE,
            # GPU instances and SageMaker's ml.* GPU types are x86_64 (`trainplane doctor` checks ECR holds it)
            platform=ecr_assets.Platform.custom(constants.TRAINER_IMAGE_PLATFORMS[0]),
            build_args=self._build_args(config) or None,
            ignore_mode=IgnoreMode.DOCKER,
            exclude=["*", *(f"!{path}" for path in TRAINER_BUILD_CONTEXT), "**/__pycache__", "**/*.pyc"],
        )
        return asset.image_uri, asset.repository

    @staticmethod
    def _build_args(config: StageConfig) -> dict[str, str]:
        """The Dockerfile's ARGs the stage config sets: another CUDA PyTorch base (e.g. an AWS DLC)."""
        args = {"BASE_IMAGE": config.trainer_base_image, "TORCH_VERSION": config.trainer_torch_version}
        return {name: value for name, value in args.items() if value}

    # --- networking -----------------------------------------------------------------------------

    def _network(self, config: StageConfig) -> tuple[list[str], list[str]]:
        if not config.vpc_id:
            return [], []
        group = ec2.CfnSecurityGroup(
            self,
            "TrainerSecurityGroup",
            vpc_id=config.vpc_id,
            group_description=f"trainplane {config.stage} trainers: no inbound except between the nodes of one job",
            security_group_egress=[
                ec2.CfnSecurityGroup.EgressProperty(ip_protocol="-1", cidr_ip="0.0.0.0/0", description="image pulls, S3, model hubs")
            ],
        )
        # Multi-node jobs talk to each other (NCCL, torch.distributed): members of the group only.
        ec2.CfnSecurityGroupIngress(
            self,
            "TrainerNodesIngress",
            group_id=group.attr_group_id,
            ip_protocol="-1",
            source_security_group_id=group.attr_group_id,
            description="between the nodes of a multi-node job",
        )
        return [group.attr_group_id], list(config.subnet_ids)

    def _sagemaker_vpc_access(self) -> None:
        # SageMaker creates the job's network interfaces as the execution role; these EC2 actions
        # have no resource-level permissions, so the VPC and subnets are pinned by condition.
        allow(
            self.sagemaker_role,
            [
                "ec2:CreateNetworkInterface",
                "ec2:CreateNetworkInterfacePermission",
                "ec2:DeleteNetworkInterface",
                "ec2:DeleteNetworkInterfacePermission",
            ],
            ["*"],
            why="SageMaker's VPC network-interface calls accept no resource ARN; the ec2:Vpc condition pins them to the configured VPC.",
            conditions={"ArnEquals": {"ec2:Vpc": arn(self, "ec2", f"vpc/{self.config.vpc_id}")}},
        )
        allow(
            self.sagemaker_role,
            [
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeVpcs",
                "ec2:DescribeSubnets",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeDhcpOptions",
            ],
            ["*"],
            why="EC2 Describe* calls support no resource-level permissions.",
        )

    # --- the launch template --------------------------------------------------------------------

    def _launch_template(self, config: StageConfig) -> ec2.LaunchTemplate:
        security_groups = [ec2.SecurityGroup.from_security_group_id(self, "TrainerSecurityGroupRef", sg) for sg in self.security_group_ids]
        template = ec2.LaunchTemplate(
            self,
            "TrainerLaunchTemplate",
            launch_template_name=config.name("trainer"),
            # Resolved from AWS's public parameter at deploy time: the current GPU Deep Learning AMI.
            machine_image=ec2.MachineImage.from_ssm_parameter(config.ec2_ami_ssm_parameter, os=ec2.OperatingSystemType.LINUX),
            instance_profile=self.instance_profile,
            require_imdsv2=True,
            # The user data's watcher reads the trainplane:stop tag from instance metadata.
            instance_metadata_tags=True,
            # The trainer runs in a container: one more network hop to reach the instance metadata.
            http_put_response_hop_limit=2,
            instance_initiated_shutdown_behavior=ec2.InstanceInitiatedShutdownBehavior.TERMINATE,
            block_devices=[
                ec2.BlockDevice(
                    device_name=ROOT_DEVICE,
                    volume=ec2.BlockDeviceVolume.ebs(
                        config.ec2_root_volume_gb,
                        volume_type=ec2.EbsDeviceVolumeType.GP3,
                        encrypted=True,
                        kms_key=self.storage.key,
                        delete_on_termination=True,
                    ),
                )
            ],
            security_group=security_groups[0] if security_groups else None,
            detailed_monitoring=True,
        )
        return template

    # --- roles the trainer runs as --------------------------------------------------------------

    def _trainer_access(self, role: iam.Role, via: str) -> None:
        """What IAM lets every run do (docs/SECURITY.md): one role serves all jobs, so it is the union of
        what any job may be allowed; which of it one job may use is the run spec's AccessSet, which the
        trainer enforces. Read: jobs/, data/, shared/, datasets/ and the grants; write: jobs/ (its own
        checkpoints and default export, retention deletes), data/ (exports into data areas), read-write grants."""
        self.storage.grant_artifacts(
            role, prefixes=[f"{constants.JOBS_PREFIX}/"], write=True, delete=True
        )  # checkpoints, retention, metrics
        self.storage.grant_artifacts(role, prefixes=[DATA_PREFIX], write=True)  # exports into a principal's data area
        self.storage.grant_artifacts(role, prefixes=[constants.DATASETS_PREFIX, SHARED_PREFIX])
        partition = Stack.of(self).partition
        for grant in self.config.all_bucket_grants():
            name, _, prefix = grant.uri.removeprefix("s3://").partition("/")
            write = grant.access == "read-write"
            actions = ["s3:GetObject"] + (["s3:PutObject", "s3:AbortMultipartUpload"] if write else [])
            allow(
                role,
                actions,
                [f"arn:{partition}:s3:::{name}/{prefix}*"],
                why=f"{'Read-write' if write else 'Read-only'} objects under {grant.uri}, a location the stage config grants "
                "(bucket_grants / training_data_uris); per principal the trainer's AccessSet narrows it.",
            )
            allow(role, ["s3:ListBucket"], [f"arn:{partition}:s3:::{name}"], conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}})
        self.storage.grant_key(role, "s3", via)
        allow(
            role,
            ["secretsmanager:GetSecretValue"],
            [arn(self, "secretsmanager", f"secret:{SECRET_ROOT}*")],
            why=f"Tracker API keys (W&B) the jobs name: every secret under {SECRET_ROOT} of this account and region, as any "
            "job's owner may name one of their own; per principal (trainplane/<principal key>/) the control plane's check "
            "and the trainer's AccessSet.secrets narrow it (docs/SECURITY.md).",
        )
        self._grant_pull.grant_pull(role)
        self._grant_custom_image_pulls(role)
        Validations.of(role).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="ecr:GetAuthorizationToken (image pulls) supports no resource-level permissions.",
            )
        )

    def _grant_custom_image_pulls(self, role: iam.IRole) -> None:
        """Jobs' own images (custom_image_repositories): pull from the allowed ECR repositories, nothing else.
        Other registries are pulled anonymously (EC2 only; SageMaker runs ECR images only)."""
        partition = Stack.of(self).partition
        for entry in self.config.custom_image_repositories:
            registry, _, prefix = entry.strip().rstrip("/").partition("/")
            ecr_registry = _ECR_REGISTRY.match(registry)
            if ecr_registry is None:
                continue
            repositories = f"repository/{prefix}/*" if prefix else "repository/*"
            resources = [f"arn:{partition}:ecr:{ecr_registry['region']}:{ecr_registry['account']}:{repositories}"]
            if prefix:
                resources.insert(0, f"arn:{partition}:ecr:{ecr_registry['region']}:{ecr_registry['account']}:repository/{prefix}")
            allow(
                role,
                ["ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"],
                resources,
                why=f"Jobs may run their own images from {entry} (custom_image_repositories); the API refuses any other at submit.",
            )

    # --- grants for the control plane's functions ------------------------------------------------

    # Grants follow the stage's engine (config.compute): the control plane runs every job there, so a
    # role never holds the other engine's launch rights. Switching engines is a redeploy; drain first.

    def grant_launch(self, role: iam.IRole) -> None:
        """Start runs (the lifecycle tasks), and stop and describe them."""
        if self.config.compute == "sagemaker":
            # AddTags: CreateTrainingJob with Tags needs it.
            allow(role, ["sagemaker:CreateTrainingJob", "sagemaker:AddTags"], [self._training_jobs], why=TRAINING_JOBS_WHY)
            allow(role, ["iam:PassRole"], [self.sagemaker_role.role_arn], conditions=_passed_to("sagemaker"))
        else:
            self._grant_run_instances(role)
        self.grant_volume_key(role, self.config.compute)
        self.grant_stop(role)
        self.grant_describe(role)

    def grant_volume_key(self, role: iam.IRole, service: str) -> None:
        """Encrypted volumes (SageMaker's training volume, the EBS root volume) with the stack's key: the
        engine creates a grant and data keys on the caller's behalf, only through that engine."""
        via = {"kms:ViaService": f"{service}.{Stack.of(self).region}.amazonaws.com"}
        allow(
            role,
            ["kms:CreateGrant"],
            [self.storage.key.key_arn],
            conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}, "StringEquals": via},
        )
        allow(role, VOLUME_KEY_ACTIONS, [self.storage.key.key_arn], conditions={"StringEquals": via})

    def _grant_run_instances(self, role: iam.IRole) -> None:
        stack = Stack.of(self)
        template_arn = arn(self, "ec2", f"launch-template/{self.launch_template.launch_template_id}")
        allow(role, ["ec2:RunInstances"], [template_arn])
        # The instance only through the trainer's launch template (RunInstances needs every
        # resource of the call allowed, so this gates the whole call).
        allow(
            role,
            ["ec2:RunInstances"],
            [arn(self, "ec2", "instance/*")],
            why="Instance ids are made at launch; the ec2:LaunchTemplate condition allows instances only from the trainer's template.",
            conditions={"ArnEquals": {"ec2:LaunchTemplate": template_arn}},
        )
        created = [arn(self, "ec2", f"{kind}/*") for kind in ("volume", "network-interface", "spot-instances-request")]
        # What the instance refers to: the AMI (owned by AWS) and where it is placed.
        if self.subnet_ids:
            placement = [arn(self, "ec2", f"subnet/{s}") for s in self.subnet_ids]
            placement += [arn(self, "ec2", f"security-group/{g}") for g in self.security_group_ids]
            why = "Root volume, network interface and spot request ids are made at launch; the AWS-owned AMI changes per release."
        else:
            placement = [arn(self, "ec2", "subnet/*"), arn(self, "ec2", "security-group/*")]
            why = (
                "Volume, network interface and spot request ids are made at launch; without a configured VPC instances go to the "
                "default VPC, whose subnet and security-group ids the stack does not know; the AWS-owned AMI changes per release."
            )
        # A multi-node job's instances go into the stack's cluster placement group (RunInstances Placement.GroupName).
        placement.append(arn(self, "ec2", f"placement-group/{self.placement_group.ref}"))
        allow(role, ["ec2:RunInstances"], [*created, f"arn:{stack.partition}:ec2:{stack.region}::image/*", *placement], why=why)
        allow(
            role,
            ["ec2:CreateTags"],
            [arn(self, "ec2", "instance/*"), arn(self, "ec2", "volume/*")],
            why="Tags set on the instance and its volume while RunInstances or an EC2 Fleet creates them (ec2:CreateAction), not later.",
            conditions={"StringEquals": {"ec2:CreateAction": ["RunInstances", "CreateFleet"]}},
        )
        allow(role, ["iam:PassRole"], [self.instance_role.role_arn], conditions=_passed_to("ec2"))
        # A placement attempt over several pools is one instant EC2 Fleet (docs/PLACEMENT.md): its user data rides
        # on a version of the trainer's template made for the attempt and deleted once the fleet answered.
        allow(role, ["ec2:CreateLaunchTemplateVersion", "ec2:DeleteLaunchTemplateVersions", "ec2:CreateFleet"], [template_arn])
        allow(
            role,
            ["ec2:CreateFleet"],
            [arn(self, "ec2", "fleet/*")],
            why="An instant fleet's id is made at launch; what it launches is gated by RunInstances' launch-template condition above.",
        )

    def grant_stop(self, role: iam.IRole) -> None:
        """Stop runs: StopTrainingJob, or on EC2 the trainplane:stop / interrupted tags and termination."""
        if self.config.compute == "sagemaker":
            allow(role, ["sagemaker:StopTrainingJob"], [self._training_jobs], why=TRAINING_JOBS_WHY)
            return
        allow(
            role,
            ["ec2:CreateTags", "ec2:TerminateInstances"],
            [arn(self, "ec2", "instance/*")],
            why="Instance ids are known at run time only; the ec2:InstanceProfile condition keeps it to instances of the trainer profile.",
            conditions={"ArnEquals": {"ec2:InstanceProfile": self.instance_profile.instance_profile_arn}},
        )

    def grant_describe(self, role: iam.IRole) -> None:
        """Where runs stand (events, reconciler): read-only."""
        if self.config.compute == "sagemaker":
            # ListTags: a training job whose name cannot carry its job id is matched by its tags.
            allow(role, ["sagemaker:DescribeTrainingJob", "sagemaker:ListTags"], [self._training_jobs], why=TRAINING_JOBS_WHY)
        else:
            allow(role, ["ec2:DescribeInstances"], ["*"], why="EC2 Describe* calls support no resource-level permissions.")

    @property
    def _training_jobs(self) -> str:
        return arn(self, "sagemaker", f"training-job/{TRAINING_JOB_NAMES}")

    def reports_log_group(self) -> logs.ILogGroup:
        """Where the stage's trainers print their reports: SageMaker's own group (the account's, created by
        SageMaker with the first training job; docs/DEPLOY.md), or the stack's trainer group (EC2)."""
        if self.config.compute != "sagemaker":
            return self.trainer_log_group
        if self._sagemaker_log_group is None:
            self._sagemaker_log_group = logs.LogGroup.from_log_group_name(self, "SageMakerTrainingLogs", SAGEMAKER_LOG_GROUP)
        return self._sagemaker_log_group

    def grant_read_logs(self, role: iam.IRole) -> None:
        """The trainer's logs on the stage's engine (GET /jobs/{id}/logs)."""
        if self.config.compute == "sagemaker":
            group = arn(self, "logs", f"log-group:{SAGEMAKER_LOG_GROUP}")
            allow(
                role,
                ["logs:DescribeLogStreams", "logs:FilterLogEvents"],
                [group, f"{group}:log-stream:*"],
                why="The streams of SageMaker's training-job log group, one per training job and host, named at run time.",
            )
        else:
            # The group's own ARN (DescribeLogStreams and FilterLogEvents name the group: make iam-check found
            # the API's calls denied on it) and CDK's `log_group_arn`, which ends in ":*" (its streams).
            group = arn(self, "logs", f"log-group:{self.trainer_log_group.log_group_name}")
            allow(role, ["logs:DescribeLogStreams", "logs:FilterLogEvents"], [group, self.trainer_log_group.log_group_arn])


# functions/adapters/launchers/sagemaker.py names training jobs tp-<job id>-a<attempt> (or tpx-<digest>...);
# tests/infra check the two agree.
TRAINING_JOB_NAMES = "tp*"
# What EBS/SageMaker ask of the key for an encrypted volume besides the grant (no ReEncrypt*/GenerateDataKey* wildcards).
VOLUME_KEY_ACTIONS = ("kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncryptFrom", "kms:ReEncryptTo")
TRAINING_JOBS_WHY = "Training jobs named tp-<job id>-a<attempt> per attempt at run time; this account and region only."


def _passed_to(service: str) -> dict[str, dict[str, str]]:
    return {"StringEquals": {"iam:PassedToService": f"{service}.amazonaws.com"}}
