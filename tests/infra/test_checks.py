"""The offline checks of the synthesized stacks: cdk-nag, cfn-lint, the ASL, IAM least privilege, encryption."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from functions import constants
from infra.constructs.lifecycle import LIFECYCLE
from tests.infra.conftest import Synth, resolve_ref

pytestmark = pytest.mark.infra

STAGES = ("dev", "prod")
# Actions that accept no resource ARN (IAM's Service Authorization Reference lists no resource type).
NO_RESOURCE_ACTIONS = {
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "states:SendTaskSuccess",
    "states:SendTaskHeartbeat",
    "ec2:DescribeInstances",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeVpcs",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeDhcpOptions",
    "ec2:CreateNetworkInterface",  # condition ec2:Vpc pins it (checked below)
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ecr:GetAuthorizationToken",
    "cloudwatch:PutMetricData",  # condition cloudwatch:namespace pins it
    "logs:DescribeLogGroups",
    "scheduler:ListSchedules",
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
}
# cfn-lint warnings CDK itself produces, with why they are harmless.
ALLOWED_LINT = {"W3005": "CDK adds DependsOn on a role's default policy beside the GetAtt of the role: redundant, not wrong."}


def _statements(template: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(policy or role logical id, statement) for every identity policy in the template."""
    found = []
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::IAM::Policy":
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                found.append((logical_id, statement))
        if resource["Type"] == "AWS::IAM::Role":
            for policy in resource["Properties"].get("Policies", []):
                for statement in policy["PolicyDocument"]["Statement"]:
                    found.append((logical_id, statement))
    return found


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def role_actions(template: dict[str, Any], role_id: str) -> dict[str, list[dict[str, Any]]]:
    """action -> the statements that allow it, for one role."""
    actions: dict[str, list[dict[str, Any]]] = {}
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        if {"Ref": role_id} not in resource["Properties"].get("Roles", []):
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            for action in _as_list(statement["Action"]):
                actions.setdefault(action, []).append(statement)
    return actions


def function_roles(synth: Synth, stage: str) -> dict[str, str]:
    """handler short name (api, lifecycle, events, retraining) -> its role's logical id."""
    roles = {}
    for resource in synth.resources(stage, "AWS::Lambda::Function").values():
        short = resource["Properties"]["Handler"].split(".")[2]
        roles[short] = resolve_ref(resource["Properties"]["Role"])
    return roles


# --- cdk-nag -------------------------------------------------------------------------------------


def test_cdk_nag_found_nothing_unacknowledged(synth: Synth) -> None:
    # Given the session's synth, which would have raised on an unacknowledged finding
    # When the validation report it wrote is read
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    # Then no plugin reported a violation
    assert [v for p in report["pluginReports"] for v in p["violations"]] == []


def test_cdk_nag_fails_the_synth_on_an_unacknowledged_finding(tmp_path: Path) -> None:
    import aws_cdk as cdk
    from aws_cdk import aws_sqs as sqs

    from infra.app import check

    # Given an app checked the way infra/app.py checks ours, holding a queue that allows plain HTTP
    app = cdk.App(outdir=str(tmp_path))
    sqs.Queue(cdk.Stack(app, "Canary"), "PlainQueue", encryption=sqs.QueueEncryption.SQS_MANAGED)
    check(app)
    # When it is synthesized, Then the synth fails and names the rule
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    rules = {v["ruleName"] for p in report["pluginReports"] for v in p["violations"]}
    assert "AwsSolutions-SQS4" in rules


@pytest.mark.parametrize("stage", STAGES)
def test_every_acknowledgment_has_a_reason(synth: Synth, stage: str) -> None:
    # Given the acknowledgments recorded on the constructs
    acknowledged = [
        (path, rule, reason)
        for path, entries in synth.metadata[stage].items()
        for entry in entries
        if entry["type"] == "aws:cdk:acknowledged-rules"
        for rule, reason in entry["data"].items()
    ]
    # Then there are some (the stack does need them), each with a reason that explains itself
    assert len(acknowledged) >= 10
    for path, rule, reason in acknowledged:
        assert len(reason.split()) >= 6, f"{path} {rule}: reason too thin: {reason!r}"
    # And no acknowledgment is stack-wide: each sits next to the resource it is about
    assert not [a for a in acknowledged if a[0].count("/") < 2]


