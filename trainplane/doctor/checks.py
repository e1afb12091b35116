"""The checklist: each check asks its ports and answers one line (a mark, what it found, the fix).

Order matters only through what a check needs: the stack's outputs name the resources, GET /deployment
(the API function itself) names the engine, the images, the log group and the instance types. A check
whose input is missing is skipped with the reason (the line that failed already says why); a check
that cannot ask AWS (a denied or failed call) fails naming the error.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from schemas.deployment import FINGERPRINTED_PACKAGES, DeploymentInfo, code_fingerprint
from trainplane.doctor import quotas as quota_rules
from trainplane.doctor import statemachine
from trainplane.doctor.ports import Ports
from trainplane.doctor.report import CheckResult, Report

QUOTAS = "instance quotas (Service Quotas)"
REQUIRED_OUTPUTS = ("ApiUrl", "ArtifactsBucketName", "JobsTableName", "StateMachineArn")
SUBSCRIPTION_FILTERS_PER_GROUP = 2  # CloudWatch Logs' limit per log group; the stack needs one
DEPLOY_HINT = 'deploy the stack: `make deploy STAGE=<stage> DEPLOY_ARGS="-c account=... -c region=..."` (docs/DEPLOY.md)'


@dataclass(frozen=True)
class Target:
    """What is being checked: a cloud stack, or local mode (whose emulated AWS the ports point at)."""

    stack: str
    region: str
    local: bool = False
    filter_name: str = ""  # the stack's subscription filter on the trainer's log group
    # Instance types the team will not use (a shape it never names): their quotas are not required.
    unused_instance_types: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        return f"local mode (stack {self.stack})" if self.local else f"stack {self.stack} in {self.region}"

    @property
    def redeploy(self) -> str:
        return "restart local mode (`trainplane up`): it creates every resource again" if self.local else DEPLOY_HINT


@dataclass
class Facts:
    """What earlier checks learnt, for later ones."""

    caller: str | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    info: DeploymentInfo | None = None


def run_checks(ports: Ports, target: Target) -> Report:
    report = Report(target=target.label)
    facts = Facts()
    for check in CHECKS:
        name = CHECK_NAMES[check]
        try:
            result = check(ports, target, facts)
        except Exception as exc:  # a denied or failed AWS call: the line says which, the next check goes on
            result = CheckResult.failed(
                name, f"could not check: {type(exc).__name__}: {exc}", "let the caller make that call (or run the doctor as the deployer)"
            )
        report.checks.append(result)
    return report


def check_credentials(ports: Ports, target: Target, facts: Facts) -> CheckResult:
    try:
        facts.caller = ports.identity.caller_arn()
    except Exception as exc:
        return CheckResult.failed(
            "credentials",
            f"no usable AWS credentials: {exc}",
            "configure credentials for the account: `aws configure`, AWS_PROFILE, or `aws sso login`",
        )
    return CheckResult.ok("credentials", f"signed as {facts.caller}")


def check_outputs(ports: Ports, target: Target, facts: Facts) -> CheckResult:
    outputs = ports.stacks.outputs(target.stack)
    if outputs is None:
        return CheckResult.failed("stack outputs", f"no stack {target.stack} in {target.region}", target.redeploy)
    facts.outputs = outputs
    missing = [k for k in REQUIRED_OUTPUTS if not outputs.get(k)]
    if missing:
        return CheckResult.failed(
            "stack outputs",
            f"{target.stack} lacks {', '.join(missing)}",
            f"the stack is not trainplane's or half deployed: {target.redeploy}",
        )
    return CheckResult.ok("stack outputs", f"{len(outputs)} outputs; API {outputs['ApiUrl']}")


def check_api_permission(ports: Ports, target: Target, facts: Facts) -> CheckResult:
    name = "may call the API (IAM simulation)"
    if facts.caller is None or not facts.outputs.get("ApiUrl"):
        return CheckResult.skipped(name, "needs the caller and the stack's ApiUrl")
    resource = execute_api_arn(facts.outputs["ApiUrl"], target.region, facts.caller)
    denied = ports.simulator.denied_actions(facts.caller, ["execute-api:Invoke"], resource)
    if denied is None:
        return CheckResult.skipped(name, "local mode has no IAM policies: its front door admits endpoint.json's principals")
    if denied:
        policy = {"Effect": "Allow", "Action": "execute-api:Invoke", "Resource": resource.rsplit("/", 2)[0] + "/*/*"}
        return CheckResult.failed(name, f"{facts.caller} may not {', '.join(denied)} on {resource}", f"attach to it: {json.dumps(policy)}")
    return CheckResult.ok(name, f"execute-api:Invoke allowed on {resource}")


def execute_api_arn(api_url: str, region: str, caller: str) -> str:
    """arn:aws:execute-api:<region>:<account>:<api-id>/<stage>/GET/deployment for the stack's ApiUrl."""
    parts = urlsplit(api_url)
    api_id = parts.hostname.split(".", 1)[0] if parts.hostname else "*"
    stage = parts.path.strip("/").split("/", 1)[0] or "*"
    account = caller.split(":")[4] if caller.count(":") >= 5 else "*"
    return f"arn:aws:execute-api:{region}:{account}:{api_id}/{stage}/GET/deployment"


