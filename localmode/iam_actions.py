"""What IAM authorizes for one AWS API call: (action, resource ARN, condition keys), from its parameters.

`authorizations(service, operation, params, names)` answers for the calls the control plane makes
(docs/DEPLOY.md, "IAM proven by the calls made"): most are `<prefix>:<Operation>` on the resource the
parameters name; some authorize more than one thing (CopyObject reads the source; CreateTrainingJob and
RunInstances pass a role; RunInstances touches an instance, its image, volume, network interface,
subnet, security group, launch template and placement group; a transaction writes several tables).
The condition keys are the ones the stack's policies test: s3:prefix, iam:PassedToService,
ec2:LaunchTemplate, ec2:CreateAction, ec2:InstanceProfile, cloudwatch:namespace.

Resource names go through `names.of(kind, name)`, which turns the deployment's names into tokens
(`${JobsTable}`) that tools/iam resolves from the synthesized template: local mode's and the tests'
table and bucket names are not the stack's. An operation missing here is reported by the check as
unmapped (action `<prefix>:<Operation>` on `*`), never silently allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

Authorization = dict[str, Any]  # {"action", "resource", "context"}

# botocore's endpoint prefix / signing name -> IAM's service prefix, where they differ.
IAM_PREFIX = {"stepfunctions": "states", "sfn": "states", "monitoring": "cloudwatch", "email": "ses"}


class Names(Protocol):
    region: str
    account: str

    def of(self, kind: str, name: str) -> str: ...


def authorizations(service: str, operation: str, params: Mapping[str, Any], names: Names) -> list[Authorization]:
    prefix = IAM_PREFIX.get(service, service)
    special = _SPECIAL.get((prefix, operation))
    if special is not None:
        return special(params, names)
    resource = _resource(prefix, params, names)
    return [_auth(f"{prefix}:{operation}", resource if resource is not None else "*", unmapped=resource is None)]


def _auth(action: str, resource: str, context: dict[str, Any] | None = None, *, unmapped: bool = False) -> Authorization:
    out: Authorization = {"action": action, "resource": resource, "context": context or {}}
    if unmapped:
        out["unmapped"] = True
    return out


def _arn(names: Names, service: str, rest: str, *, region: bool = True, account: bool = True) -> str:
    return f"arn:aws:{service}:{names.region if region else ''}:{names.account if account else ''}:{rest}"


# --- the resource an operation names -----------------------------------------------------------


def _resource(prefix: str, params: Mapping[str, Any], names: Names) -> str | None:
    if prefix == "dynamodb" and "TableName" in params:
        table = f"table/{names.of('table', params['TableName'])}"
        if params.get("IndexName"):
            table += f"/index/{params['IndexName']}"
        return _arn(names, "dynamodb", table)
    if prefix == "states":
        for key in ("executionArn", "stateMachineArn"):
            if key in params:
                return _state_machine_arn(str(params[key]), names)
        if "taskToken" in params:
            return "*"  # SendTask*: no resource-level permissions
    if prefix == "lambda" and "FunctionName" in params:
        return _arn(names, "lambda", f"function:{names.of('function', _function_name(str(params['FunctionName'])))}")
    if prefix == "sagemaker":
        if "TrainingJobName" in params:
            return _arn(names, "sagemaker", f"training-job/{str(params['TrainingJobName']).lower()}")
        if "ResourceArn" in params:
            return str(params["ResourceArn"])
    if prefix == "logs" and "logGroupName" in params:
        group = _arn(names, "logs", f"log-group:{names.of('log-group', params['logGroupName'])}")
        return f"{group}:log-stream:{params['logStreamName']}" if params.get("logStreamName") else group
    if prefix == "scheduler" and "Name" in params:
        group = names.of("schedule-group", params.get("GroupName") or "default")
        return _arn(names, "scheduler", f"schedule/{group}/{params['Name']}")
    if prefix == "cognito-idp" and "UserPoolId" in params:
        return _arn(names, "cognito-idp", f"userpool/{names.of('user-pool', params['UserPoolId'])}")
    if prefix in {"ec2", "cloudwatch", "scheduler", "sts"}:
        return "*"  # Describe*/List*/PutMetricData: no resource-level permissions
    if prefix == "sqs" and "QueueUrl" in params:
        *_, account, queue = str(params["QueueUrl"]).rstrip("/").split("/")
        return f"arn:aws:sqs:{names.region}:{account if account.isdigit() else names.account}:{queue}"
    if prefix == "secretsmanager" and "SecretId" in params:
        secret = str(params["SecretId"])
        return secret if secret.startswith("arn:") else _arn(names, "secretsmanager", f"secret:{secret}-AbCdEf")
    return None


def _function_name(name: str) -> str:
    # a name, a partial ARN (123456789012:function:name) or a full ARN, maybe with a qualifier
    if ":function:" in name:
        return name.split(":function:", 1)[1].split(":", 1)[0]
    return name


def _state_machine_arn(arn: str, names: Names) -> str:
    # arn:aws:states:<region>:<account>:stateMachine:<name> | execution:<name>:<execution>
    parts = arn.split(":")
    if len(parts) >= 7:
        parts[6] = names.of("state-machine", parts[6])
        parts[3], parts[4] = names.region, names.account
    return ":".join(parts)


# --- S3 --------------------------------------------------------------------------------------------


def _object(params: Mapping[str, Any], names: Names, key: str | None = None) -> str:
    return f"arn:aws:s3:::{names.of('bucket', params['Bucket'])}/{params['Key'] if key is None else key}"


def _s3_object(action: str) -> Callable[[Mapping[str, Any], Names], list[Authorization]]:
    return lambda params, names: [_auth(action, _object(params, names))]


def _s3_list(params: Mapping[str, Any], names: Names) -> list[Authorization]:
    context = {"s3:prefix": params["Prefix"]} if "Prefix" in params else {}
    return [_auth("s3:ListBucket", f"arn:aws:s3:::{names.of('bucket', params['Bucket'])}", context)]


def _s3_copy(params: Mapping[str, Any], names: Names) -> list[Authorization]:
    source = params["CopySource"]
    if isinstance(source, str):
        bucket, _, key = source.lstrip("/").partition("/")
        source = {"Bucket": bucket, "Key": key}
    return [_auth("s3:PutObject", _object(params, names)), _auth("s3:GetObject", _object(source, names))]


def _s3_delete_many(params: Mapping[str, Any], names: Names) -> list[Authorization]:
    objects = params.get("Delete", {}).get("Objects", [])
    return [_auth("s3:DeleteObject", _object(params, names, o["Key"])) for o in objects]


# --- DynamoDB batches and transactions -------------------------------------------------------------


def _ddb_table(names: Names, table: str) -> str:
    return _arn(names, "dynamodb", f"table/{names.of('table', table)}")


def _ddb_batch(action: str) -> Callable[[Mapping[str, Any], Names], list[Authorization]]:
    return lambda params, names: [_auth(action, _ddb_table(names, t)) for t in params.get("RequestItems", {})]


_TRANSACT_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


def _ddb_transact(params: Mapping[str, Any], names: Names) -> list[Authorization]:
    out = []
    for item in params.get("TransactItems", []):
        for kind, body in item.items():
            out.append(_auth(f"dynamodb:{_TRANSACT_ACTIONS[kind]}", _ddb_table(names, body["TableName"])))
    return out


# --- compute ---------------------------------------------------------------------------------------


def _pass_role(role_arn: str, service: str) -> Authorization:
    return _auth("iam:PassRole", role_arn, {"iam:PassedToService": f"{service}.amazonaws.com"})


def _create_training_job(params: Mapping[str, Any], names: Names) -> list[Authorization]:
    job = _arn(names, "sagemaker", f"training-job/{str(params['TrainingJobName']).lower()}")
    out = [_auth("sagemaker:CreateTrainingJob", job), _pass_role(names.of("role-arn", params["RoleArn"]), "sagemaker")]
    if params.get("Tags"):
        out.append(_auth("sagemaker:AddTags", job))
    return out


def _run_instances(params: Mapping[str, Any], names: Names) -> list[Authorization]:
    template = params.get("LaunchTemplate") or {}
    template_id = template.get("LaunchTemplateId") or template.get("LaunchTemplateName")
    template_arn = _arn(names, "ec2", f"launch-template/{names.of('launch-template', template_id)}") if template_id else None
    instance_context = {"ec2:LaunchTemplate": template_arn} if template_arn else {}
    out = [_auth("ec2:RunInstances", _arn(names, "ec2", "instance/*"), instance_context)]
    if template_arn:
        out.append(_auth("ec2:RunInstances", template_arn))
    if params.get("ImageId"):
        out.append(_auth("ec2:RunInstances", _arn(names, "ec2", f"image/{params['ImageId']}", account=False)))
    kinds = ["volume", "network-interface"]
    if params.get("InstanceMarketOptions"):
        kinds.append("spot-instances-request")
    out += [_auth("ec2:RunInstances", _arn(names, "ec2", f"{kind}/*")) for kind in kinds]
    # The subnet and security group: the ones named, else the default VPC's (ids AWS picks at launch).
    subnets = (
        [params["SubnetId"]]
        if params.get("SubnetId")
        else [i.get("SubnetId") for i in params.get("NetworkInterfaces", []) if i.get("SubnetId")]
    )
    groups = list(params.get("SecurityGroupIds", [])) + [g for i in params.get("NetworkInterfaces", []) for g in i.get("Groups", [])]
    out += [_auth("ec2:RunInstances", _arn(names, "ec2", f"subnet/{s}")) for s in subnets or ["subnet-default"]]
    out += [_auth("ec2:RunInstances", _arn(names, "ec2", f"security-group/{g}")) for g in groups or ["sg-default"]]
    group_name = (params.get("Placement") or {}).get("GroupName")
    if group_name:
        out.append(_auth("ec2:RunInstances", _arn(names, "ec2", f"placement-group/{names.of('placement-group', group_name)}")))
    for spec in params.get("TagSpecifications", []):
        resource = {"instance": "instance/*", "volume": "volume/*"}.get(spec.get("ResourceType", ""), f"{spec.get('ResourceType')}/*")
        out.append(_auth("ec2:CreateTags", _arn(names, "ec2", resource), {"ec2:CreateAction": "RunInstances"}))
    profile = (params.get("IamInstanceProfile") or {}).get("Arn") or (params.get("IamInstanceProfile") or {}).get("Name")
    if profile:
        out.append(_pass_role(names.of("instance-profile-role", profile), "ec2"))
    return out


def _template_arn(params: Mapping[str, Any], names: Names) -> str:
    spec = params.get("LaunchTemplateSpecification") or params
    template_id = str(spec.get("LaunchTemplateId") or spec.get("LaunchTemplateName"))
    return _arn(names, "ec2", f"launch-template/{names.of('launch-template', template_id)}")


def _template_version(action: str) -> Callable[[Mapping[str, Any], Names], list[Authorization]]:
    return lambda params, names: [_auth(action, _template_arn(params, names))]


def _create_fleet(params: Mapping[str, Any], names: Names) -> list[Authorization]:
    """An instant fleet launches through RunInstances on the caller's behalf: CreateFleet on the fleet and its
    template, RunInstances on what each launch creates (as RunInstances itself), CreateTags as CreateFleet."""
    configs = params.get("LaunchTemplateConfigs", [])
    templates = sorted({_template_arn(c, names) for c in configs})
    spot = (params.get("TargetCapacitySpecification") or {}).get("DefaultTargetCapacityType") == "spot"
    out = [_auth("ec2:CreateFleet", _arn(names, "ec2", "fleet/*"))] + [_auth("ec2:CreateFleet", t) for t in templates]
    groups = {o["Placement"]["GroupName"] for c in configs for o in c.get("Overrides", []) if (o.get("Placement") or {}).get("GroupName")}
    for template in templates:
        launch: dict[str, Any] = {"LaunchTemplate": {"LaunchTemplateId": template.rsplit("/", 1)[1]}}
        if spot:
            launch["InstanceMarketOptions"] = {"MarketType": "spot"}
        for group in sorted(groups) or [None]:
            placed = {**launch, "Placement": {"GroupName": group}} if group else launch
            out += [a for a in _run_instances(placed, _Known(names, template)) if a["action"] == "ec2:RunInstances"]
    for kind in ("instance/*", "volume/*"):
        out.append(_auth("ec2:CreateTags", _arn(names, "ec2", kind), {"ec2:CreateAction": "CreateFleet"}))
    return out


class _Known:
    """Names whose launch template is already resolved (its ARN's last part is the template's name)."""

    def __init__(self, names: Names, template_arn: str) -> None:
        self._names, self._template = names, template_arn
        self.region, self.account = names.region, names.account

    def of(self, kind: str, name: str) -> str:
        return name if kind == "launch-template" else self._names.of(kind, name)


def _on_instances(action: str) -> Callable[[Mapping[str, Any], Names], list[Authorization]]:
    def authorize(params: Mapping[str, Any], names: Names) -> list[Authorization]:
        ids = list(params.get("InstanceIds") or params.get("Resources") or [])
        out = []
        for instance in ids:
            profile = names.of("instance-profile-of", instance)
            context = {"ec2:InstanceProfile": profile} if profile != instance else {}
            out.append(_auth(action, _arn(names, "ec2", f"instance/{instance}"), context))
        return out

    return authorize


def _schedule(action: str) -> Callable[[Mapping[str, Any], Names], list[Authorization]]:
    def authorize(params: Mapping[str, Any], names: Names) -> list[Authorization]:
        out = [_auth(action, _resource("scheduler", params, names) or "*")]
        role = (params.get("Target") or {}).get("RoleArn")
        if role:
            out.append(_pass_role(names.of("role-arn", role), "scheduler"))
        return out

    return authorize


def _put_events(params: Mapping[str, Any], names: Names) -> list[Authorization]:
    buses = {entry.get("EventBusName") or "default" for entry in params.get("Entries", [])}
    return [
        _auth("events:PutEvents", b if b.startswith("arn:") else _arn(names, "events", f"event-bus/{names.of('event-bus', b)}"))
        for b in sorted(buses)
    ]


def _put_metric_data(params: Mapping[str, Any], names: Names) -> list[Authorization]:
    return [_auth("cloudwatch:PutMetricData", "*", {"cloudwatch:namespace": params.get("Namespace", "")})]


_SPECIAL: dict[tuple[str, str], Callable[[Mapping[str, Any], Names], list[Authorization]]] = {
    ("s3", "GetObject"): _s3_object("s3:GetObject"),
    ("s3", "HeadObject"): _s3_object("s3:GetObject"),
    ("s3", "PutObject"): _s3_object("s3:PutObject"),
    ("s3", "CreateMultipartUpload"): _s3_object("s3:PutObject"),
    ("s3", "UploadPart"): _s3_object("s3:PutObject"),
    ("s3", "CompleteMultipartUpload"): _s3_object("s3:PutObject"),
    ("s3", "AbortMultipartUpload"): _s3_object("s3:AbortMultipartUpload"),
    ("s3", "DeleteObject"): _s3_object("s3:DeleteObject"),
    ("s3", "GetObjectTagging"): _s3_object("s3:GetObjectTagging"),
    ("s3", "CopyObject"): _s3_copy,
    ("s3", "DeleteObjects"): _s3_delete_many,
    ("s3", "ListObjectsV2"): _s3_list,
    ("s3", "ListObjects"): _s3_list,
    ("s3", "HeadBucket"): lambda p, n: [_auth("s3:ListBucket", f"arn:aws:s3:::{n.of('bucket', p['Bucket'])}")],
    ("dynamodb", "BatchGetItem"): _ddb_batch("dynamodb:BatchGetItem"),
    ("dynamodb", "BatchWriteItem"): _ddb_batch("dynamodb:BatchWriteItem"),
    ("dynamodb", "TransactWriteItems"): _ddb_transact,
    ("dynamodb", "TransactGetItems"): _ddb_transact,
    ("sagemaker", "CreateTrainingJob"): _create_training_job,
    ("ec2", "RunInstances"): _run_instances,
    ("ec2", "CreateFleet"): _create_fleet,
    ("ec2", "CreateLaunchTemplateVersion"): _template_version("ec2:CreateLaunchTemplateVersion"),
    ("ec2", "DeleteLaunchTemplateVersions"): _template_version("ec2:DeleteLaunchTemplateVersions"),
    ("ec2", "CreateTags"): _on_instances("ec2:CreateTags"),
    ("ec2", "TerminateInstances"): _on_instances("ec2:TerminateInstances"),
    ("scheduler", "CreateSchedule"): _schedule("scheduler:CreateSchedule"),
    ("scheduler", "UpdateSchedule"): _schedule("scheduler:UpdateSchedule"),
    ("events", "PutEvents"): _put_events,
    ("cloudwatch", "PutMetricData"): _put_metric_data,
    ("lambda", "Invoke"): lambda p, n: [_auth("lambda:InvokeFunction", _resource("lambda", p, n) or "*")],
    ("lambda", "InvokeAsync"): lambda p, n: [_auth("lambda:InvokeFunction", _resource("lambda", p, n) or "*")],
    ("sts", "GetCallerIdentity"): lambda p, n: [],  # needs no permission
}
