"""The REST API: AWS_IAM (SigV4) on every method, routes taken from the committed OpenAPI document.

Routes are not a catch-all `{proxy+}`: each path and method of schemas/openapi.json (generated from
the handler, drift-checked by its own test) becomes a method here, so API Gateway refuses unknown
routes before a Lambda runs and validates required parameters. Field-level body validation stays in
the handler (pydantic, one place, the same in local mode); the gateway only checks that a required
body is a JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from functions import constants
from functions.catalog.areas import DATA_PREFIX
from infra.config import ConfigError, StageConfig
from infra.constructs.common import allow, arn, log_retention, removal_policy
from infra.constructs.compute import Compute
from infra.constructs.function import FunctionSpec, TrainplaneFunction
from infra.constructs.lifecycle import Lifecycle
from infra.constructs.storage import Storage

OPENAPI_PATH = Path(__file__).resolve().parents[2] / "schemas" / "openapi.json"
API_STAGE = "v1"
HTTP_METHODS = ("get", "post", "put", "patch", "delete")
ANY_METHOD = "ANY"  # per path: the methods it lacks reach the handler, which answers 405 with Allow
API = FunctionSpec(
    name="api",
    handler="functions.handlers.api.lambda_handler",
    description="trainplane REST API (jobs, queues, retraining policies)",
    memory_mb=1024,  # more memory is more CPU: a shorter cold start for pydantic + boto3
    timeout_s=28,  # API Gateway gives an integration 29 s
)
# Headers a browser may send to a SigV4-signed API.
CORS_HEADERS = ("Content-Type", "Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256", "Idempotency-Key")


@dataclass(frozen=True)
class Route:
    path: str
    method: str
    parameters: dict[str, bool] = field(default_factory=dict)  # method.request.* -> required
    body_required: bool = False


def load_routes(path: Path | None = None) -> list[Route]:
    path = path or OPENAPI_PATH
    if not path.exists():
        raise ConfigError(
            f"{path.relative_to(path.parents[1])} is missing: the API's routes come from it (generate it with `make openapi`)"
        )
    document = json.loads(path.read_text(encoding="utf-8"))
    routes: list[Route] = []
    for route_path, item in sorted(document.get("paths", {}).items()):
        shared = item.get("parameters", [])
        for method in HTTP_METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            parameters: dict[str, bool] = {}
            for parameter in [*shared, *operation.get("parameters", [])]:
                parameter = _deref(document, parameter)
                where = {"path": "path", "query": "querystring", "header": "header"}.get(parameter.get("in", ""))
                if where:
                    parameters[f"method.request.{where}.{parameter['name']}"] = where == "path" or bool(parameter.get("required"))
            body = _deref(document, operation.get("requestBody", {}))
            routes.append(Route(route_path, method.upper(), parameters, bool(body.get("required"))))
    if not routes:
        raise ConfigError(f"{path} lists no operations")
    return routes


def _deref(document: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = node.get("$ref")
    if not ref:
        return node
    target: Any = document
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return target


class Api(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        storage: Storage,
        compute: Compute,
        lifecycle: Lifecycle,
        code: lambda_.Code,
        environment: Mapping[str, str],
        cors_origin: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        # The browser origin CORS allows: the config's, else the stack's dashboard (a deploy-time token).
        self.cors_origin = config.cors_origin or cors_origin
        self.handler = TrainplaneFunction(
            self,
            "Handler",
            spec=API,
            code=code,
            config=config,
            environment=environment,
            reserved_concurrency=config.reserved_concurrency.api,
        )
        role = self.handler.role
        storage.grant_jobs(role, write=True)
        storage.grant_idempotency(role)
        # Run specs and metrics are read, a deleted job's prefix is removed.
        storage.grant_artifacts(role, prefixes=[f"{constants.JOBS_PREFIX}/"], write=True, delete=True)
        # Path confinement at submit: is an output_path in a data area empty, or whose export is it?
        storage.grant_artifacts(role, prefixes=[DATA_PREFIX])
        lifecycle.grant_start(role)
        lifecycle.grant_answer_tasks(role)
        compute.grant_stop(role)  # pause and cancel stop the run directly (Workflow.stop_run)
        compute.grant_read_logs(role)

        self.access_logs = logs.LogGroup(self, "AccessLogs", retention=log_retention(config), removal_policy=removal_policy(config))
        self._account_logging_role()
        self.rest_api = apigw.RestApi(
            self,
            "RestApi",
            rest_api_name=config.name("api"),
            description=f"trainplane {config.stage}: training jobs control plane (SigV4 / AWS_IAM)",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=False,  # the account-level logging role is ours (_account_logging_role)
            default_method_options=apigw.MethodOptions(authorization_type=apigw.AuthorizationType.IAM),
            default_cors_preflight_options=self._cors(),
            policy=self._resource_policy(),
            deploy_options=apigw.StageOptions(
                stage_name=API_STAGE,
                access_log_destination=apigw.LogGroupLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.custom(json.dumps(_ACCESS_LOG_FIELDS)),
                logging_level=apigw.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,  # request bodies (job specs) stay out of execution logs
                metrics_enabled=True,
                tracing_enabled=True,
                throttling_rate_limit=config.api_throttle_rate,
                throttling_burst_limit=config.api_throttle_burst,
            ),
        )
        self.rest_api.deployment_stage.node.add_dependency(self._account)
        self._methods(load_routes())
        Validations.of(self.rest_api).acknowledge(
            Acknowledgment(
                id="AwsSolutions-COG4",
                reason=(
                    "Callers are IAM principals: every method uses AWS_IAM (SigV4), by design (docs/DESIGN.md). Dashboard users sign in "
                    "with Cognito but call with the identity pool's IAM credentials, so the same IAM check applies to them."
                ),
            )
        )
        self._gateway_responses()
        self._waf(config)

    # --- routes ---------------------------------------------------------------------------------

    def _methods(self, routes: list[Route]) -> None:
        validator = self.rest_api.add_request_validator(
            "Validator", request_validator_name="params-and-body", validate_request_body=True, validate_request_parameters=True
        )
        json_object = self.rest_api.add_model(
            "JsonObject",
            content_type="application/json",
            model_name="JsonObject",
            schema=apigw.JsonSchema(schema=apigw.JsonSchemaVersion.DRAFT4, type=apigw.JsonSchemaType.OBJECT),
        )
        # One integration, one invoke permission for the whole API (instead of one per method,
        # which would grow the function's resource policy towards its 20 KB limit).
        integration = apigw.LambdaIntegration(self.handler.function, proxy=True, scope_permission_to_method=False)
        for route in routes:
            resource = self.rest_api.root.resource_for_path(route.path) if route.path != "/" else self.rest_api.root
            resource.add_method(
                route.method,
                integration,
                authorization_type=apigw.AuthorizationType.IAM,
                request_validator=validator,
                request_parameters=route.parameters or None,
                request_models={"application/json": json_object} if route.body_required else None,
            )
        # Every other method of a known path goes to the handler too (API Gateway prefers the explicit
        # methods above), which answers 405 with `Allow`; without it the gateway answers a method the
        # path lacks with 403 "Missing Authentication Token". Signed like the rest.
        for path in sorted({route.path for route in routes}):
            resource = self.rest_api.root.resource_for_path(path) if path != "/" else self.rest_api.root
            resource.add_method(ANY_METHOD, integration, authorization_type=apigw.AuthorizationType.IAM)

    def _gateway_responses(self) -> None:
        # The same error shape as the handler's ({"message", "errors"}), for what the gateway refuses itself.
        cors = {"Access-Control-Allow-Origin": f"'{self.cors_origin}'"} if self.cors_origin else None
        bodies = {
            apigw.ResponseType.BAD_REQUEST_BODY: '{"message": "the request body must be a JSON object", "errors": []}',
            apigw.ResponseType.BAD_REQUEST_PARAMETERS: '{"message": "$context.error.validationErrorString", "errors": []}',
        }
        for response_type, template in bodies.items():
            self.rest_api.add_gateway_response(
                f"Response{response_type.response_type}",
                type=response_type,
                templates={"application/json": template},
                response_headers=cors,
            )
        if cors:
            for response_type in (apigw.ResponseType.DEFAULT_4_XX, apigw.ResponseType.DEFAULT_5_XX):
                self.rest_api.add_gateway_response(f"Response{response_type.response_type}", type=response_type, response_headers=cors)

    def _cors(self) -> apigw.CorsOptions | None:
        if not self.cors_origin:
            return None
        return apigw.CorsOptions(
            allow_origins=[self.cors_origin], allow_headers=list(CORS_HEADERS), allow_methods=[m.upper() for m in HTTP_METHODS]
        )

    # --- who may call ---------------------------------------------------------------------------

    def _resource_policy(self) -> iam.PolicyDocument | None:
        config = self.config
        if not config.api_allowed_account_ids and not config.api_allowed_org_id:
            return None  # IAM policies of this account decide alone, as API Gateway does by default
        accounts = sorted({Stack.of(self).account, *config.api_allowed_account_ids})
        everything = "execute-api:/*"
        not_allowed: dict[str, Any] = {"StringNotEquals": {"aws:PrincipalAccount": accounts}}
        if config.api_allowed_org_id:
            # Conditions in one block are ANDed: denied only when in neither the accounts nor the organization.
            not_allowed["StringNotEquals"]["aws:PrincipalOrgID"] = config.api_allowed_org_id
        return iam.PolicyDocument(
            statements=[
                # Cross-account callers need an allow here as well as in their own IAM policies.
                iam.PolicyStatement(principals=[iam.AnyPrincipal()], actions=["execute-api:Invoke"], resources=[everything]),
                iam.PolicyStatement(
                    effect=iam.Effect.DENY,
                    principals=[iam.AnyPrincipal()],
                    actions=["execute-api:Invoke"],
                    resources=[everything],
                    conditions=not_allowed,
                ),
            ]
        )

    def _account_logging_role(self) -> None:
        """API Gateway's account-wide CloudWatch role, scoped to its execution-log groups."""
        role = iam.Role(
            self, "CloudWatchRole", assumed_by=iam.ServicePrincipal("apigateway.amazonaws.com"), description="API Gateway execution logging"
        )
        allow(
            role,
            ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            [arn(self, "logs", "log-group:API-Gateway-Execution-Logs_*")],
            why="API Gateway names its execution-log groups API-Gateway-Execution-Logs_<api id>/<stage>; the id is known after deploy.",
        )
        allow(
            role,
            ["logs:DescribeLogGroups"],
            ["*"],
            why="logs:DescribeLogGroups (listing groups in the console) supports no resource-level permissions.",
        )
        self._account = apigw.CfnAccount(self, "Account", cloud_watch_role_arn=role.role_arn)

    def _waf(self, config: StageConfig) -> None:
        if config.waf_web_acl_arn:
            wafv2.CfnWebACLAssociation(
                self, "WebAcl", resource_arn=self.rest_api.deployment_stage.stage_arn, web_acl_arn=config.waf_web_acl_arn
            )
            return
        Validations.of(self.rest_api.deployment_stage).acknowledge(
            Acknowledgment(
                id="AwsSolutions-APIG3",
                reason=(
                    "Every method requires SigV4 (AWS_IAM) and the stage is throttled; the "
                    "stage config can attach a WAF web ACL (waf_web_acl_arn)."
                ),
            )
        )

    @property
    def url(self) -> str:
        return self.rest_api.url


_ACCESS_LOG_FIELDS = {
    "requestId": "$context.requestId",
    "extendedRequestId": "$context.extendedRequestId",
    "requestTime": "$context.requestTime",
    "httpMethod": "$context.httpMethod",
    "resourcePath": "$context.resourcePath",
    "status": "$context.status",
    "responseLength": "$context.responseLength",
    "responseLatency": "$context.responseLatency",
    "integrationLatency": "$context.integrationLatency",
    "caller": "$context.identity.caller",
    "userArn": "$context.identity.userArn",
    "sourceIp": "$context.identity.sourceIp",
    "userAgent": "$context.identity.userAgent",
    "errorMessage": "$context.error.message",
    "xrayTraceId": "$context.xrayTraceId",
}