@pytest.mark.parametrize("stage", STAGES)
def test_synth_raised_no_warnings(synth: Synth, stage: str) -> None:
    warnings = [(p, e["data"]) for p, entries in synth.metadata[stage].items() for e in entries if e["type"] == "aws:cdk:warning"]
    assert warnings == []


# --- cfn-lint ------------------------------------------------------------------------------------


def _lint(template: dict[str, Any], region: str) -> list[Any]:
    from cfnlint.api import ManualArgs, lint

    return list(lint(json.dumps(template), config=ManualArgs(regions=[region])))


@pytest.mark.slow
@pytest.mark.parametrize(("stage", "region"), [("dev", "us-east-1"), ("prod", "eu-west-1")])
def test_cfn_lint_finds_no_error(synth: Synth, stage: str, region: str) -> None:
    # When cfn-lint checks the synthesized template
    matches = _lint(synth.templates[stage], region)
    # Then nothing is reported beyond the CDK patterns known to be harmless
    unexpected = [f"{m.rule.id} {m.message}" for m in matches if m.rule.id not in ALLOWED_LINT]
    assert unexpected == []


@pytest.mark.slow
def test_cfn_lint_checks_the_state_machine_definition(synth: Synth) -> None:
    # Given the state machine alone, with a broken state in its (plain-string) definition
    machine = json.loads(json.dumps(next(iter(synth.resources("dev", "AWS::StepFunctions::StateMachine").values()))))
    definition = json.loads(machine["Properties"]["DefinitionString"])
    definition["States"][definition["StartAt"]]["Type"] = "Teleport"
    machine["Properties"]["DefinitionString"] = json.dumps(definition)
    machine.pop("DependsOn", None)
    template = {"Resources": {"Machine": machine}}
    # When cfn-lint checks it
    errors = [m for m in _lint(template, "us-east-1") if m.rule.id.startswith("E")]
    # Then the definition's schema check catches it: the lint above really looks inside the definition
    assert any(m.rule.id == "E3601" and "Teleport" in str(m.message) for m in errors)


# --- the state machine ---------------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
def test_state_machine_definition_is_the_shared_asl_file_and_valid(synth: Synth, stage: str) -> None:
    from infra import statemachine

    machine = next(iter(synth.resources(stage, "AWS::StepFunctions::StateMachine").values()))["Properties"]
    # Then the definition is the file's own text, a plain string (so cfn-lint can check it) ...
    assert isinstance(machine["DefinitionString"], str)
    assert machine["DefinitionString"] == statemachine.load_template()
    # ... whose placeholders are exactly the substitutions the stack passes ...
    assert statemachine.placeholders(machine["DefinitionString"]) == set(machine["DefinitionSubstitutions"])
    # ... and which, rendered, is valid ASL by the loader's structural validation
    rendered = statemachine.render(
        {name: f"arn:aws:lambda:us-east-1:123456789012:function:{name}" for name in machine["DefinitionSubstitutions"]}
    )
    statemachine.validate(json.loads(rendered))


@pytest.mark.parametrize("stage", STAGES)
def test_state_machine_targets_resolve_to_this_stacks_resources(synth: Synth, stage: str) -> None:
    template = synth.templates[stage]
    resources = template["Resources"]
    machine = next(iter(synth.resources(stage, "AWS::StepFunctions::StateMachine").values()))["Properties"]
    definition = json.loads(machine["DefinitionString"])
    # Given every Task of the definition
    from infra.constructs.lifecycle import task_states

    tasks = dict(task_states(definition["States"]))
    assert tasks
    for name, state in tasks.items():
        # Then a Lambda task names its function only through the substitution, never a literal ARN
        assert state["Resource"].startswith("arn:aws:states:::"), name
        assert state["Parameters"]["FunctionName"] == "${LifecycleFunctionArn}", name
    assert not re.search(r"arn:aws:(lambda|dynamodb|s3|sagemaker|ec2|events):", machine["DefinitionString"])
    # And each substitution is one of this stack's resources: the lifecycle function, its table and bucket
    subs = machine["DefinitionSubstitutions"]
    function_id = resolve_ref(subs["LifecycleFunctionArn"])
    assert resources[function_id]["Properties"]["Handler"] == LIFECYCLE.handler
    if "JobsTableName" in subs:
        assert resources[resolve_ref(subs["JobsTableName"])]["Properties"]["TableName"].endswith("-jobs")
    if "ArtifactsBucketName" in subs:
        assert resources[resolve_ref(subs["ArtifactsBucketName"])]["Type"] == "AWS::S3::Bucket"
    # And the machine's role may invoke exactly that function (and its versions), nothing else
    actions = role_actions(template, resolve_ref(machine["RoleArn"]))
    invoke = [r for s in actions["lambda:InvokeFunction"] for r in _as_list(s["Resource"])]
    assert {json.dumps(r) for r in invoke} == {
        json.dumps({"Fn::GetAtt": [function_id, "Arn"]}),
        json.dumps({"Fn::Join": ["", [{"Fn::GetAtt": [function_id, "Arn"]}, ":*"]]}),
    }
    assert {a.split(":")[0] for a in actions} <= {"lambda", "logs", "xray", "dynamodb", "events", "kms"}


