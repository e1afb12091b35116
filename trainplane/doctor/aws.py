"""The doctor's ports over boto3: the same adapters for a cloud account and for local mode's emulated AWS
(`endpoint_url` set, local mode's keys). boto3 loads with this module only (`trainplane doctor`)."""

from __future__ import annotations

import functools
import json
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from trainplane.doctor.ports import Ports, Quota
from trainplane.endpoint import Principal

_CONFIG = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10, read_timeout=30)
_MANIFEST_TYPES = [
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
]


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


@dataclass
class AwsSession:
    """Where the clients point: the account's regional endpoints, or local mode's emulated AWS."""

    region: str
    endpoint_url: str | None = None
    principal: Principal | None = None
    _clients: dict[str, Any] = field(default_factory=dict, repr=False)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            keys: dict[str, str] = {}
            if self.principal is not None:
                keys = {"aws_access_key_id": self.principal.access_key_id, "aws_secret_access_key": self.principal.secret_access_key}
            self._clients[service] = _boto_session().client(
                service, region_name=self.region, endpoint_url=self.endpoint_url, config=_CONFIG, **keys
            )
        return self._clients[service]


@functools.cache
def _boto_session() -> boto3.session.Session:
    # One session for every client: it parses each service's model once (a second or more per model).
    return boto3.session.Session()


class StsIdentity:
    def __init__(self, session: AwsSession) -> None:
        self._session = session

    def caller_arn(self) -> str:
        return str(self._session.client("sts").get_caller_identity()["Arn"])


class LocalIdentity:
    """Local mode: the emulated STS must answer; the caller is the endpoint.json principal that signs."""

    def __init__(self, session: AwsSession) -> None:
        self._session = session

    def caller_arn(self) -> str:
        StsIdentity(self._session).caller_arn()  # the emulated AWS answers these keys
        principal = self._session.principal
        return principal.arn if principal is not None and principal.arn else StsIdentity(self._session).caller_arn()


class IamSimulator:
    """iam:SimulatePrincipalPolicy, for the role behind an assumed-role session (IAM simulates roles, not sessions)."""

    def __init__(self, session: AwsSession) -> None:
        self._session = session

    def denied_actions(self, caller_arn: str, actions: list[str], resource_arn: str) -> list[str] | None:
        iam = self._session.client("iam")
        source = policy_source(caller_arn)
        if ":role/" in source:  # IAM wants the role's full ARN, path included
            source = str(iam.get_role(RoleName=source.rsplit("/", 1)[-1])["Role"]["Arn"])
        answer = iam.simulate_principal_policy(PolicySourceArn=source, ActionNames=actions, ResourceArns=[resource_arn])
        return [r["EvalActionName"] for r in answer["EvaluationResults"] if r["EvalDecision"] != "allowed"]


def policy_source(caller_arn: str) -> str:
    """arn:aws:sts::A:assumed-role/R/session -> arn:aws:iam::A:role/R; users and roles as they are."""
    if ":assumed-role/" not in caller_arn:
        return caller_arn
    prefix, _, rest = caller_arn.partition(":assumed-role/")
    return prefix.replace(":sts:", ":iam:") + ":role/" + rest.split("/", 1)[0]


class CloudFormationStacks:
    def __init__(self, session: AwsSession) -> None:
        self._session = session

    def outputs(self, stack: str) -> dict[str, str] | None:
        try:
            found = self._session.client("cloudformation").describe_stacks(StackName=stack)["Stacks"]
        except ClientError as exc:
            if _code(exc) == "ValidationError" and "does not exist" in str(exc):
                return None
            raise
        if not found:
            return None
        return {o["OutputKey"]: o.get("OutputValue", "") for o in found[0].get("Outputs", [])}


class DynamoTables:
    def __init__(self, session: AwsSession) -> None:
        self._session = session

    def status(self, name: str) -> str | None:
        try:
            return str(self._session.client("dynamodb").describe_table(TableName=name)["Table"]["TableStatus"])
        except ClientError as exc:
            if _code(exc) == "ResourceNotFoundException":
                return None
            raise


class S3Buckets:
    def __init__(self, session: AwsSession) -> None:
        self._session = session

    def exists(self, name: str) -> bool:
        try:
            self._session.client("s3").head_bucket(Bucket=name)
        except ClientError as exc:
            if _code(exc) in ("404", "NoSuchBucket", "NotFound"):
                return False
            raise
        return True

    def put(self, uri: str, body: bytes) -> None:
        bucket, key = split_s3(uri)
        self._session.client("s3").put_object(Bucket=bucket, Key=key, Body=body)

    def delete(self, uri: str) -> None:
        bucket, key = split_s3(uri)
        self._session.client("s3").delete_object(Bucket=bucket, Key=key)


class EventBridgeBuses:
    def __init__(self, session: AwsSession) -> None:
        self._session = session

    def exists(self, name: str) -> bool:
        try:
            self._session.client("events").describe_event_bus(Name=name)
        except ClientError as exc:
            if _code(exc) == "ResourceNotFoundException":
                return False
            raise
        return True


