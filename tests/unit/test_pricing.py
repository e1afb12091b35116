"""The price table (functions/catalog/pricing.py) against the instance table."""

from __future__ import annotations

import pytest

from functions.catalog import pricing
from functions.catalog.instances import INSTANCE_TYPES


def test_every_instance_type_has_both_prices_and_sagemaker_costs_more() -> None:
    # Given the instance table / Then each row has a positive EC2 and SageMaker price, SageMaker's the higher
    for spec in INSTANCE_TYPES:
        ec2 = pricing.on_demand_hourly(spec.name, "ec2")
        sagemaker = pricing.on_demand_hourly(f"ml.{spec.name}", "sagemaker")
        assert 0 < ec2 < sagemaker, spec.name
    assert set(pricing.ON_DEMAND_USD) == {spec.name for spec in INSTANCE_TYPES}


def test_bigger_instances_of_a_family_cost_more() -> None:
    # Given the single-GPU g5 sizes in order / Then prices rise with size (a typo would break the order)
    sizes = ["xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge"]
    prices = [pricing.on_demand_hourly(f"g5.{s}", "ec2") for s in sizes]
    assert prices == sorted(prices)


def test_spot_estimate_and_local_and_unknown() -> None:
    # Given a type / Then the spot estimate applies the platform's discount; local is free; unknown names the file
    assert pricing.spot_hourly_estimate("g5.xlarge", "ec2") == pytest.approx(1.006 * 0.35)
    assert pricing.on_demand_hourly("anything", "local") == 0.0
    with pytest.raises(KeyError, match=r"pricing\.py"):
        pricing.on_demand_hourly("x9.huge", "ec2")