# --- IAM -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
def test_no_policy_grants_wildcard_actions(synth: Synth, stage: str) -> None:
    for policy, statement in _statements(synth.templates[stage]):
        for action in _as_list(statement["Action"]):
            assert "*" not in action, f"{policy}: {action}"
        assert "NotAction" not in statement and "NotResource" not in statement, policy


@pytest.mark.parametrize("stage", STAGES)
def test_no_managed_policies(synth: Synth, stage: str) -> None:
    # Managed policies (AWSLambdaBasicExecutionRole ...) reach every log group: each role has its own grants.
    for logical_id, role in synth.resources(stage, "AWS::IAM::Role").items():
        assert not role["Properties"].get("ManagedPolicyArns"), logical_id


@pytest.mark.parametrize("stage", STAGES)
def test_star_resources_only_for_actions_without_resource_types(synth: Synth, stage: str) -> None:
    for policy, statement in _statements(synth.templates[stage]):
        if "*" in _as_list(statement["Resource"]):
            actions = set(_as_list(statement["Action"]))
            assert actions <= NO_RESOURCE_ACTIONS, f"{policy}: {sorted(actions - NO_RESOURCE_ACTIONS)} on '*'"
            if actions & {"cloudwatch:PutMetricData"}:
                assert statement["Condition"]["StringEquals"]["cloudwatch:namespace"] == "/aws/sagemaker/TrainingJobs"
            if actions & {"ec2:CreateNetworkInterface"}:
                assert "ec2:Vpc" in statement["Condition"]["ArnEquals"]


@pytest.mark.parametrize("stage", STAGES)
def test_every_resource_is_this_stacks_or_this_accounts(synth: Synth, stage: str) -> None:
    template = synth.templates[stage]
    own = set(template["Resources"])
    for policy, statement in _statements(template):
        for resource in _as_list(statement["Resource"]):
            if resource == "*":
                continue
            text = json.dumps(resource)
            refs = set(re.findall(r'"(?:Ref|Fn::GetAtt)": \[?"([A-Za-z0-9]+)"', text)) - {"AWS"}
            refs = {r for r in refs if not r.startswith("AWS::")}
            # A reference to one of this template's resources, or an ARN in this account and region ...
            scoped = bool(refs) and refs <= own
            in_account = '{"Ref": "AWS::AccountId"}' in text or (stage == "prod" and "111122223333" in text)
            aws_owned_ami = ":ec2:" in text and "::image/*" in text
            configured_data = stage == "prod" and ("team-datasets" in text or "team-models" in text)  # stage-config grants
            assert scoped or in_account or aws_owned_ami or configured_data, f"{policy}: {text}"


def _arn_text(resource: Any) -> str:
    """A policy resource as one string: references as {LogicalId} (or {AWS::AccountId}), literals as they are."""
    if isinstance(resource, str):
        return resource
    if "Ref" in resource:
        return "{" + resource["Ref"] + "}"
    if "Fn::GetAtt" in resource:
        return "{" + ".".join(resource["Fn::GetAtt"]) + "}"
    if "Fn::Join" in resource:
        separator, parts = resource["Fn::Join"]
        return separator.join(_arn_text(p) for p in parts)
    return json.dumps(resource)