def check_api(ports: Ports, target: Target, facts: Facts) -> CheckResult:
    try:
        facts.info = ports.api.info()
    except Exception as exc:
        fix = "give the caller execute-api:Invoke on the API (see the line above)" if "403" in str(exc) or "Forbidden" in str(exc) else ""
        return CheckResult.failed("API answers", f"GET /deployment failed: {exc}", fix or target.redeploy)
    info = facts.info
    return CheckResult.ok("API answers", f"GET /deployment as {info.caller_arn}: compute {info.compute}, region {info.region}")


def check_table(ports: Ports, target: Target, facts: Facts) -> CheckResult:
    table = facts.outputs.get("JobsTableName")
    if not table:
        return CheckResult.skipped("jobs table", "needs the stack's JobsTableName")
    status = ports.tables.status(table)
    if status is None:
        return CheckResult.failed("jobs table", f"table {table} does not exist", target.redeploy)
    if status != "ACTIVE":
        return CheckResult.failed("jobs table", f"table {table} is {status}", "wait until it is ACTIVE, then run the doctor again")
    return CheckResult.ok("jobs table", f"{table} is ACTIVE")


def check_bucket(ports: Ports, target: Target, facts: Facts) -> CheckResult:
    bucket = facts.outputs.get("ArtifactsBucketName")
    if not bucket:
        return CheckResult.skipped("artifacts bucket", "needs the stack's ArtifactsBucketName")
    if not ports.buckets.exists(bucket):
        return CheckResult.failed("artifacts bucket", f"bucket {bucket} does not exist", target.redeploy)
    return CheckResult.ok("artifacts bucket", f"{bucket} exists")


def check_event_bus(ports: Ports, target: Target, facts: Facts) -> CheckResult:
    if facts.info is None:
        return CheckResult.skipped("event bus", "needs GET /deployment")
    bus = facts.info.event_bus_name
    if not ports.buses.exists(bus):
        return CheckResult.failed("event bus", f"event bus {bus} does not exist", target.redeploy)
    return CheckResult.ok("event bus", f"{bus} exists")


def check_state_machine(ports: Ports, target: Target, facts: Facts) -> CheckResult:
    name = "state machine"
    arn = facts.outputs.get("StateMachineArn")
    if not arn:
        return CheckResult.skipped(name, "needs the stack's StateMachineArn")
    deployed = ports.machines.definition(arn)
    if deployed is None:
        return CheckResult.failed(name, f"state machine {arn} does not exist", target.redeploy)
    path, template = statemachine.repository_definition()
    found = statemachine.differences(deployed, template)
    if found:
        return CheckResult.failed(
            name, f"{arn} differs from {path}: {'; '.join(found)}", f"deploy this version's definition: {target.redeploy}"
        )
    return CheckResult.ok(name, f"{arn.rsplit(':', 1)[-1]} runs the repository's lifecycle.asl.json")


