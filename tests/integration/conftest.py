"""Shared by the integration tests: moto for a module, and the API Lambda on it (tests/helpers/api_lambda.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

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


@contextlib.contextmanager
def composed_api(aws: AwsClients, **settings: Any) -> Iterator[Api]:
    """The API Lambda composed on fresh tables and buckets (admin ADMIN, `settings` on top), with a
    RecordingWorkflow as the engine; the composition is reset after."""
    fresh = fresh_resources(aws, admin_arns=(ADMIN,), **settings)
    workflow = RecordingWorkflow()
    composition.configure(settings=fresh, clients=aws, workflow=workflow)
    try:
        yield Api(aws, workflow, fresh)
    finally:
        composition.reset()


@pytest.fixture
def call(aws: AwsClients) -> Iterator[Api]:
    """The API Lambda composed on fresh tables and buckets, with a RecordingWorkflow as the engine."""
    with composed_api(aws) as api:
        yield api