# Wildcards after a name that is not this stack's, each with why it cannot be narrower.
NAMED_WILDCARDS = {
    ":secret:trainplane/*": "the deployment's W&B key secrets: Secrets Manager appends a random suffix to each name",
    ":log-group:/aws/sagemaker/TrainingJobs:log-stream:*": "SageMaker's own log group; one stream per training job and host",
    ":repository/ml-team/*": "the prod stage's configured custom image repositories (custom_image_repositories)",
    "team-datasets/llm/*": "the prod stage's configured training data location (training_data_uris)",
    "team-models/out/*": "the prod stage's configured read-write bucket grant (bucket_grants)",
    "::image/*": "AWS-owned AMIs (no account): the launch template's image, resolved at launch",
    # Too broad, known: every training job of the account and region whose name starts with tp, not only this
    # stage's (job names carry no stage: functions/adapters/launchers/sagemaker.py training_job_name).
    ":training-job/tp*": "the launcher's training job names, tp-<job id>-a<attempt>; not stage-scoped (known)",
    # API Gateway's logging role is account-wide (AWS::ApiGateway::Account): it writes every API's execution logs.
    ":log-group:API-Gateway-Execution-Logs_*": "API Gateway's account-wide logging role, for every API of the account",
}
# Resource types RunInstances creates (unnamed until it runs); the instance itself is pinned by its launch template.
RUN_INSTANCES_CREATES = {"network-interface", "spot-instances-request", "volume", "instance", "fleet"}


@pytest.mark.parametrize("stage", STAGES)
def test_no_wildcard_resource_inside_the_account_unless_pinned(synth: Synth, stage: str) -> None:
    # Given every resource of every identity policy that holds a wildcard, in this account or not
    template = synth.templates[stage]
    own = set(template["Resources"])
    for policy, statement in _statements(template):
        actions = set(_as_list(statement["Action"]))
        for resource in _as_list(statement["Resource"]):
            text = _arn_text(resource)
            if "*" not in text or text == "*":
                continue
            head = text.split("*", 1)[0]
            # Then the part before the wildcard names one of this stack's resources (a bucket's prefix, a
            # function's versions, the API's stages) or carries the stack's own name (its executions, its
            # schedule group) ...
            refs = set(re.findall(r"\{([A-Za-z0-9]+)(?:\.[A-Za-z]+)?\}", head))
            if refs & own or f"trainplane-{stage}-" in head:
                continue
            # ... or it is one of the named exceptions above ...
            if any(text.endswith(named) for named in NAMED_WILDCARDS):
                continue
            # ... or it is a bare EC2 resource type (":instance/*") whose statement a condition pins to this
            # stack's launch template / instance profile, or to the tags of RunInstances' own launch
            kind = re.fullmatch(
                r"arn:aws:ec2:[a-z0-9-]+:(?:\d{12}|\{AWS::AccountId\}):([a-z-]+)/\*",
                text.replace("{AWS::Partition}", "aws").replace("{AWS::Region}", "r"),
            )
            assert kind and kind.group(1) in RUN_INSTANCES_CREATES, f"{policy}: {actions} on {text}"
            condition = json.dumps(statement.get("Condition"))
            pinned = any(k in condition for k in ("ec2:LaunchTemplate", "ec2:InstanceProfile", '"ec2:CreateAction": ["RunInstances"'))
            # An instant fleet (docs/PLACEMENT.md) launches through RunInstances, whose launch-template condition pins it.
            launches = actions == {"ec2:RunInstances"} or (actions == {"ec2:CreateFleet"} and kind.group(1) == "fleet")
            assert pinned or launches, f"{policy}: {actions} on {text} with no pinning condition"


@pytest.mark.parametrize("stage", STAGES)
def test_dynamodb_grants_name_only_the_stacks_tables_their_indexes_and_streams(synth: Synth, stage: str) -> None:
    template = synth.templates[stage]
    tables = synth.resources(stage, "AWS::DynamoDB::Table")
    allowed = set()
    for logical_id, table in tables.items():
        allowed.add("{" + logical_id + ".Arn}")
        if table["Properties"].get("StreamSpecification"):
            # the table's own stream (the event publisher reads it): by its ARN, and under the table for the stream
            # calls CDK grants there (a stream's label is generated, so its streams are named by the table's prefix)
            allowed |= {"{" + logical_id + ".StreamArn}", "{" + logical_id + ".Arn}/stream/*"}
        for index in table["Properties"].get("GlobalSecondaryIndexes", []) + table["Properties"].get("LocalSecondaryIndexes", []):
            allowed.add("{" + logical_id + ".Arn}/index/" + index["IndexName"])
    granted = set()
    for policy, statement in _statements(template):
        if not any(a.startswith("dynamodb:") for a in _as_list(statement["Action"])):
            continue
        # Then every resource is one of the stack's tables or one of their named indexes: no "index/*",
        # no table named by a pattern, no other account's or stack's table
        resources = {_arn_text(r) for r in _as_list(statement["Resource"])}
        assert resources <= allowed, f"{policy}: {sorted(resources - allowed)}"
        granted |= resources
    # And the grants reach both tables (the jobs table with its indexes, the idempotency table)
    assert {"{" + t + ".Arn}" for t in tables} <= granted