def installed_fingerprint() -> str | None:
    dirs: list[Path] = []
    for package in FINGERPRINTED_PACKAGES:
        spec = importlib.util.find_spec(package)  # found, not run: the client may not import functions/
        if spec is None or not spec.submodule_search_locations:
            return None
        dirs.append(Path(next(iter(spec.submodule_search_locations))))
    return code_fingerprint(dirs)


def check_code_version(ports: Ports, target: Target, facts: Facts) -> CheckResult:
    name = "Lambda code version"
    if facts.info is None:
        return CheckResult.skipped(name, "needs GET /deployment")
    mine = installed_fingerprint()
    if mine is None:
        return CheckResult.skipped(name, "this trainplane is installed without the control plane's code (schemas/, functions/)")
    if mine != facts.info.code_fingerprint:
        return CheckResult.failed(
            name,
            f"the API function runs code {facts.info.code_fingerprint}, the installed trainplane is {mine}",
            f"deploy the installed version ({target.redeploy}), or install the version that was deployed",
        )
    return CheckResult.ok(name, f"the API function runs the installed code ({mine})")


def check_images(ports: Ports, target: Target, facts: Facts) -> CheckResult:
    name = "trainer image in ECR"
    if facts.info is None:
        return CheckResult.skipped(name, "needs GET /deployment")
    if not facts.info.trainer_images:
        return CheckResult.skipped(name, f"compute {facts.info.compute} runs the trainer without an image")
    if target.local:
        return CheckResult.skipped(name, f"local mode's emulated {facts.info.compute} runs the trainer as a process, from no image")
    wanted = facts.info.image_platforms
    problems: list[str] = []
    unread: list[str] = []
    for uri in facts.info.trainer_images:
        offered = ports.images.platforms(uri)
        if offered is None:
            problems.append(f"{uri} is not in ECR")
        elif "unknown" in offered:
            unread.append(uri)  # there, but its platform could not be read (no ecr:GetDownloadUrlForLayer)
        elif lacking := [p for p in wanted if p not in offered]:
            problems.append(f"{uri} offers {', '.join(offered) or 'no platform'}, not {', '.join(lacking)}")
    if problems:
        fix = (
            "push it for " + ", ".join(wanted) + ": `make deploy` builds and pushes the trainer image "
            "(Docker running), or `docker buildx build --platform " + ",".join(wanted) + " -f trainer_image/Dockerfile -t <uri> --push .`"
        )
        return CheckResult.failed(name, "; ".join(problems), fix)
    note = f" ({len(unread)} there, platform not readable)" if unread else ""
    return CheckResult.ok(name, f"{len(facts.info.trainer_images)} image(s) for {', '.join(wanted)}{note}")


def check_log_group(ports: Ports, target: Target, facts: Facts) -> CheckResult:
    name = "trainer reports' log group"
    if facts.info is not None and facts.info.trainer_log_group is None:
        return CheckResult.skipped(name, f"compute {facts.info.compute} delivers the trainer's reports without CloudWatch Logs")
    if facts.info is None and target.local:
        return CheckResult.skipped(name, "needs GET /deployment")
    # Before a first deploy (no API yet) the default engine's group: SageMaker's, which the stack does not create.
    group = (facts.info.trainer_log_group if facts.info is not None else None) or "/aws/sagemaker/TrainingJobs"
    filters = ports.logs.subscription_filters(group)
    if filters is None:
        return CheckResult.failed(
            name, f"{group} does not exist", f"create it once per account and region: `aws logs create-log-group --log-group-name {group}`"
        )
    if target.filter_name in filters:
        return CheckResult.ok(name, f"{group} carries this stack's filter {target.filter_name}")
    if len(filters) >= SUBSCRIPTION_FILTERS_PER_GROUP:
        return CheckResult.failed(
            name,
            f"{group} has no free subscription-filter slot (taken by {', '.join(filters)}) and lacks {target.filter_name}",
            f"delete one: `aws logs delete-subscription-filter --log-group-name {group} --filter-name <name>`, then deploy",
        )
    if facts.info is None:
        return CheckResult.ok(name, f"{group} has a free subscription-filter slot for the deploy ({len(filters)} of 2 used)")
    return CheckResult.failed(
        name, f"{group} lacks this stack's filter {target.filter_name} ({len(filters)} of 2 slots used)", target.redeploy
    )


