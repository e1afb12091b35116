"""`make iam-check`: every AWS call recorded during the test suite, evaluated against the synthesized stack.

    python scripts/iam_check.py [--calls build/iam/calls.jsonl] [--template-sagemaker T] [--template-ec2 T]

The calls come from localmode/iam_calls.py (one JSON line per call, with its caller: a Lambda function,
the state machine, the scheduler). The policies come from the stack `infra/app.py` synthesizes (the dev
stage, once per engine: a call made under `--compute ec2`, or an EC2 call, is checked against the EC2
stage's template, every other against the SageMaker one). Each caller maps to its role in the template
(a Lambda function by its Handler, the state machine by its RoleArn, the others by construct id); the
role's policies (AWS::IAM::Policy, inline Policies) are resolved (Ref, Fn::GetAtt, Fn::Join, Fn::Sub)
with the deployment's account and region, and each call is evaluated by @cloud-copilot/iam-simulate
(tools/iam, a real IAM evaluator with AWS's action data), conditions included.

Prints `N calls by M roles: D denied, U unused grants`, then each denied call and each granted action no
call used (those docs/DEPLOY.md justifies are marked so). Exits 1 when a call is denied or could not be
evaluated. Calls made outside any caller while a test's frame is on the stack (a fixture seeding the
emulated AWS through the control plane's clients, or a test calling a repository or service directly) are
the tests' own: counted and not evaluated. An unattributed call with no test on its stack is the control
plane's own (a local-mode loop outside any role): reported with its origin, and it fails the check.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools" / "iam"
DEFAULT_CALLS = ROOT / "build" / "iam" / "calls.jsonl"
ACCOUNT = "123456789012"  # localmode's and moto's account; the template's AWS::AccountId resolves to it
ENGINES = ("sagemaker", "ec2")

# Callers that are not Lambda functions -> the construct id their role's logical id starts with.
ROLE_PREFIXES = {
    "SageMakerTrainer": "ComputeSageMakerExecutionRole",
    "Ec2Trainer": "ComputeInstanceRole",
    "Scheduler": "RetrainingSchedulerRole",
}
# The tokens localmode.iam_calls writes for the deployment's names -> (logical id prefix, what of it).
TOKENS = {
    "JobsTable": ("StorageJobsTable", "name"),
    "IdempotencyTable": ("StorageIdempotencyTable", "name"),
    "ArtifactsBucket": ("StorageArtifactsBucket", "name"),
    "StateMachine": ("LifecycleStateMachine", "name"),
    "TrainerLogGroup": ("ComputeTrainerLogs", "name"),
    "SageMakerRoleArn": ("ComputeSageMakerExecutionRole", "arn"),
    "InstanceRoleArn": ("ComputeInstanceRole", "arn"),
    "InstanceProfileArn": ("ComputeInstanceProfile", "arn"),
    "LaunchTemplate": ("ComputeTrainerLaunchTemplate", "ref"),
    "PlacementGroup": ("ComputeNodesPlacementGroup", "ref"),
    "ScheduleGroup": ("RetrainingScheduleGroup", "name"),
    "SchedulerRoleArn": ("RetrainingSchedulerRole", "arn"),
    "LifecycleFunction": ("LifecycleTasksFunction", "name"),
    "EventsFunction": ("EventsHandlerFunction", "name"),
    "RetrainingFunction": ("RetrainingDispatcherFunction", "name"),
    "SweepsFunction": ("SweepsControllerFunction", "name"),
    "DashboardUserPool": ("DashboardUsers", "ref"),  # infra/constructs/dashboard.py: the user pool "Users"
    "TrainplaneBus": ("EventBus", "name"),  # infra/constructs/event_bus.py: the construct "EventBus" (its AWS::Events::EventBus)
}
_NAME_PROPERTIES = ("TableName", "BucketName", "FunctionName", "StateMachineName", "LogGroupName", "QueueName", "Name", "RoleName")
_LOGICAL = re.compile(r"^(?P<prefix>[A-Za-z0-9]+?)[0-9A-F]{8}$")


class Template:
    """One synthesized stack: its roles' resolved policies and its names for the recorded tokens."""

    def __init__(self, document: dict[str, Any], region: str = "us-east-1", account: str = ACCOUNT) -> None:
        self.resources: dict[str, dict[str, Any]] = document["Resources"]
        self.region, self.account = region, account
        self.tokens = {token: self._token(prefix, what) for token, (prefix, what) in TOKENS.items()}

    # --- names and intrinsics --------------------------------------------------------------------

    def logical(self, prefix: str) -> str | None:
        return next((k for k in self.resources if (m := _LOGICAL.match(k)) and m["prefix"] == prefix), None)

    def _token(self, prefix: str, what: str) -> str | None:
        logical = self.logical(prefix)
        if logical is None:
            return None
        return {"arn": self.arn, "ref": self._ref}.get(what, self.name)(logical)

    def name(self, logical: str) -> str:
        properties = self.resources[logical].get("Properties", {})
        for key in _NAME_PROPERTIES:
            value = properties.get(key)
            if isinstance(value, str):
                return value
        return logical

    def arn(self, logical: str) -> str:
        kind, name = self.resources[logical]["Type"], self.name(logical)
        r, a = self.region, self.account
        return {
            "AWS::DynamoDB::Table": f"arn:aws:dynamodb:{r}:{a}:table/{name}",
            "AWS::S3::Bucket": f"arn:aws:s3:::{name}",
            "AWS::KMS::Key": f"arn:aws:kms:{r}:{a}:key/{name}",
            "AWS::IAM::Role": f"arn:aws:iam::{a}:role/{name}",
            "AWS::IAM::InstanceProfile": f"arn:aws:iam::{a}:instance-profile/{name}",
            "AWS::Lambda::Function": f"arn:aws:lambda:{r}:{a}:function:{name}",
            "AWS::Logs::LogGroup": f"arn:aws:logs:{r}:{a}:log-group:{name}:*",
            "AWS::SQS::Queue": f"arn:aws:sqs:{r}:{a}:{name}",
            "AWS::StepFunctions::StateMachine": f"arn:aws:states:{r}:{a}:stateMachine:{name}",
            "AWS::Scheduler::ScheduleGroup": f"arn:aws:scheduler:{r}:{a}:schedule-group/{name}",
            "AWS::Events::EventBus": f"arn:aws:events:{r}:{a}:event-bus/{name}",
            "AWS::Cognito::UserPool": f"arn:aws:cognito-idp:{r}:{a}:userpool/{name}",
        }.get(kind, f"arn:aws:cloudformation:{r}:{a}:{kind}/{name}")

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self._ref(arg)
            if key == "Fn::GetAtt":
                logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self.arn(logical) if attribute == "Arn" else self.name(logical)
            if key == "Fn::Join":
                separator, parts = arg
                return separator.join(str(self.resolve(p)) for p in parts)
            if key == "Fn::Sub":
                text = arg if isinstance(arg, str) else arg[0]
                return re.sub(r"\$\{([^}]+)\}", lambda m: str(self._ref(m[1])), text)
            if key == "Fn::Select":
                index, items = arg
                return self.resolve(items)[int(index)]
            if key == "Fn::Split":
                separator, text = arg
                return str(self.resolve(text)).split(separator)
        return {k: self.resolve(v) for k, v in value.items()}

    def _ref(self, name: str) -> str:
        pseudo = {"AWS::Partition": "aws", "AWS::Region": self.region, "AWS::AccountId": self.account, "AWS::URLSuffix": "amazonaws.com"}
        if name in pseudo:
            return pseudo[name]
        if name in self.resources:
            kind = self.resources[name]["Type"]
            if kind in ("AWS::StepFunctions::StateMachine", "AWS::Events::EventBus"):
                return self.arn(name)
            if kind in ("AWS::EC2::LaunchTemplate", "AWS::EC2::PlacementGroup"):
                return name  # Ref is the template's id / the generated group name: the logical id stands for it
            return self.name(name)
        return name  # a parameter: its name stands for its value

    # --- roles -------------------------------------------------------------------------------------

    def role_of(self, caller: str) -> str | None:
        from localmode.iam_calls import HANDLER_ROLES, STATE_MACHINE

        if caller == STATE_MACHINE:
            machine = self.logical("LifecycleStateMachine")
            return self._role_ref(self.resources[machine]["Properties"]["RoleArn"]) if machine else None
        handler = next((spec for spec, role in HANDLER_ROLES.items() if role == caller), None)
        if handler is not None:
            for resource in self.resources.values():
                properties = resource.get("Properties", {})
                if resource["Type"] == "AWS::Lambda::Function" and properties.get("Handler") == handler:
                    return self._role_ref(properties["Role"])
            return None
        prefix = ROLE_PREFIXES.get(caller)
        return self.logical(prefix) if prefix else None

    @staticmethod
    def _role_ref(value: Any) -> str | None:
        if isinstance(value, dict) and "Fn::GetAtt" in value:
            return str(value["Fn::GetAtt"][0])
        return None

    def policies(self, role: str) -> list[dict[str, Any]]:
        found = []
        for logical, resource in self.resources.items():
            if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                properties = resource["Properties"]
                if {"Ref": role} in properties.get("Roles", []):
                    found.append({"name": logical, "policy": self.resolve(properties["PolicyDocument"])})
        for index, inline in enumerate(self.resources[role].get("Properties", {}).get("Policies", [])):
            found.append({"name": f"{role}-inline-{index}", "policy": self.resolve(inline["PolicyDocument"])})
        managed = self.resources[role].get("Properties", {}).get("ManagedPolicyArns")
        if managed:
            raise SystemExit(f"iam-check: role {role} has managed policies {managed}: their documents are not in the template")
        return found

    def role_arn(self, role: str) -> str:
        return self.arn(role)

    def substitute(self, text: str) -> str:
        return re.sub(r"\$\{(\w+)\}", lambda m: self.tokens.get(m[1]) or m[0], text)