COMMON = {"logs:CreateLogStream", "logs:PutLogEvents", "xray:PutTraceSegments", "xray:PutTelemetryRecords"}
JOBS = {
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:ConditionCheckItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
}
KEY = {"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:DescribeKey"}
IDEMPOTENCY = {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}
ARTIFACTS_RW = {"s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject", "s3:ListBucket"}
EXECUTIONS = {"states:StartExecution", "states:DescribeExecution", "states:StopExecution"}
TOKENS = {"states:SendTaskSuccess", "states:SendTaskHeartbeat"}
SCHEDULES = {"scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule", "scheduler:ListSchedules", "iam:PassRole"}
VOLUME_KEY = {"kms:CreateGrant", "kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncryptFrom", "kms:ReEncryptTo"}
LOGS_READ = {"logs:DescribeLogStreams", "logs:FilterLogEvents"}
FLEET = {"ec2:CreateFleet", "ec2:CreateLaunchTemplateVersion", "ec2:DeleteLaunchTemplateVersions"}
ENGINE = {
    # dev runs on SageMaker (the default), prod on EC2: a role holds only its stage's engine.
    "dev": {
        "launch": {"sagemaker:CreateTrainingJob", "sagemaker:AddTags", "iam:PassRole"} | VOLUME_KEY,
        "stop": {"sagemaker:StopTrainingJob"},
        "describe": {"sagemaker:DescribeTrainingJob", "sagemaker:ListTags"},
    },
    "prod": {
        "launch": {"ec2:RunInstances", "ec2:CreateTags", "iam:PassRole"} | FLEET | VOLUME_KEY,
        "stop": {"ec2:CreateTags", "ec2:TerminateInstances"},
        "describe": {"ec2:DescribeInstances"},
    },
}


GROUP_READS = {"cognito-idp:ListUsers", "cognito-idp:AdminListGroupsForUser"}  # both stages have the dashboard


