"""On-demand hourly prices (USD, us-east-1, Linux) for every instance type in instances.py, in one place.

These are estimates for the job's cost card and the max_cost_usd guard, not invoices: list prices
as of mid-2025 (after AWS's June 2025 P4/P5 reduction), rounded. SageMaker training carries its
own, higher rates. Refresh both columns from the AWS Price List API when they drift; a test checks
that every instance type in the table has both prices.
"""

from __future__ import annotations

from typing import Literal

Platform = Literal["sagemaker", "ec2", "local"]

# name -> (EC2 on-demand, SageMaker training ml.<name>) per instance-hour
ON_DEMAND_USD: dict[str, tuple[float, float]] = {
    "p5.48xlarge": (55.04, 63.30),
    "p4de.24xlarge": (27.45, 31.57),
    "p4d.24xlarge": (21.96, 25.25),
    "g6e.xlarge": (1.861, 2.605),
    "g6e.2xlarge": (2.242, 3.139),
    "g6e.4xlarge": (3.004, 4.206),
    "g6e.8xlarge": (4.527, 6.338),
    "g6e.16xlarge": (7.577, 10.608),
    "g6e.12xlarge": (10.493, 14.690),
    "g6e.24xlarge": (15.066, 21.092),
    "g6e.48xlarge": (30.131, 42.183),
    "g6.xlarge": (0.805, 1.127),
    "g6.2xlarge": (0.978, 1.369),
    "g6.4xlarge": (1.323, 1.852),
    "g6.8xlarge": (2.014, 2.820),
    "g6.16xlarge": (3.397, 4.756),
    "g6.12xlarge": (4.602, 6.442),
    "g6.24xlarge": (6.675, 9.345),
    "g6.48xlarge": (13.350, 18.690),
    "g5.xlarge": (1.006, 1.408),
    "g5.2xlarge": (1.212, 1.515),
    "g5.4xlarge": (1.624, 2.030),
    "g5.8xlarge": (2.448, 3.060),
    "g5.16xlarge": (4.096, 5.120),
    "g5.12xlarge": (5.672, 7.090),
    "g5.24xlarge": (8.144, 10.180),
    "g5.48xlarge": (16.288, 20.360),
    "g4dn.xlarge": (0.526, 0.736),
    "g4dn.2xlarge": (0.752, 1.053),
    "g4dn.4xlarge": (1.204, 1.686),
    "g4dn.8xlarge": (2.176, 3.046),
    "g4dn.16xlarge": (4.352, 6.093),
    "g4dn.12xlarge": (3.912, 5.477),
    "m5.large": (0.096, 0.115),
    "m5.xlarge": (0.192, 0.230),
    "m5.2xlarge": (0.384, 0.461),
    "m5.4xlarge": (0.768, 0.922),
    "m5.12xlarge": (2.304, 2.765),
    "m5.24xlarge": (4.608, 5.530),
    "c5.xlarge": (0.170, 0.204),
    "c5.2xlarge": (0.340, 0.408),
    "c5.4xlarge": (0.680, 0.816),
    "c5.9xlarge": (1.530, 1.836),
    "c5.18xlarge": (3.060, 3.672),
}

# Typical discount of spot over on-demand, used where AWS does not tell us the real figure: EC2 spot
# (the price moves; we do not query the spot price history per job) and the max_cost_usd projection.
# SageMaker managed spot reports its own saving: BillableTimeInSeconds < TrainingTimeInSeconds.
SPOT_DISCOUNT_ESTIMATE: dict[str, float] = {"ec2": 0.65, "sagemaker": 0.70, "local": 0.0}


def on_demand_hourly(instance_type: str, platform: Platform) -> float:
    """USD per instance-hour; local compute is free. KeyError names a type missing from the table."""
    if platform == "local":
        return 0.0
    name = instance_type.removeprefix("ml.")
    try:
        ec2, sagemaker = ON_DEMAND_USD[name]
    except KeyError:
        raise KeyError(f"no price for instance type {instance_type!r}: add it to functions/catalog/pricing.py") from None
    return sagemaker if platform == "sagemaker" else ec2


def spot_hourly_estimate(instance_type: str, platform: Platform) -> float:
    return on_demand_hourly(instance_type, platform) * (1.0 - SPOT_DISCOUNT_ESTIMATE[platform])