def granted_actions(policies: list[dict[str, Any]]) -> set[str]:
    actions: set[str] = set()
    for policy in policies:
        statements = policy["policy"]["Statement"]
        for statement in statements if isinstance(statements, list) else [statements]:
            if statement.get("Effect") == "Allow":
                action = statement.get("Action", [])
                actions.update(action if isinstance(action, list) else [action])
    return actions


# --- synth, evaluate, report ------------------------------------------------------------------------


def synthesize(outdir: Path) -> dict[str, Path]:
    def one(engine: str) -> Path:
        target = outdir / engine
        command = [sys.executable, str(ROOT / "infra" / "app.py"), "--outdir", str(target), "-c", "stage=dev", "-c", f"compute={engine}"]
        subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return target / "Trainplane-dev.template.json"

    with concurrent.futures.ThreadPoolExecutor(len(ENGINES)) as pool:
        return dict(zip(ENGINES, pool.map(one, ENGINES), strict=True))


def load_calls(path: Path) -> tuple[Counter[str], Counter[str], Counter[str], int]:
    """(unique authorization -> count, the tests' unattributed operations -> count, the control plane's
    unattributed calls by origin and operation -> count, calls)."""
    authorizations: Counter[str] = Counter()
    by_tests: Counter[str] = Counter()
    by_plane: Counter[str] = Counter()
    calls = 0
    with path.open() as lines:
        for line in lines:
            call = json.loads(line)
            calls += 1
            if call["caller"] == "unattributed":
                operation = f"{call['service']}:{call['operation']}"
                origin = call.get("origin", "tests")
                if origin == "tests":
                    by_tests[operation] += 1
                else:
                    by_plane[f"{origin} {operation}"] += 1
                continue
            engine = "ec2" if call["compute"] == "ec2" or call["service"] == "ec2" else "sagemaker"
            for auth in call["authorizations"]:
                key = {"caller": call["caller"], "engine": engine, "operation": f"{call['service']}:{call['operation']}", **auth}
                authorizations[json.dumps(key, sort_keys=True)] += 1
    return authorizations, by_tests, by_plane, calls


