"""moto for integration tests: one emulated AWS per test module, fresh tables and bucket per test.

Starting moto and creating boto3 clients costs ~0.5 s each time (clients parse their service
models); tables and a bucket cost a few ms. So a module shares one mock and one AwsClients, and each
test gets its own uniquely named resources: isolated, and small (moto's transactions copy the whole
table they touch).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager

from moto import mock_aws

from functions import constants
from functions.adapters.aws import AwsClients
from functions.adapters.dynamodb_items import create_tables
from functions.settings import Settings
from schemas.access import BucketGrant

_names = itertools.count(1)


@contextmanager
def emulated_aws() -> Iterator[AwsClients]:
    with mock_aws():
        yield AwsClients(region=constants.LOCAL_REGION)


def fresh_resources(clients: AwsClients, **settings: object) -> Settings:
    """Settings naming a new jobs table, idempotency table and artifacts bucket, all created.

    tests/helpers/jobs.py's requests read s3://trainplane-artifacts/shared/: with a bucket of its own,
    such a deployment allows that prefix (read-only, for everyone) as another bucket (docs/SECURITY.md).
    """
    n = next(_names)
    settings.setdefault("bucket_grants", (BucketGrant(uri=f"s3://{constants.ARTIFACTS_BUCKET}/shared/"),))
    result = Settings(
        jobs_table=f"{constants.JOBS_TABLE}-{n}",
        idempotency_table=f"{constants.IDEMPOTENCY_TABLE}-{n}",
        artifacts_bucket=f"{constants.ARTIFACTS_BUCKET}-{n}",
        **settings,
    )
    create_tables(clients.dynamodb(), result.jobs_table, result.idempotency_table)
    clients.s3().create_bucket(Bucket=result.artifacts_bucket)
    return result
