"""Shared by the integration tests: moto for a module, and the API Lambda on it (tests/helpers/api_lambda.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from functions import composition
from functions.adapters.aws import AwsClients
from tests.fakes import RecordingWorkflow
from tests.helpers.api_lambda import Api
from tests.helpers.aws import emulated_aws, fresh_resources
from tests.helpers.jobs import ADMIN


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    """A fresh moto for each test module."""
    with emulated_aws() as clients:
        yield clients


@pytest.fixture
def call(aws: AwsClients) -> Iterator[Api]:
    """The API Lambda composed on fresh tables and buckets, with a RecordingWorkflow as the engine."""
    settings = fresh_resources(aws, admin_arns=(ADMIN,))
    workflow = RecordingWorkflow()
    composition.configure(settings=settings, clients=aws, workflow=workflow)
    try:
        yield Api(aws, workflow, settings)
    finally:
        composition.reset()