class StepFunctionsMachines:
    def __init__(self, session: AwsSession) -> None:
        self._session = session

    def definition(self, arn: str) -> str | None:
        try:
            return str(self._session.client("stepfunctions").describe_state_machine(stateMachineArn=arn)["definition"])
        except ClientError as exc:
            if _code(exc) in ("StateMachineDoesNotExist", "InvalidArn"):
                return None
            raise


class EcrImages:
    def __init__(self, session: AwsSession) -> None:
        self._session = session

    def platforms(self, image_uri: str) -> list[str] | None:
        registry, _, rest = image_uri.partition("/")
        repository, image_id = _split_reference(rest)
        ecr = self._session.client("ecr")
        try:
            answer = ecr.batch_get_image(
                registryId=registry.split(".", 1)[0], repositoryName=repository, imageIds=[image_id], acceptedMediaTypes=_MANIFEST_TYPES
            )
        except ClientError as exc:
            if _code(exc) in ("RepositoryNotFoundException", "ImageNotFoundException"):
                return None
            raise
        if not answer.get("images"):
            return None
        manifest = json.loads(answer["images"][0]["imageManifest"])
        if "manifests" in manifest:  # a list (index): one entry per platform, attestations without a real one
            found = [f"{m['platform']['os']}/{m['platform']['architecture']}" for m in manifest["manifests"] if "platform" in m]
            return [p for p in found if p != "unknown/unknown"]
        return [self._config_platform(ecr, registry, repository, manifest)]

    @staticmethod
    def _config_platform(ecr: Any, registry: str, repository: str, manifest: dict[str, Any]) -> str:
        # A single-platform manifest says its platform only in its config blob.
        try:
            url = ecr.get_download_url_for_layer(
                registryId=registry.split(".", 1)[0], repositoryName=repository, layerDigest=manifest["config"]["digest"]
            )["downloadUrl"]
            with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 (an https URL ECR signed)
                config = json.loads(response.read())
            return f"{config['os']}/{config['architecture']}"
        except Exception:
            return "unknown"


def _split_reference(reference: str) -> tuple[str, dict[str, str]]:
    if "@" in reference:
        repository, digest = reference.split("@", 1)
        return repository, {"imageDigest": digest}
    repository, _, tag = reference.rpartition(":")
    return (repository, {"imageTag": tag}) if repository else (reference, {"imageTag": "latest"})


class CloudWatchLogGroups:
    def __init__(self, session: AwsSession) -> None:
        self._session = session

    def subscription_filters(self, group: str) -> list[str] | None:
        logs = self._session.client("logs")
        groups = logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"]
        if not any(g["logGroupName"] == group for g in groups):
            return None
        return [f["filterName"] for f in logs.describe_subscription_filters(logGroupName=group)["subscriptionFilters"]]


class ServiceQuotas:
    """The account's values: AWS's defaults, overridden by what the account was granted."""

    def __init__(self, session: AwsSession) -> None:
        self._session = session

    def quotas(self, service_code: str) -> list[Quota]:
        client = self._session.client("service-quotas")
        by_code: dict[str, Quota] = {}
        for operation in ("list_aws_default_service_quotas", "list_service_quotas"):
            for page in client.get_paginator(operation).paginate(ServiceCode=service_code):
                for q in page["Quotas"]:
                    by_code[q["QuotaCode"]] = Quota(code=q["QuotaCode"], name=q["QuotaName"], value=float(q.get("Value", 0.0)))
        return list(by_code.values())


class AwsDashboards:
    def __init__(self, session: AwsSession) -> None:
        self._session = session

    def user_pool_exists(self, pool_id: str) -> bool:
        try:
            self._session.client("cognito-idp").describe_user_pool(UserPoolId=pool_id)
        except ClientError as exc:
            if _code(exc) == "ResourceNotFoundException":
                return False
            raise
        return True

    def distribution_status(self, distribution_id: str) -> str | None:
        try:
            found = self._session.client("cloudfront").get_distribution(Id=distribution_id)["Distribution"]
        except ClientError as exc:
            if _code(exc) == "NoSuchDistribution":
                return None
            raise
        return str(found["Status"]) if found["DistributionConfig"]["Enabled"] else "Disabled"


class NoIam:
    """Local mode: no IAM policies to simulate (its front door admits the principals of endpoint.json)."""

    def denied_actions(self, caller_arn: str, actions: list[str], resource_arn: str) -> list[str] | None:
        return None


def aws_ports(session: AwsSession, api: Any, *, local: bool = False) -> Ports:
    return Ports(
        identity=LocalIdentity(session) if local else StsIdentity(session),
        simulator=NoIam() if local else IamSimulator(session),
        stacks=CloudFormationStacks(session),
        tables=DynamoTables(session),
        buckets=S3Buckets(session),
        buses=EventBridgeBuses(session),
        machines=StepFunctionsMachines(session),
        images=EcrImages(session),
        logs=CloudWatchLogGroups(session),
        quotas=ServiceQuotas(session),
        dashboards=AwsDashboards(session),
        api=api,
    )
