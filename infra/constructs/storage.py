"""Jobs and idempotency tables, the artifacts bucket (checkpoints, run specs, metrics, datasets) and its key."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from functions import constants
from infra.config import StageConfig
from infra.constructs.common import allow, removal_policy

# Datasets users upload for training live beside the jobs' artifacts; trainers may read them.

# Data-plane actions only: Scan is left out on purpose (the repository never scans, docs/DESIGN.md).
JOBS_READ_ACTIONS = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:ConditionCheckItem")
JOBS_WRITE_ACTIONS = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem")
IDEMPOTENCY_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
# What a caller needs on the CMK for DynamoDB/S3/SQS data access; no ReEncrypt*/GenerateDataKey* wildcards.
KEY_DATA_ACTIONS = ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:DescribeKey")


class Storage(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.key = kms.Key(
            self,
            "Key",
            description=f"trainplane {config.stage}: jobs, checkpoints and trainer volumes",
            enable_key_rotation=True,
            # The retained artifacts bucket is encrypted with it: deleting the key would lose the data.
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.jobs_table = self._jobs_table(config)
        self.idempotency_table = dynamodb.Table(
            self,
            "IdempotencyTable",
            table_name=config.name(constants.IDEMPOTENCY_TABLE.removeprefix("trainplane-")),
            partition_key=dynamodb.Attribute(name=constants.IDEMPOTENCY_KEY_ATTR, type=dynamodb.AttributeType.STRING),
            time_to_live_attribute=constants.IDEMPOTENCY_TTL_ATTR,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(point_in_time_recovery_enabled=True),
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=self.key,
            deletion_protection=not config.is_dev,
            removal_policy=removal_policy(config),
        )
        self.access_logs_bucket = self._access_logs_bucket()
        self.artifacts_bucket = self._artifacts_bucket(config)

    def _jobs_table(self, config: StageConfig) -> dynamodb.Table:
        table = dynamodb.Table(
            self,
            "JobsTable",
            table_name=config.name(constants.JOBS_TABLE.removeprefix("trainplane-")),
            partition_key=dynamodb.Attribute(name=constants.PK, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=constants.SK, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(point_in_time_recovery_enabled=True),
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=self.key,
            deletion_protection=not config.is_dev,
            removal_policy=removal_policy(config),
            # Webhooks' held events and delivery attempts expire after 30 days (functions/adapters/webhooks.py).
            time_to_live_attribute=constants.JOBS_TTL_ATTR,
            # The event outbox's items reach the publisher through it (infra/constructs/event_bus.py).
            stream=dynamodb.StreamViewType.NEW_IMAGE,
        )
        for index, (pk, sk) in constants.GSIS.items():
            table.add_global_secondary_index(
                index_name=index,
                partition_key=dynamodb.Attribute(name=pk, type=dynamodb.AttributeType.STRING),
                sort_key=dynamodb.Attribute(name=sk, type=dynamodb.AttributeType.STRING),
                projection_type=dynamodb.ProjectionType.ALL,
            )
        return table

    def _access_logs_bucket(self) -> s3.Bucket:
        bucket = s3.Bucket(
            self,
            "AccessLogsBucket",
            # S3 server access logging delivers only to SSE-S3 buckets (SSE-KMS is not supported).
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(id="expire-access-logs", expiration=Duration.days(365))],
            # Retained like the bucket it logs (a non-empty bucket would fail the stack's deletion anyway).
            removal_policy=RemovalPolicy.RETAIN,
        )
        Validations.of(bucket).acknowledge(
            Acknowledgment(id="AwsSolutions-S1", reason="This is the access-log bucket itself; logging it into itself would loop.")
        )
        return bucket

    def _artifacts_bucket(self, config: StageConfig) -> s3.Bucket:
        bucket = s3.Bucket(
            self,
            "ArtifactsBucket",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,  # one data key per bucket and hour instead of per object: fewer KMS calls
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.access_logs_bucket,
            server_access_logs_prefix="artifacts/",
            lifecycle_rules=[
                s3.LifecycleRule(id="abort-incomplete-uploads", abort_incomplete_multipart_upload_after=Duration.days(7)),
                s3.LifecycleRule(
                    id="expire-old-versions",
                    noncurrent_version_expiration=Duration.days(config.noncurrent_version_expiration_days),
                    expired_object_delete_marker=True,
                ),
            ],
            # Checkpoints and models outlive any stack, dev included: deleting them is a human decision.
            removal_policy=RemovalPolicy.RETAIN,
        )
        # Native EventBridge notifications (new datasets trigger retraining) without CDK's
        # notifications custom resource, which would add a Lambda of its own.
        cfn = bucket.node.default_child
        assert isinstance(cfn, s3.CfnBucket)
        cfn.add_property_override("NotificationConfiguration.EventBridgeConfiguration.EventBridgeEnabled", True)
        return bucket

    # --- grants ---------------------------------------------------------------------------------

    def grant_jobs(self, role: iam.IRole, *, write: bool) -> None:
        table = self.jobs_table
        actions = JOBS_READ_ACTIONS + (JOBS_WRITE_ACTIONS if write else ())
        indexes = [f"{table.table_arn}/index/{name}" for name in constants.GSIS]
        allow(role, actions, [table.table_arn, *indexes])
        self.grant_key(role, "dynamodb")

    def grant_idempotency(self, role: iam.IRole) -> None:
        allow(role, IDEMPOTENCY_ACTIONS, [self.idempotency_table.table_arn])
        self.grant_key(role, "dynamodb")

    def grant_artifacts(self, role: iam.IRole, *, prefixes: Sequence[str], write: bool = False, delete: bool = False) -> None:
        """Object access under `prefixes` (e.g. "jobs/") and listing of those prefixes only."""
        bucket = self.artifacts_bucket
        actions = (
            ["s3:GetObject"] + (["s3:PutObject", "s3:AbortMultipartUpload"] if write else []) + (["s3:DeleteObject"] if delete else [])
        )
        allow(
            role,
            actions,
            [bucket.arn_for_objects(f"{p}*") for p in prefixes],
            why=f"Objects under {', '.join(prefixes)} of the artifacts bucket only; their keys (job ids, steps) are made at run time.",
        )
        allow(role, ["s3:ListBucket"], [bucket.bucket_arn], conditions={"StringLike": {"s3:prefix": [f"{p}*" for p in prefixes]}})
        self.grant_key(role, "s3")

    def grant_key(self, role: iam.IRole, *services: str) -> None:
        """Use of the CMK, only through the named AWS services (kms:ViaService)."""
        region = Stack.of(self).region
        allow(
            role,
            KEY_DATA_ACTIONS,
            [self.key.key_arn],
            conditions={"StringEquals": {"kms:ViaService": [f"{s}.{region}.amazonaws.com" for s in services]}},
        )
