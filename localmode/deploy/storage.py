"""Local deployer: the jobs and idempotency tables (with their GSIs and TTL) and the artifacts bucket.

The same names, keys and indexes as the cloud stack (infra/constructs/storage.py): both read them from
functions/constants.py, and the table definitions are the repository's own (dynamodb_items.py).
Deliberate differences: no KMS key, no access-log bucket, and the artifacts bucket is NOT versioned
(moto would keep every overwritten checkpoint in memory; the journal keeps the latest version only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from functions.adapters.dynamodb_items import create_tables

if TYPE_CHECKING:
    from localmode.deploy import LocalContext


def deploy(ctx: LocalContext) -> None:
    settings = ctx.settings()
    create_tables(ctx.client("dynamodb"), jobs_table=settings.jobs_table, idempotency_table=settings.idempotency_table)
    s3 = ctx.client("s3")
    s3.create_bucket(Bucket=settings.artifacts_bucket)
    # As in the cloud: S3 -> EventBridge notifications, so "new data in S3" can start retraining.
    s3.put_bucket_notification_configuration(Bucket=settings.artifacts_bucket, NotificationConfiguration={"EventBridgeConfiguration": {}})
    ctx.set_setting("jobs_table", settings.jobs_table)
    ctx.set_setting("idempotency_table", settings.idempotency_table)
    ctx.set_setting("artifacts_bucket", settings.artifacts_bucket)
    ctx.set_setting("region", ctx.region)
    ctx.set_setting("aws_endpoint_url", ctx.endpoint_url)
    ctx.set_setting("compute", ctx.compute)