def simulate(requests: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    if not (TOOLS / "node_modules" / "@cloud-copilot" / "iam-simulate").is_dir():
        raise SystemExit("iam-check: tools/iam/node_modules is missing: run `make install` (npm ci in tools/iam)")
    result = subprocess.run(
        ["node", str(TOOLS / "simulate.mjs")],
        input=json.dumps({"requests": requests}),
        capture_output=True,
        text=True,
        check=True,
        cwd=TOOLS,
    )
    return {r["id"]: r for r in json.loads(result.stdout)}


def check(calls_path: Path, templates: dict[str, Template], justified: set[tuple[str, str]]) -> tuple[int, list[str]]:
    authorizations, by_tests, by_plane, calls = load_calls(calls_path)
    requests: list[dict[str, Any]] = []
    keys: list[tuple[dict[str, Any], str | None]] = []
    roles_used: set[str] = set()
    for key in authorizations:
        auth = json.loads(key)
        template = templates[auth["engine"]]
        role = template.role_of(auth["caller"])
        roles_used.add(auth["caller"])
        request = {
            "id": len(requests),
            "principal": template.role_arn(role) if role else f"arn:aws:iam::{ACCOUNT}:role/none",
            "action": auth["action"],
            "resource": template.substitute(auth["resource"]),
            "account": ACCOUNT,
            "context": {k: template.substitute(v) if isinstance(v, str) else v for k, v in auth["context"].items()},
            "policies": template.policies(role) if role else [],
        }
        requests.append(request)
        keys.append((auth, role))
    results = simulate(requests)
    denied: list[str] = []
    used: set[tuple[str, str]] = set()
    for request, (auth, role) in zip(requests, keys, strict=True):
        outcome = results[request["id"]]
        if outcome["result"] == "Allowed" and not auth.get("unmapped"):
            used.add((auth["caller"], auth["action"].lower()))
            continue
        why = "no role in the template" if role is None else outcome["result"]
        if auth.get("unmapped"):
            why = "not mapped to a resource (localmode/iam_actions.py)"
        count = authorizations[json.dumps(auth, sort_keys=True)]
        context = f" {json.dumps(request['context'])}" if request["context"] else ""
        where = f"{request['action']} on {request['resource']}{context}"
        denied.append(f"DENIED {auth['caller']} ({auth['engine']}): {where} [{auth['operation']}, x{count}]: {why}")
        if outcome.get("errors"):
            denied[-1] += f" {json.dumps(outcome['errors'])[:400]}"
    unused = []
    callers = sorted({*roles_used, *(role for role in _all_callers())})
    for caller in callers:
        granted: set[str] = set()
        for template in templates.values():
            role = template.role_of(caller)
            if role:
                granted |= granted_actions(template.policies(role))
        for action in sorted(granted):
            if (caller, action.lower()) not in used:
                mark = "justified in docs/DEPLOY.md" if (caller, action) in justified else "NOT JUSTIFIED"
                unused.append(f"unused {caller}: {action} ({mark})")
    justified_count = sum(1 for line in unused if line.endswith("(justified in docs/DEPLOY.md)"))
    # A control-plane call outside any role cannot be judged: it is a failure as a denied call is.
    denied += [
        f"UNATTRIBUTED {where} [x{count}]: made by the control plane outside any role (localmode/iam_calls.py)"
        for where, count in sorted(by_plane.items())
    ]
    lines = [f"{calls} calls by {len(roles_used)} roles: {len(denied)} denied, {len(unused)} unused grants"]
    lines.append(
        f"  ({len(authorizations)} distinct authorizations; {justified_count} of the unused grants justified in docs/DEPLOY.md; "
        f"{sum(by_tests.values())} calls by the tests themselves, not evaluated (a fixture's set-up, or a test calling the "
        f"control plane's code directly, outside any role): {dict(by_tests.most_common(5))})"
    )
    return len(denied), lines + denied + unused


def _all_callers() -> list[str]:
    from localmode.iam_calls import HANDLER_ROLES, STATE_MACHINE

    return [*HANDLER_ROLES.values(), STATE_MACHINE, *ROLE_PREFIXES]


def justified_grants(deploy_md: Path) -> set[tuple[str, str]]:
    """Rows `| Role | action, action | why |` of DEPLOY.md's table between the iam-unused markers."""
    text = deploy_md.read_text(encoding="utf-8")
    start, end = text.find("<!-- iam-unused:start -->"), text.find("<!-- iam-unused:end -->")
    out: set[tuple[str, str]] = set()
    for row in text[start:end].splitlines() if start >= 0 and end > start else []:
        cells = [c.strip().strip("`") for c in row.strip().strip("|").split("|")]
        if len(cells) >= 3 and ":" in cells[1]:
            for role in cells[0].split(","):
                for action in cells[1].split(","):
                    out.add((role.strip().strip("`"), action.strip().strip("`")))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=Path, default=Path(os.environ.get("TRAINPLANE_IAM_CALLS_FILE") or DEFAULT_CALLS))
    parser.add_argument("--template-sagemaker", type=Path)
    parser.add_argument("--template-ec2", type=Path)
    parser.add_argument("--outdir", type=Path, default=ROOT / "build" / "iam" / "cdk.out")
    args = parser.parse_args(argv)
    if not args.calls.exists():
        print(f"iam-check: no recorded calls at {args.calls}: run the tests first (make test)", file=sys.stderr)
        return 2
    paths = {"sagemaker": args.template_sagemaker, "ec2": args.template_ec2}
    if not all(paths.values()):
        paths = {**synthesize(args.outdir), **{k: v for k, v in paths.items() if v}}
    templates = {engine: Template(json.loads(Path(path).read_text())) for engine, path in paths.items()}
    denied, lines = check(args.calls, templates, justified_grants(ROOT / "docs" / "DEPLOY.md"))
    print("\n".join(lines))
    return 1 if denied else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