def expected_actions(stage: str, retraining: bool) -> dict[str, set[str]]:
    engine = ENGINE[stage]
    expected = {
        "api": COMMON | JOBS | KEY | IDEMPOTENCY | ARTIFACTS_RW | EXECUTIONS | TOKENS | engine["stop"] | LOGS_READ,
        "lifecycle": COMMON | JOBS | KEY | ARTIFACTS_RW | EXECUTIONS | TOKENS | engine["launch"] | engine["stop"] | engine["describe"],
        "events": COMMON
        | {"sqs:SendMessage"}
        | JOBS
        | KEY
        | {"s3:GetObject", "s3:ListBucket"}
        | EXECUTIONS
        | TOKENS
        | engine["stop"]
        | engine["describe"],
    }
    if retraining:
        expected["api"] |= SCHEDULES
        # s3: a fired job's output_path in a data area is probed by submit's path check (read-only)
        data_read = {"s3:GetObject", "s3:ListBucket"}
        expected["retraining"] = COMMON | {"sqs:SendMessage"} | data_read | JOBS | KEY | EXECUTIONS | TOKENS | engine["stop"]
    # Sweeps (the session's synth builds the controller's bundle): whoever may change a trial wakes it;
    # the controller submits trials through submit's path check too (read-only probes of data areas)
    # The event publisher: the jobs table's stream, the outbox partition (Query, BatchWriteItem), its own bus
    expected["event_publisher"] = COMMON | KEY | {"sqs:SendMessage", "events:PutEvents", "dynamodb:Query", "dynamodb:BatchWriteItem"}
    expected["event_publisher"] |= {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"}
    # Webhook delivery: the fan-out queue (consumed), the dead-letter queue, the webhook and outbox partitions
    expected["webhook_delivery"] = COMMON | KEY | {"sqs:SendMessage", "sqs:ReceiveMessage", "sqs:ChangeMessageVisibility"}
    expected["webhook_delivery"] |= {"sqs:GetQueueUrl", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}
    expected["webhook_delivery"] |= {
        f"dynamodb:{a}" for a in ("GetItem", "Query", "PutItem", "UpdateItem", "DeleteItem", "ConditionCheckItem")
    }
    for waker in ("api", "lifecycle", "events"):
        expected[waker] |= {"lambda:InvokeFunction"}
    expected["sweeps_controller"] = (
        COMMON | {"sqs:SendMessage", "s3:GetObject", "s3:ListBucket"} | JOBS | KEY | EXECUTIONS | TOKENS | engine["stop"]
    )
    # Team membership by Cognito group: whoever submits for a dashboard user reads their groups in the user pool
    for submitter in ("api", "retraining", "sweeps_controller"):
        if submitter in expected:
            expected[submitter] |= GROUP_READS
    return expected


@pytest.mark.parametrize("stage", STAGES)
def test_each_function_role_reaches_only_what_it_uses(synth: Synth, stage: str) -> None:
    # Given the four functions, each with its own role
    roles = function_roles(synth, stage)
    expected_roles = expected_actions(stage, synth.retraining)
    assert set(roles) == set(expected_roles)
    assert len(set(roles.values())) == len(roles)
    template = synth.templates[stage]
    for name, expected in expected_roles.items():
        # Then the role allows exactly the actions its function's code paths call
        assert set(role_actions(template, roles[name])) == expected, name


@pytest.mark.parametrize("stage", STAGES)
def test_function_data_access_is_scoped(synth: Synth, stage: str) -> None:
    template = synth.templates[stage]
    for name, role in function_roles(synth, stage).items():
        actions = role_actions(template, role)
        # S3: objects under jobs/ (and data/, read by submit's path checks) only, listing with a prefix condition
        for statement in actions.get("s3:GetObject", []):
            assert all(json.dumps(r).endswith(('"/jobs/*"]]}', '"/data/*"]]}')) for r in _as_list(statement["Resource"])), name
        for statement in actions.get("s3:ListBucket", []):
            assert statement["Condition"]["StringLike"]["s3:prefix"] in (["jobs/*"], ["data/*"]), name
        for action in ("s3:PutObject", "s3:DeleteObject"):
            for statement in actions.get(action, []):
                assert all(json.dumps(r).endswith('"/jobs/*"]]}') for r in _as_list(statement["Resource"])), name
        # KMS: only through DynamoDB, S3 or the engine, never directly
        for statement in actions.get("kms:Decrypt", []):
            via = json.dumps(statement["Condition"]["StringEquals"]["kms:ViaService"])
            services = set(re.findall(r'"(\w+)\.', via))
            assert services and services <= {"dynamodb", "s3", "sagemaker", "ec2"}, name
        # DynamoDB: the jobs table and its named indexes (and the idempotency table), no Scan
        assert "dynamodb:Scan" not in actions, name
        # PassRole only to the engine's or the scheduler's role, and only to that service
        for statement in actions.get("iam:PassRole", []):
            assert "iam:PassedToService" in statement["Condition"]["StringEquals"], name


def test_trainer_roles_reach_only_job_prefixes_data_and_image(synth: Synth) -> None:
    template = synth.templates["prod"]
    roles = {
        logical_id: role
        for logical_id, role in synth.resources("prod", "AWS::IAM::Role").items()
        if role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"].get("Service")
        in {"sagemaker.amazonaws.com", "ec2.amazonaws.com"}
    }
    assert len(roles) == 2
    for role_id in roles:
        actions = role_actions(template, role_id)
        writable = {json.dumps(r) for a in ("s3:PutObject", "s3:DeleteObject") for s in actions[a] for r in _as_list(s["Resource"])}
        readable = {json.dumps(r) for s in actions["s3:GetObject"] for r in _as_list(s["Resource"])}
        # Then writes go to jobs/, data/ (exports into data areas) and the read-write grant only; reads to
        # those, shared/, datasets/ and the configured data location (tests/infra/test_path_confinement_iam.py)
        assert all(w.endswith(('/jobs/*"]]}', '/data/*"]]}')) or "team-models/out/*" in w for w in writable)
        assert any("/datasets/*" in r for r in readable) and any("team-datasets/llm/*" in r for r in readable)
        layout = ("/jobs/*", "/data/*", "/shared/*", "/datasets/*", "team-datasets/llm/*", "team-models/out/*")
        assert all(any(p in r for p in layout) for r in readable)
        # And images are pulled from the configured repository and the allowed custom image repositories
        # only (custom_image_repositories: tests/infra/test_path_confinement_iam.py)
        pull = [json.dumps(r) for s in actions["ecr:BatchGetImage"] for r in _as_list(s["Resource"])]
        trainer_pulls = [r for r in pull if "repository/trainplane-trainer" in r]
        assert len(trainer_pulls) == 1 and all(r in trainer_pulls or "repository/ml-team" in r for r in pull)
        assert not {a for a in actions if a.startswith(("dynamodb:", "states:", "sagemaker:Create", "ec2:Run", "iam:"))}


# --- encryption ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
def test_tables_are_encrypted_with_the_stacks_key(synth: Synth, stage: str) -> None:
    keys = set(synth.resources(stage, "AWS::KMS::Key"))
    tables = synth.resources(stage, "AWS::DynamoDB::Table")
    assert len(tables) == 2
    for logical_id, table in tables.items():
        sse = table["Properties"]["SSESpecification"]
        assert sse["SSEEnabled"] is True and sse["SSEType"] == "KMS", logical_id
        assert resolve_ref(sse["KMSMasterKeyId"]) in keys, logical_id


@pytest.mark.parametrize("stage", STAGES)
def test_buckets_are_encrypted_and_tls_only(synth: Synth, stage: str) -> None:
    keys = set(synth.resources(stage, "AWS::KMS::Key"))
    buckets = synth.resources(stage, "AWS::S3::Bucket")
    policies = {resolve_ref(p["Properties"]["Bucket"]): p for p in synth.resources(stage, "AWS::S3::BucketPolicy").values()}
    sse_s3 = []
    for logical_id, bucket in buckets.items():
        rule = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
        if rule["SSEAlgorithm"] == "aws:kms":
            assert resolve_ref(rule["KMSMasterKeyID"]) in keys, logical_id
        else:
            sse_s3.append(logical_id)
        # TLS only: a Deny on aws:SecureTransport = false
        denies = [s for s in policies[logical_id]["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
        assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in denies), logical_id
        assert all(bucket["Properties"]["PublicAccessBlockConfiguration"].values()), logical_id
    # SSE-S3 only where KMS cannot be used: access-log buckets (S3 server access logging and CloudFront's logs
    # cannot deliver to SSE-KMS buckets) and the dashboard's public page (read by CloudFront through OAC)
    assert sse_s3 and all("AccessLogs" in b or b.startswith("DashboardAssets") for b in sse_s3), sse_s3


@pytest.mark.parametrize("stage", STAGES)
def test_queue_topic_and_volumes_are_encrypted(synth: Synth, stage: str) -> None:
    for queue in synth.resources(stage, "AWS::SQS::Queue").values():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True
    for topic in synth.resources(stage, "AWS::SNS::Topic").values():
        assert resolve_ref(topic["Properties"]["KmsMasterKeyId"]) in synth.resources(stage, "AWS::KMS::Key")
    template = next(iter(synth.resources(stage, "AWS::EC2::LaunchTemplate").values()))
    for mapping in template["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"]:
        assert mapping["Ebs"]["Encrypted"] is True and resolve_ref(mapping["Ebs"]["KmsKeyId"]) in synth.resources(stage, "AWS::KMS::Key")
    key = next(iter(synth.resources(stage, "AWS::KMS::Key").values()))
    assert key["Properties"]["EnableKeyRotation"] is True


def test_table_and_bucket_names_come_from_the_shared_constants(synth: Synth) -> None:
    names = {t["Properties"]["TableName"] for t in synth.resources("prod", "AWS::DynamoDB::Table").values()}
    assert names == {
        constants.JOBS_TABLE.replace("trainplane-", "trainplane-prod-"),
        constants.IDEMPOTENCY_TABLE.replace("trainplane-", "trainplane-prod-"),
    }