def check_quotas(ports: Ports, target: Target, facts: Facts) -> CheckResult:
    name = QUOTAS
    if facts.info is None:
        return CheckResult.skipped(name, "needs GET /deployment")
    if not facts.info.instance_types:
        return CheckResult.skipped(name, f"compute {facts.info.compute} launches no cloud instances")
    if target.local:
        return CheckResult.skipped(name, "local mode has no Service Quotas: its emulated compute has no instance limits")
    unused = {t.removeprefix("ml.") for t in target.unused_instance_types}
    uses = [u for u in facts.info.instance_types if u.instance_type.removeprefix("ml.") not in unused]
    if not uses:
        return CheckResult.skipped(name, "every instance type was declared unused")
    needs = quota_rules.needs(uses)
    by_service = {need.service_code: ports.quotas.quotas(need.service_code) for need in needs}
    short: list[str] = []
    commands: list[str] = []
    for need in needs:
        quota = quota_rules.find(by_service[need.service_code], need)
        value = quota.value if quota is not None else 0.0
        if value < need.amount:
            short.append(f"{need.quota_name} = {value:g} (needs {need.amount} {need.unit}: {', '.join(need.used_by)})")
            commands.append(quota_rules.increase_command(need, quota, target.region))
    if short:
        zero = sum(1 for s in short if " = 0 " in s)
        return CheckResult.failed(
            name,
            f"{len(short)} of {len(needs)} too low ({zero} at 0): " + "; ".join(short),
            "request increases (or, for a type the team will not use, --unused-instance-type TYPE): " + " ; ".join(commands),
        )
    left_out = f" ({len(facts.info.instance_types) - len(uses)} declared unused)" if len(uses) < len(facts.info.instance_types) else ""
    return CheckResult.ok(name, f"{len(needs)} quotas cover every instance type the defaults and shapes use{left_out}")


def check_dashboard(ports: Ports, target: Target, facts: Facts) -> CheckResult:
    name = "dashboard (Cognito, CloudFront)"
    pool, distribution = facts.outputs.get("DashboardUserPoolId"), facts.outputs.get("DashboardDistributionId")
    if not pool and not distribution:
        return CheckResult.skipped(name, "no dashboard deployed" if facts.outputs else "needs the stack's outputs")
    problems: list[str] = []
    if pool and not ports.dashboards.user_pool_exists(pool):
        problems.append(f"user pool {pool} does not exist")
    if distribution:
        status = ports.dashboards.distribution_status(distribution)
        if status is None:
            problems.append(f"distribution {distribution} does not exist")
        elif status != "Deployed":
            problems.append(f"distribution {distribution} is {status}")
    if problems:
        return CheckResult.failed(name, "; ".join(problems), f"a distribution InProgress needs minutes; otherwise {target.redeploy}")
    return CheckResult.ok(name, f"user pool {pool} and distribution {distribution} deployed")


Check = Callable[[Ports, Target, Facts], CheckResult]
CHECKS: list[Check] = [
    check_credentials,
    check_outputs,
    check_api_permission,
    check_api,
    check_table,
    check_bucket,
    check_event_bus,
    check_state_machine,
    check_code_version,
    check_images,
    check_log_group,
    check_quotas,
    check_dashboard,
]
CHECK_NAMES: dict[Check, str] = {
    check_credentials: "credentials",
    check_outputs: "stack outputs",
    check_api_permission: "may call the API (IAM simulation)",
    check_api: "API answers",
    check_table: "jobs table",
    check_bucket: "artifacts bucket",
    check_event_bus: "event bus",
    check_state_machine: "state machine",
    check_code_version: "Lambda code version",
    check_images: "trainer image in ECR",
    check_log_group: "trainer reports' log group",
    check_quotas: QUOTAS,
    check_dashboard: "dashboard (Cognito, CloudFront)",
}
