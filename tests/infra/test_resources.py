"""What the stacks contain: API, functions, tables, buckets, compute, events, retraining, alarms, outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from functions import constants
from functions.settings import PREFIX, Settings
from tests.infra.conftest import DEV_BASE_IMAGE, PROD_ACCOUNT, Synth, resolve_ref
from tests.infra.test_checks import function_roles, role_actions

pytestmark = pytest.mark.infra

STAGES = ("dev", "prod")
CORE_HANDLERS = {
    "functions.handlers.api.lambda_handler",
    "functions.handlers.lifecycle.handler",
    "functions.handlers.events.lambda_handler",
    "functions.handlers.event_publisher.lambda_handler",
    "functions.handlers.webhook_delivery.lambda_handler",
}
RETRAINING_HANDLER = "functions.handlers.retraining.lambda_handler"
SWEEPS_HANDLER = "functions.handlers.sweeps_controller.handler"  # the session's synth builds its bundle


def handlers(synth: Synth) -> set[str]:
    return CORE_HANDLERS | {SWEEPS_HANDLER} | ({RETRAINING_HANDLER} if synth.retraining else set())


def _one(synth: Synth, stage: str, kind: str) -> dict[str, Any]:
    found = list(synth.resources(stage, kind).values())
    assert len(found) == 1, kind
    return found[0]["Properties"]


def _paths(synth: Synth, stage: str) -> dict[str, str]:
    """API resource logical id -> its full path."""
    resources = synth.resources(stage, "AWS::ApiGateway::Resource")
    api_id = next(iter(synth.resources(stage, "AWS::ApiGateway::RestApi")))

    def path(logical_id: str) -> str:
        props = resources[logical_id]["Properties"]
        parent = resolve_ref(props["ParentId"])
        prefix = "" if parent == api_id else path(parent)
        return f"{prefix}/{props['PathPart']}"

    return {logical_id: path(logical_id) for logical_id in resources}


def _methods(synth: Synth, stage: str) -> list[tuple[str, str, dict[str, Any]]]:
    paths = _paths(synth, stage)
    found = []
    for method in synth.resources(stage, "AWS::ApiGateway::Method").values():
        props = method["Properties"]
        found.append((paths.get(resolve_ref(props["ResourceId"]) or "", "/"), props["HttpMethod"], props))
    return found


# --- API -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
def test_every_api_method_requires_aws_iam(synth: Synth, stage: str) -> None:
    methods = _methods(synth, stage)
    assert methods
    for path, verb, props in methods:
        if verb == "OPTIONS":
            # Only CORS preflights (for the dashboard's origin) go unsigned: browsers cannot sign them, and the
            # gateway answers them itself.
            assert props["Integration"]["Type"] == "MOCK", path
            continue
        assert props["AuthorizationType"] == "AWS_IAM", f"{verb} {path}"
        assert props["Integration"]["Type"] == "AWS_PROXY", f"{verb} {path}"


def test_api_routes_are_the_openapi_documents(synth: Synth) -> None:
    from infra.constructs.api import load_routes

    # Given the operations of schemas/openapi.json
    expected = {(r.path, r.method) for r in load_routes()}
    # Then the API has exactly those methods (plus preflights), none missing, none extra, and on each
    # path an ANY that brings the methods it lacks to the handler (405 with Allow, not the gateway's 403)
    expected |= {(r.path, "ANY") for r in load_routes()}
    routed = {(path, verb) for path, verb, _ in _methods(synth, "dev") if verb != "OPTIONS"}
    assert routed == expected
    assert {(p, v) for p, v, _ in _methods(synth, "prod") if v != "OPTIONS"} == expected


def test_api_validates_requests(synth: Synth) -> None:
    from infra.constructs.api import load_routes

    validator = next(iter(synth.resources("dev", "AWS::ApiGateway::RequestValidator")))
    props = synth.resources("dev", "AWS::ApiGateway::RequestValidator")[validator]["Properties"]
    assert props["ValidateRequestBody"] is True and props["ValidateRequestParameters"] is True
    routes = {(r.path, r.method): r for r in load_routes()}
    for path, verb, method in _methods(synth, "dev"):
        if verb == "OPTIONS":
            continue  # CORS preflights, answered by the gateway
        if verb == "ANY":
            assert "RequestModels" not in method  # only answered 405 by the handler
            continue
        route = routes[(path, verb)]
        assert resolve_ref(method["RequestValidatorId"]) == validator
        assert method.get("RequestParameters", {}) == route.parameters
        # A required body must at least be a JSON object; field-level checks stay in the handler
        assert ("RequestModels" in method) == route.body_required
    model = _one(synth, "dev", "AWS::ApiGateway::Model")
    assert model["Schema"]["type"] == "object"


@pytest.mark.parametrize("stage", STAGES)
def test_api_stage_logs_traces_and_throttles(synth: Synth, stage: str) -> None:
    props = _one(synth, stage, "AWS::ApiGateway::Stage")
    access = props["AccessLogSetting"]
    assert resolve_ref(access["DestinationArn"]) in synth.resources(stage, "AWS::Logs::LogGroup")
    assert {"requestId", "status", "userArn", "caller"} <= set(json.loads(access["Format"]))
    assert props["TracingEnabled"] is True
    settings = props["MethodSettings"][0]
    assert settings["LoggingLevel"] == "ERROR" and settings["DataTraceEnabled"] is False
    assert settings["ThrottlingRateLimit"] > 0 and settings["ThrottlingBurstLimit"] > 0
    # The account-level logging role API Gateway needs for execution logs is in the stack
    account = _one(synth, stage, "AWS::ApiGateway::Account")
    assert resolve_ref(account["CloudWatchRoleArn"]) in synth.resources(stage, "AWS::IAM::Role")


def test_resource_policy_restricts_callers_when_configured(synth: Synth) -> None:
    # Given dev (no restriction) and prod (an extra account and an organization)
    assert "Policy" not in _one(synth, "dev", "AWS::ApiGateway::RestApi")
    statements = _one(synth, "prod", "AWS::ApiGateway::RestApi")["Policy"]["Statement"]
    deny = next(s for s in statements if s["Effect"] == "Deny")
    # Then everyone else is denied: callers outside both the listed accounts and the organization
    condition = deny["Condition"]["StringNotEquals"]
    assert sorted(condition["aws:PrincipalAccount"]) == sorted([PROD_ACCOUNT, "444455556666"])
    assert condition["aws:PrincipalOrgID"] == "o-abcdefghij"
    assert deny["Action"] == "execute-api:Invoke"


def test_cors_for_the_configured_origin(synth: Synth) -> None:
    # dev allows its own dashboard distribution's origin (tests/infra/test_dashboard_stack.py); prod names one
    preflights = [m for m in _methods(synth, "prod") if m[1] == "OPTIONS"]
    assert preflights
    headers = preflights[0][2]["Integration"]["IntegrationResponses"][0]["ResponseParameters"]
    assert headers["method.response.header.Access-Control-Allow-Origin"] == "'https://dashboard.example.com'"
    assert "X-Amz-Date" in headers["method.response.header.Access-Control-Allow-Headers"]
    # Errors answered by the gateway carry the origin too, or a browser would hide them
    responses = synth.resources("prod", "AWS::ApiGateway::GatewayResponse").values()
    assert all(r["Properties"]["ResponseParameters"]["gatewayresponse.header.Access-Control-Allow-Origin"] for r in responses)


def test_waf_when_configured(synth: Synth) -> None:
    assert not synth.resources("dev", "AWS::WAFv2::WebACLAssociation")
    association = _one(synth, "prod", "AWS::WAFv2::WebACLAssociation")
    assert association["WebACLArn"].startswith("arn:aws:wafv2:eu-west-1:")


# --- functions -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
def test_functions_run_python_312_on_arm64_traced_with_powertools(synth: Synth, stage: str) -> None:
    functions = synth.resources(stage, "AWS::Lambda::Function")
    assert {f["Properties"]["Handler"] for f in functions.values()} == handlers(synth)
    for logical_id, function in functions.items():
        props = function["Properties"]
        assert props["Runtime"] == "python3.12" and props["Architectures"] == ["arm64"], logical_id
        assert props["TracingConfig"] == {"Mode": "Active"}, logical_id
        env = props["Environment"]["Variables"]
        assert env["POWERTOOLS_SERVICE_NAME"] == constants.SERVICE_NAME
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == constants.METRICS_NAMESPACE
        assert env["POWERTOOLS_LOG_LEVEL"] == "INFO"
        assert env["PYDANTIC_DISABLE_PLUGINS"] == "__all__"  # no plugin scan at a cold start (docs/BENCHMARKS.md)
        # Each function writes to its own log group with a retention
        assert resolve_ref(props["LoggingConfig"]["LogGroup"]) in synth.resources(stage, "AWS::Logs::LogGroup")


@pytest.mark.parametrize("stage", STAGES)
def test_function_settings_are_fields_settings_reads(synth: Synth, stage: str) -> None:
    for function in synth.resources(stage, "AWS::Lambda::Function").values():
        env = function["Properties"]["Environment"]["Variables"]
        ours = {k: v for k, v in env.items() if k.startswith(PREFIX)}
        # Every TRAINPLANE_* variable is a Settings field (a typo would silently leave a default) ...
        assert {k.removeprefix(PREFIX).lower() for k in ours} <= set(Settings.model_fields)
        # ... and Settings accepts them (tokens stand for strings resolved at deploy time)
        settings = Settings.from_env({k: v if isinstance(v, str) else "resolved-at-deploy" for k, v in ours.items()})
        assert settings.compute == ("sagemaker" if stage == "dev" else "ec2")
        for required in ("jobs_table", "idempotency_table", "artifacts_bucket", "state_machine_arn", "trainer_image_uri", "kms_key_id"):
            assert PREFIX + required.upper() in ours, required
    prod_env = next(iter(synth.resources("prod", "AWS::Lambda::Function").values()))["Properties"]["Environment"]["Variables"]
    assert prod_env[PREFIX + "ADMIN_ARNS"] == "arn:aws:iam::111122223333:role/platform-admin"
    assert prod_env[PREFIX + "VPC_SUBNET_IDS"] == "subnet-0123456789abcdef0,subnet-0fedcba9876543210"
    assert prod_env[PREFIX + "GPU_QUOTAS"] == "default:H100=16, research:*=8"
    assert prod_env[PREFIX + "CORS_ORIGIN"] == "https://dashboard.example.com"
    # The retraining pieces the API needs to create schedules: this stack's group, role and dispatcher
    if synth.retraining:
        assert prod_env[PREFIX + "RETRAINING_SCHEDULE_GROUP"] == _one(synth, "prod", "AWS::Scheduler::ScheduleGroup")["Name"]
        assert resolve_ref(prod_env[PREFIX + "RETRAINING_SCHEDULER_ROLE_ARN"]) in synth.resources("prod", "AWS::IAM::Role")
        dispatcher = next(
            f for f in synth.resources("prod", "AWS::Lambda::Function").values() if f["Properties"]["Handler"] == RETRAINING_HANDLER
        )
        name = dispatcher["Properties"]["FunctionName"]
        assert prod_env[PREFIX + "RETRAINING_FUNCTION_ARN"] == f"arn:aws:lambda:eu-west-1:{PROD_ACCOUNT}:function:{name}"
    else:
        assert not {k for k in prod_env if k.startswith(PREFIX + "RETRAINING_")}


@pytest.mark.parametrize("stage", STAGES)
def test_every_function_handler_is_defined_in_the_bundle(synth: Synth, stage: str) -> None:
    from infra.constructs.function import FunctionSpec

    for function in synth.resources(stage, "AWS::Lambda::Function").values():
        handler = function["Properties"]["Handler"]
        assert FunctionSpec("x", handler, "").defined_in(synth.bundle.path), handler


def test_handler_check_reads_definitions(tmp_path: Path) -> None:
    from infra.constructs.function import FunctionSpec

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("import x\n\n@decorate\ndef lambda_handler(e, c):\n    pass\n\nalias = lambda_handler\n")
    assert FunctionSpec("x", "pkg.mod.lambda_handler", "").defined_in(tmp_path)
    assert FunctionSpec("x", "pkg.mod.alias", "").defined_in(tmp_path)
    assert not FunctionSpec("x", "pkg.mod.handler", "").defined_in(tmp_path)
    assert not FunctionSpec("x", "pkg.other.lambda_handler", "").defined_in(tmp_path)


def test_functions_have_bounded_concurrency_in_prod(synth: Synth) -> None:
    reserved = {
        f["Properties"]["Handler"].split(".")[2]: f["Properties"].get("ReservedConcurrentExecutions")
        for f in synth.resources("prod", "AWS::Lambda::Function").values()
    }
    assert reserved == {
        "api": 50,
        "lifecycle": 20,
        "events": 10,
        "event_publisher": 5,
        "webhook_delivery": 5,
        "sweeps_controller": 5,
        **({"retraining": 5} if synth.retraining else {}),
    }


@pytest.mark.parametrize("stage", STAGES)
def test_functions_share_the_locally_built_bundle(synth: Synth, stage: str) -> None:
    # Given the functions' code: one asset for all but the sweep controller (Optuna: a bundle of its own)
    functions = synth.resources(stage, "AWS::Lambda::Function").values()
    keys = {json.dumps(f["Properties"]["Code"]["S3Key"]) for f in functions if f["Properties"]["Handler"] != SWEEPS_HANDLER}
    assert len(keys) == 1
    manifest = json.loads((synth.outdir / f"Trainplane-{stage}.assets.json").read_text())
    zips = [a for a in manifest["files"].values() if a["source"].get("packaging") == "zip"]
    assert len(zips) == 2
    # The API's bundle has no Optuna; the controller's is the other one
    (asset,) = [a for a in zips if not (synth.outdir / a["source"]["path"] / "optuna").exists()]
    staged = synth.outdir / asset["source"]["path"]
    # Then it is the bundle infra/bundling.py built: the handlers' packages beside the locked dependencies
    assert (staged / "functions" / "handlers" / "lifecycle.py").exists() and (staged / "schemas" / "job.py").exists()
    assert (staged / "pydantic_core").is_dir() and (staged / "aws_lambda_powertools").is_dir()
    assert sorted(p.name for p in staged.iterdir()) == sorted(p.name for p in synth.bundle.path.iterdir())


# --- storage -------------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
def test_tables_on_demand_with_pitr_and_protection_outside_dev(synth: Synth, stage: str) -> None:
    tables = {t["Properties"]["TableName"].split("-", 2)[2]: t for t in synth.resources(stage, "AWS::DynamoDB::Table").values()}
    for name, table in tables.items():
        props = table["Properties"]
        assert props["BillingMode"] == "PAY_PER_REQUEST", name
        assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True, name
        assert props["DeletionProtectionEnabled"] is (stage != "dev"), name
        assert table["DeletionPolicy"] == ("Delete" if stage == "dev" else "Retain"), name
    jobs = tables["jobs"]["Properties"]
    assert {k["AttributeName"]: k["KeyType"] for k in jobs["KeySchema"]} == {constants.PK: "HASH", constants.SK: "RANGE"}
    indexes = {i["IndexName"]: {k["AttributeName"] for k in i["KeySchema"]} for i in jobs["GlobalSecondaryIndexes"]}
    assert indexes == {name: set(keys) for name, keys in constants.GSIS.items()}
    idempotency = tables["idempotency"]["Properties"]
    assert idempotency["TimeToLiveSpecification"] == {"AttributeName": constants.IDEMPOTENCY_TTL_ATTR, "Enabled": True}


@pytest.mark.parametrize("stage", STAGES)
def test_artifacts_bucket_versioned_with_lifecycle_and_events(synth: Synth, stage: str) -> None:
    bucket = next(b for k, b in synth.resources(stage, "AWS::S3::Bucket").items() if "Artifacts" in k)
    props = bucket["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    rules = {r["Id"]: r for r in props["LifecycleConfiguration"]["Rules"]}
    assert rules["abort-incomplete-uploads"]["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] == 7
    assert rules["expire-old-versions"]["NoncurrentVersionExpiration"]["NoncurrentDays"] >= 1
    assert props["NotificationConfiguration"]["EventBridgeConfiguration"]["EventBridgeEnabled"] is True
    assert "DestinationBucketName" in props["LoggingConfiguration"]
    # Checkpoints and models outlive the stack, in every stage, and so does the key they are encrypted with
    assert all(b["DeletionPolicy"] == "Retain" for b in synth.resources(stage, "AWS::S3::Bucket").values())
    assert all(k["DeletionPolicy"] == "Retain" for k in synth.resources(stage, "AWS::KMS::Key").values())


# --- compute -------------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
def test_launch_template_gpu_dlami_imdsv2_and_self_terminating(synth: Synth, stage: str) -> None:
    template = _one(synth, stage, "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]
    image = resolve_ref(template["ImageId"])
    parameter = synth.templates[stage]["Parameters"][image]
    assert parameter["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
    assert parameter["Default"].startswith("/aws/service/deeplearning/ami/x86_64/") and "gpu" in parameter["Default"]
    metadata = template["MetadataOptions"]
    assert (
        metadata["HttpTokens"] == "required" and metadata["HttpPutResponseHopLimit"] == 2 and metadata["InstanceMetadataTags"] == "enabled"
    )
    assert template["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert template["BlockDeviceMappings"][0]["DeviceName"] == Settings().ec2_root_device_name
    profile = resolve_ref(template["IamInstanceProfile"]["Arn"])
    assert synth.templates[stage]["Resources"][profile]["Type"] == "AWS::IAM::InstanceProfile"


@pytest.mark.parametrize("stage", STAGES)
def test_multi_node_jobs_launch_into_a_cluster_placement_group_the_launcher_may_use(synth: Synth, stage: str) -> None:
    # Given the stack's one placement group
    groups = synth.resources(stage, "AWS::EC2::PlacementGroup")
    assert len(groups) == 1
    group_id, group = next(iter(groups.items()))
    # Then it packs the nodes (cluster), and the functions are told its name (settings.ec2_placement_group)
    assert group["Properties"]["Strategy"] == "cluster"
    for function in synth.resources(stage, "AWS::Lambda::Function").values():
        assert function["Properties"]["Environment"]["Variables"]["TRAINPLANE_EC2_PLACEMENT_GROUP"] == {"Ref": group_id}
    # And every role that may RunInstances may place instances in it
    template = synth.templates[stage]
    launchers = [r for r in function_roles(synth, stage).values() if "ec2:RunInstances" in role_actions(template, r)]
    assert launchers or stage == "dev"  # prod runs on EC2 (tests/infra/conftest.py), dev on SageMaker
    for role in launchers:
        statements = role_actions(template, role)["ec2:RunInstances"]
        assert any(group_id in json.dumps(st["Resource"]) and "placement-group/" in json.dumps(st["Resource"]) for st in statements)


def test_prod_vpc_security_group_admits_only_its_own_nodes(synth: Synth) -> None:
    group_id = next(iter(synth.resources("prod", "AWS::EC2::SecurityGroup")))
    group = synth.resources("prod", "AWS::EC2::SecurityGroup")[group_id]["Properties"]
    assert group["VpcId"] == "vpc-0123456789abcdef0" and "SecurityGroupIngress" not in group
    ingress = _one(synth, "prod", "AWS::EC2::SecurityGroupIngress")
    assert resolve_ref(ingress["SourceSecurityGroupId"]) == group_id == resolve_ref(ingress["GroupId"])
    assert not synth.resources("dev", "AWS::EC2::SecurityGroup")


def test_trainer_image_is_built_from_trainer_image_with_schemas_in_context(synth: Synth) -> None:
    from infra.constructs.compute import TRAINER_DOCKERFILE

    # Given the dev stack, which builds the image at deploy time (prod names a prebuilt one)
    manifest = json.loads((synth.outdir / "Trainplane-dev.assets.json").read_text())
    (image,) = manifest["dockerImages"].values()
    source = image["source"]
    assert source["dockerFile"] == TRAINER_DOCKERFILE
    assert source["platform"] == "linux/amd64"
    # Then the staged build context holds the trainer and schemas/, and nothing heavy
    context = synth.outdir / source["directory"]
    staged = {p.name for p in context.iterdir()}
    assert {"trainer_image", "schemas"} <= staged
    assert not staged & {".venv", "cdk.out", ".git", "functions", "tests", "trainplane"}
    assert (context / TRAINER_DOCKERFILE).exists()
    # And the stage config's base image reaches the Dockerfile as build arguments it declares
    assert image["source"]["dockerBuildArgs"] == {"BASE_IMAGE": DEV_BASE_IMAGE, "TORCH_VERSION": "2.13.0"}
    # prod names a prebuilt image instead
    outputs = synth.templates["prod"]["Outputs"]
    assert outputs["TrainerImageUri"]["Value"] == "111122223333.dkr.ecr.eu-west-1.amazonaws.com/trainplane-trainer:1.0"


def test_the_dockerfile_needs_nothing_outside_the_build_context() -> None:
    import dockerfile

    from infra.constructs.compute import REPO_ROOT, TRAINER_BUILD_CONTEXT, TRAINER_DOCKERFILE

    commands = dockerfile.parse_file(str(REPO_ROOT / TRAINER_DOCKERFILE))
    # Given every COPY/ADD source of the trainer's Dockerfile (all but the last value are sources)
    sources = [
        src for c in commands if c.cmd in {"COPY", "ADD"} and not any(f.startswith("--from") for f in c.flags) for src in c.value[:-1]
    ]
    assert sources
    # Then each lies inside the paths the stack sends as the build context
    for source in sources:
        assert source.split("/")[0] in TRAINER_BUILD_CONTEXT, source
        assert (REPO_ROOT / source).exists(), source
    # And the build arguments the stack may pass are ARGs the Dockerfile declares
    declared = {c.value[0].split("=")[0] for c in commands if c.cmd == "ARG"}
    assert {"BASE_IMAGE", "TORCH_VERSION"} <= declared


# --- events and retraining -----------------------------------------------------------------------


def _rules(synth: Synth, stage: str) -> dict[str, dict[str, Any]]:
    return {k: r["Properties"] for k, r in synth.resources(stage, "AWS::Events::Rule").items()}


@pytest.mark.parametrize("stage", STAGES)
def test_engine_events_reach_the_events_function_with_a_dead_letter_queue(synth: Synth, stage: str) -> None:
    functions = {f["Properties"]["Handler"]: k for k, f in synth.resources(stage, "AWS::Lambda::Function").items()}
    events_fn = functions["functions.handlers.events.lambda_handler"]
    # the dead-letter queue (the webhooks' fan-out queue is the other, and redrives into it)
    (dlq,) = [k for k, q in synth.resources(stage, "AWS::SQS::Queue").items() if "RedrivePolicy" not in q["Properties"]]
    patterns = []
    for props in _rules(synth, stage).values():
        for target in props["Targets"]:
            if resolve_ref(target["Arn"]) != events_fn:
                continue
            patterns.append(props.get("EventPattern") or props.get("ScheduleExpression"))
            assert resolve_ref(target["DeadLetterConfig"]["Arn"]) == dlq
            assert target["RetryPolicy"]["MaximumRetryAttempts"] > 0
    detail_types = {t for p in patterns if isinstance(p, dict) for t in p["detail-type"]}
    assert detail_types == {
        "SageMaker Training Job State Change",
        "EC2 Instance State-change Notification",
        "EC2 Spot Instance Interruption Warning",
    }
    assert any(isinstance(p, str) and p.startswith("rate(") for p in patterns)  # the reconciler's tick
    # And asynchronous invocations that fail end in the same queue
    function = synth.templates[stage]["Resources"][events_fn]["Properties"]
    assert resolve_ref(function["DeadLetterConfig"]["TargetArn"]) == dlq


@pytest.mark.parametrize("stage", STAGES)
def test_retraining_triggers_and_scheduler(synth: Synth, stage: str) -> None:
    outputs = synth.templates[stage]["Outputs"]
    if not synth.retraining:
        # Without its dispatcher (issue 7) the stack deploys no retraining at all, and says so
        assert outputs["RetrainingStatus"]["Value"].startswith("not deployed")
        assert not synth.resources(stage, "AWS::Scheduler::ScheduleGroup")
        assert all("aws.s3" not in json.dumps(r.get("EventPattern", {})) for r in _rules(synth, stage).values())
        return
    assert outputs["RetrainingStatus"]["Value"] == "deployed"
    functions = {f["Properties"]["Handler"]: k for k, f in synth.resources(stage, "AWS::Lambda::Function").items()}
    dispatcher = functions[RETRAINING_HANDLER]
    patterns = [p["EventPattern"] for p in _rules(synth, stage).values() if any(resolve_ref(t["Arn"]) == dispatcher for t in p["Targets"])]
    sources = {s for p in patterns for s in p["source"]}
    assert sources == {"aws.s3", "aws.cloudwatch", "trainplane.retraining"}
    # The artifacts bucket triggers only from datasets/ (checkpoints would fire all day) ...
    datasets = next(p for p in patterns if p.get("detail", {}).get("object"))
    assert datasets["detail"]["object"]["key"] == [{"prefix": "datasets/"}]
    # ... the one prefix (functions/constants.py) the trainer roles may read and the dispatcher's route matching assumes
    from functions import constants

    assert constants.DATASETS_PREFIX == "datasets/"
    group = _one(synth, stage, "AWS::Scheduler::ScheduleGroup")
    assert group["Name"] == f"trainplane-{stage}-retraining"
    scheduler_role = next(
        r
        for r in synth.resources(stage, "AWS::IAM::Role").values()
        if r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"].get("Service") == "scheduler.amazonaws.com"
    )
    assert scheduler_role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"]["aws:SourceAccount"]


# --- observability and outputs -------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
def test_alarms_notify_and_dashboard_exists(synth: Synth, stage: str) -> None:
    alarms = [a["Properties"] for a in synth.resources(stage, "AWS::CloudWatch::Alarm").values()]
    metrics = {(a["Namespace"], a["MetricName"]) for a in alarms}
    assert {
        ("AWS/States", "ExecutionsFailed"),
        ("AWS/SQS", "ApproximateNumberOfMessagesVisible"),
        ("AWS/ApiGateway", "5XXError"),
    } <= metrics
    functions = synth.resources(stage, "AWS::Lambda::Function")
    assert sum(1 for a in alarms if a["Namespace"] == "AWS/Lambda" and a["MetricName"] == "Errors") == len(functions)
    (topic,) = synth.resources(stage, "AWS::SNS::Topic")
    assert all(resolve_ref(a["AlarmActions"][0]) == topic for a in alarms)
    assert _one(synth, stage, "AWS::CloudWatch::Dashboard")["DashboardName"] == f"trainplane-{stage}-control-plane"
    subscriptions = synth.resources(stage, "AWS::SNS::Subscription")
    assert len(subscriptions) == (1 if stage == "prod" else 0)


@pytest.mark.parametrize("stage", STAGES)
def test_state_machine_logs_all_and_traces(synth: Synth, stage: str) -> None:
    props = _one(synth, stage, "AWS::StepFunctions::StateMachine")
    assert props["StateMachineName"] == f"trainplane-{stage}-lifecycle"
    assert props["LoggingConfiguration"]["Level"] == "ALL" and props["LoggingConfiguration"]["IncludeExecutionData"] is True
    assert props["TracingConfiguration"] == {"Enabled": True}
    # The functions' settings carry the ARN built from the same name
    env = next(iter(synth.resources(stage, "AWS::Lambda::Function").values()))["Properties"]["Environment"]["Variables"]
    assert f"stateMachine:trainplane-{stage}-lifecycle" in json.dumps(env[PREFIX + "STATE_MACHINE_ARN"])


@pytest.mark.parametrize("stage", STAGES)
def test_outputs(synth: Synth, stage: str) -> None:
    outputs = synth.templates[stage]["Outputs"]
    assert {"ApiUrl", "ArtifactsBucketName", "JobsTableName", "TrainerImageUri", "StateMachineArn"} <= set(outputs)


@pytest.mark.parametrize("stage", STAGES)
def test_trainer_reports_reach_the_events_function_through_a_log_subscription(synth: Synth, stage: str) -> None:
    functions = {f["Properties"]["Handler"]: k for k, f in synth.resources(stage, "AWS::Lambda::Function").items()}
    events_fn = functions["functions.handlers.events.lambda_handler"]
    # One subscription filter: the TRAINPLANE_EVENT lines of the engine's trainer log group -> the events function
    (subscription,) = synth.resources(stage, "AWS::Logs::SubscriptionFilter").values()
    props = subscription["Properties"]
    assert props["FilterPattern"] == constants.TRAINER_REPORTS_FILTER_PATTERN == '"TRAINPLANE_EVENT"'
    assert resolve_ref(props["DestinationArn"]) == events_fn
    assert props["FilterName"] == f"trainplane-{stage}-trainer-reports"
    if stage == "dev":  # compute sagemaker: SageMaker's own group
        group_ref = None
        assert props["LogGroupName"] == "/aws/sagemaker/TrainingJobs"
    else:  # compute ec2: the stack's trainer group, where the user data's awslogs driver writes
        group_ref = resolve_ref(props["LogGroupName"])
        assert synth.templates[stage]["Resources"][group_ref]["Properties"]["LogGroupName"] == "/trainplane/prod/trainer"
    # Least privilege: CloudWatch Logs may invoke the function, from that group only (its ARN), nothing else
    permissions = [
        p["Properties"]
        for p in synth.resources(stage, "AWS::Lambda::Permission").values()
        if p["Properties"]["Principal"] == "logs.amazonaws.com"
    ]
    assert len(permissions) == 1
    (permission,) = permissions
    assert permission["Action"] == "lambda:InvokeFunction" and resolve_ref(permission["FunctionName"]) == events_fn
    source = json.dumps(permission["SourceArn"])
    if group_ref is None:
        assert "log-group:/aws/sagemaker/TrainingJobs:*" in source
    else:
        assert resolve_ref(permission["SourceArn"]) == group_ref
    # The subscription is created after the permission exists (else CloudWatch Logs refuses it)
    permission_ids = [k for k, p in synth.resources(stage, "AWS::Lambda::Permission").items() if p["Properties"] is permission]
    assert set(permission_ids) <= set(subscription.get("DependsOn", []))
