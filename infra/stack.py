"""The control plane in one stack. It only composes constructs and states its outputs."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import AssetHashType, CfnOutput, Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from functions import constants
from infra.bundling import LambdaBundle
from infra.config import ConfigError, StageConfig
from infra.constructs.api import API, Api
from infra.constructs.compute import ROOT_DEVICE, Compute
from infra.constructs.dashboard import Dashboard
from infra.constructs.event_bus import EVENT_PUBLISHER, EventBus
from infra.constructs.events import EVENTS, Events
from infra.constructs.function import settings_environment
from infra.constructs.lifecycle import LIFECYCLE, Lifecycle, state_machine_arn
from infra.constructs.observability import Observability
from infra.constructs.retraining import RETRAINING, Retraining
from infra.constructs.storage import Storage
from infra.constructs.sweeps import SWEEPS, Sweeps
from infra.constructs.webhooks import WEBHOOK_DELIVERY, WebhookDelivery


class TrainplaneStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        bundle: LambdaBundle,
        sweeps_bundle: LambdaBundle | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, description=f"trainplane control plane ({config.stage})", **kwargs)
        self.config = config
        # One asset for every function: the hash is the bundle's own, so CDK need not re-hash 1000 files.
        code = lambda_.Code.from_asset(str(bundle.path), asset_hash=bundle.asset_hash, asset_hash_type=AssetHashType.CUSTOM)

        missing = [spec.handler for spec in (API, LIFECYCLE, EVENTS) if not spec.defined_in(bundle.path)]
        if missing:
            raise ConfigError(f"the Lambda bundle defines no {', '.join(missing)}: the control plane cannot run without it")
        # Retraining (issue 7) is deployed once its dispatcher exists; a function without code would
        # only fail on every event.
        retraining = Retraining(self, "Retraining", config=config) if RETRAINING.defined_in(bundle.path) else None
        # Sweeps (issue 15): the controller runs from a bundle of its own (Optuna); without one, the API
        # refuses POST /sweeps (settings.sweep_controller_function unset) instead of accepting sweeps
        # nothing would decide.
        sweeps = Sweeps(self, "Sweeps", config=config) if sweeps_bundle is not None and SWEEPS.defined_in(sweeps_bundle.path) else None

        storage = Storage(self, "Storage", config=config)
        dashboard = Dashboard(self, "Dashboard", config=config) if config.dashboard else None
        cors_origin = config.cors_origin or (dashboard.origin if dashboard else None)
        compute = Compute(self, "Compute", config=config, storage=storage)
        event_bus = EventBus(self, "EventBus", config=config)
        environment = settings_environment(
            {
                **event_bus.settings(),
                "dashboard_url": dashboard.origin if dashboard else None,
                # Team membership by Cognito group (docs/TEAMS.md): the pool a dashboard user's groups are read in.
                "dashboard_user_pool_id": dashboard.user_pool.user_pool_id if dashboard else None,
                **(retraining.settings() if retraining else {}),
                **(sweeps.settings() if sweeps else {}),
                "jobs_table": storage.jobs_table.table_name,
                "idempotency_table": storage.idempotency_table.table_name,
                "artifacts_bucket": storage.artifacts_bucket.bucket_name,
                "state_machine_arn": state_machine_arn(self, config),
                "event_bus_name": constants.EVENT_BUS_NAME,
                "admin_arns": ",".join(config.admin_arns) or None,
                "compute": config.compute,
                "trainer_image_uri": compute.image_uri,
                "custom_image_repositories": ",".join(config.custom_image_repositories) or None,
                "sagemaker_role_arn": compute.sagemaker_role.role_arn,
                "vpc_subnet_ids": ",".join(compute.subnet_ids) or None,
                "vpc_security_group_ids": ",".join(compute.security_group_ids) or None,
                "kms_key_id": storage.key.key_arn,
                "ec2_launch_template_id": compute.launch_template.launch_template_id,
                "ec2_instance_profile_arn": compute.instance_profile.instance_profile_arn,
                "ec2_placement_group": compute.placement_group.ref,
                "ec2_root_device_name": ROOT_DEVICE,
                "trainer_log_group": compute.trainer_log_group.log_group_name,
                "gpu_quotas": config.gpu_quotas or None,
                "default_team_quotas": config.default_team_quotas or None,
                "cors_origin": cors_origin,
                "training_shapes": json.dumps(config.training_shapes) if config.training_shapes else None,
                "bucket_grants": _grants_json(config),
            }
        )
        lifecycle = Lifecycle(self, "Lifecycle", config=config, storage=storage, compute=compute, code=code, environment=environment)
        api = Api(
            self,
            "Api",
            config=config,
            storage=storage,
            compute=compute,
            lifecycle=lifecycle,
            code=code,
            environment=environment,
            cors_origin=cors_origin,
        )
        if dashboard:
            dashboard.publish(api)
        events = Events(
            self, "Events", config=config, storage=storage, compute=compute, lifecycle=lifecycle, code=code, environment=environment
        )
        functions = [api.handler, lifecycle.tasks, events.handler]
        if EVENT_PUBLISHER.defined_in(bundle.path):
            functions.append(
                event_bus.add_publisher(storage=storage, dead_letter_queue=events.dead_letter_queue, code=code, environment=environment)
            )
        if WEBHOOK_DELIVERY.defined_in(bundle.path):
            webhooks = WebhookDelivery(
                self,
                "Webhooks",
                config=config,
                bus=event_bus.bus,
                storage=storage,
                dead_letter_queue=events.dead_letter_queue,
                code=code,
                environment=environment,
            )
            functions.append(webhooks.function)
        # Who reads a dashboard user's Cognito groups (team membership): the API for a request's caller, and the
        # functions that submit for a stored owner (a retraining policy's jobs, a sweep's trials).
        group_readers = [api.handler]
        if retraining:
            functions.append(
                retraining.add_dispatcher(
                    storage=storage,
                    compute=compute,
                    lifecycle=lifecycle,
                    dead_letter_queue=events.dead_letter_queue,
                    code=code,
                    environment=environment,
                )
            )
            group_readers.append(functions[-1])
            retraining.grant_manage_schedules(api.handler.role)  # policies are created through the API
        if sweeps and sweeps_bundle is not None:
            sweeps_code = lambda_.Code.from_asset(
                str(sweeps_bundle.path), asset_hash=sweeps_bundle.asset_hash, asset_hash_type=AssetHashType.CUSTOM
            )
            functions.append(
                sweeps.add_controller(
                    storage=storage,
                    compute=compute,
                    lifecycle=lifecycle,
                    dead_letter_queue=events.dead_letter_queue,
                    code=sweeps_code,
                    environment=environment,
                )
            )
            group_readers.append(functions[-1])
            # Woken by the API (create, pause, resume, cancel) and by whoever records trainer reports and run ends.
            for waker in (api.handler, lifecycle.tasks, events.handler):
                sweeps.grant_wake(waker.role)
        if dashboard:
            for reader in group_readers:
                dashboard.grant_read_groups(reader.role)
        Observability(
            self,
            "Observability",
            config=config,
            storage=storage,
            api=api,
            lifecycle=lifecycle,
            dead_letter_queue=events.dead_letter_queue,
            functions=functions,
        )

        CfnOutput(self, "ApiUrl", value=api.url, description="Base URL of the jobs API (SigV4, service execute-api)")
        CfnOutput(self, "ArtifactsBucketName", value=storage.artifacts_bucket.bucket_name)
        if dashboard:
            CfnOutput(self, "DashboardUrl", value=f"{dashboard.origin}/", description="The web dashboard (sign in with the user pool)")
            CfnOutput(self, "DashboardUserPoolId", value=dashboard.user_pool.user_pool_id, description="Invite the team here")
            # What `make deploy` uploads the page with (infra/publish_dashboard.py).
            CfnOutput(self, "DashboardBucketName", value=dashboard.assets_bucket.bucket_name)
            CfnOutput(self, "DashboardDistributionId", value=dashboard.distribution.distribution_id)
            CfnOutput(self, "DashboardConfig", value=self.to_json_string(dashboard.settings), description="dashboard-config.json")
        CfnOutput(self, "JobsTableName", value=storage.jobs_table.table_name)
        CfnOutput(self, "EventBusName", value=event_bus.bus.event_bus_name, description="trainplane's own events (docs/EVENTS.md)")
        CfnOutput(self, "TrainerImageUri", value=compute.image_uri)
        CfnOutput(self, "StateMachineArn", value=lifecycle.state_machine.state_machine_arn)
        CfnOutput(self, "SageMakerRoleArn", value=compute.sagemaker_role.role_arn)
        CfnOutput(self, "LaunchTemplateId", value=compute.launch_template.launch_template_id or "")
        CfnOutput(self, "DeadLetterQueueUrl", value=events.dead_letter_queue.queue_url)
        CfnOutput(
            self,
            "SweepsStatus",
            value="deployed" if sweeps else f"not deployed: no sweep controller bundle with {SWEEPS.handler}",
        )
        CfnOutput(
            self,
            "RetrainingStatus",
            value="deployed" if retraining else f"not deployed: the bundle has no {RETRAINING.handler} yet",
        )


def _grants_json(config: StageConfig) -> str | None:
    """Settings.bucket_grants (TRAINPLANE_BUCKET_GRANTS) from the stage's bucket_grants and training_data_uris."""
    grants = config.all_bucket_grants()
    return json.dumps([g.model_dump(mode="json") for g in grants]) if grants else None
