"""One attempt on EC2 as one instant EC2 Fleet over placement's pools (docs/PLACEMENT.md, "EC2 Fleet").

Placement hands the launcher the attempt's pools in order (LaunchRequest.fleet_pools: the chosen candidate x
zone, then the next healthy ones of the same shape and purchase, so that the run spec and its batch adaptation
hold on any of them). They go to CreateFleet in one call: Type instant (EC2 answers at once with the
instances it started and, per pool it could not fill, an Errors entry), spot with AllocationStrategy
price-capacity-optimized (EC2 weighs price and the pools' spare capacity), on-demand prioritized (the
user's order, as Priority). All nodes of a multi-node job in one pool (SingleInstanceType,
SingleAvailabilityZone, MinTargetCapacity = the node count: all or nothing, as RunInstances' MinCount).

A fleet takes its instances' settings from a launch template only: UserData cannot be an override. So each
attempt gets a version of the deployment's template (CreateLaunchTemplateVersion with SourceVersion: the
deployment's AMI and network, plus this attempt's user data, tags, profile, metadata options and volume),
deleted again once the fleet answered (an instant fleet's instances keep their user data; a template holds
at most 10,000 versions). The market (spot or on-demand) is the fleet's, never the template's: EC2 Fleet
refuses a template carrying InstanceMarketOptions.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from functions.service.ports import LaunchRequest, PoolFailure

logger = logging.getLogger(__name__)

SPOT_ALLOCATION = "price-capacity-optimized"
ON_DEMAND_ALLOCATION = "prioritized"
# RunInstances parameters that a launch template version carries for a fleet (the rest are the fleet's).
_TEMPLATE_FIELDS = (
    "UserData",
    "InstanceInitiatedShutdownBehavior",
    "MetadataOptions",
    "TagSpecifications",
    "IamInstanceProfile",
    "SecurityGroupIds",
    "BlockDeviceMappings",
)


def template_data(run_instances: Mapping[str, Any]) -> dict[str, Any]:
    """The attempt's RunInstances parameters (ec2.build_run_instances_request) as launch template data."""
    data = {key: run_instances[key] for key in _TEMPLATE_FIELDS if key in run_instances}
    # RunInstances' UserData is base64-encoded by boto3; a launch template's must be given encoded.
    data["UserData"] = base64.b64encode(str(run_instances["UserData"]).encode()).decode()
    return data


def build_fleet_request(
    request: LaunchRequest, run_instances: Mapping[str, Any], template: Mapping[str, str], version: int
) -> dict[str, Any]:
    """CreateFleet's parameters for the attempt's pools, over launch template `version` (pure)."""
    nodes = int(run_instances["MinCount"])
    group = run_instances.get("Placement", {}).get("GroupName")
    subnet = run_instances.get("SubnetId")
    overrides = []
    for priority, (instance_type, zone) in enumerate(request.fleet_pools):
        override: dict[str, Any] = {"InstanceType": instance_type, "Priority": float(priority)}
        if zone:
            override["AvailabilityZone"] = zone
        elif subnet:
            override["SubnetId"] = subnet
        if group:
            override["Placement"] = {"GroupName": group}
        overrides.append(override)
    spec = {**{k: v for k, v in template.items() if k != "Version"}, "Version": str(version)}
    options = {"SingleInstanceType": True, "SingleAvailabilityZone": True, "MinTargetCapacity": nodes}
    params: dict[str, Any] = {
        "Type": "instant",
        "ClientToken": run_instances["ClientToken"],
        "LaunchTemplateConfigs": [{"LaunchTemplateSpecification": spec, "Overrides": overrides}],
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": nodes,
            "DefaultTargetCapacityType": "spot" if request.preemptible else "on-demand",
        },
    }
    if request.preemptible:
        params["SpotOptions"] = {"AllocationStrategy": SPOT_ALLOCATION, "InstanceInterruptionBehavior": "terminate", **options}
    else:
        params["OnDemandOptions"] = {"AllocationStrategy": ON_DEMAND_ALLOCATION, **options}
    return params


def fleet_outcome(response: Mapping[str, Any]) -> tuple[list[str], str | None, str | None, list[PoolFailure]]:
    """CreateFleet's answer -> (instance ids, their instance type, their zone, the pools that failed)."""
    ids: list[str] = []
    instance_type = zone = None
    for entry in response.get("Instances", []):
        if not entry.get("InstanceIds"):
            continue
        override = entry.get("LaunchTemplateAndOverrides", {}).get("Overrides", {})
        ids.extend(entry["InstanceIds"])
        instance_type = entry.get("InstanceType") or override.get("InstanceType")
        zone = override.get("AvailabilityZone")
    failures = []
    for error in response.get("Errors", []):
        override = error.get("LaunchTemplateAndOverrides", {}).get("Overrides", {})
        failures.append(
            PoolFailure(
                instance_type=str(override.get("InstanceType", "")),
                zone=override.get("AvailabilityZone"),
                code=str(error.get("ErrorCode", "")),
                message=str(error.get("ErrorMessage", "")),
            )
        )
    return ids, instance_type, zone, failures


def launch_fleet(ec2: Any, request: LaunchRequest, run_instances: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[PoolFailure]]:
    """Start the attempt through one instant fleet: (the instances as DescribeInstances shows them, the pools
    that failed). No instance: an empty list (the caller raises the capacity error)."""
    template = dict(run_instances["LaunchTemplate"])
    target = {k: v for k, v in template.items() if k != "Version"}
    version = ec2.create_launch_template_version(
        **target,
        SourceVersion=template.get("Version") or "$Default",
        VersionDescription=f"trainplane {request.job_id} attempt {request.attempt}",
        LaunchTemplateData=template_data(run_instances),
    )["LaunchTemplateVersion"]["VersionNumber"]
    try:
        response = ec2.create_fleet(**build_fleet_request(request, run_instances, template, int(version)))
    finally:
        try:
            ec2.delete_launch_template_versions(**target, Versions=[str(version)])
        except Exception:
            # A leftover version costs nothing but a slot of 10,000: the launch must not fail for it.
            logger.warning("could not delete launch template version %s", version, exc_info=True)
    ids, _, _, failures = fleet_outcome(response)
    if not ids:
        return [], failures
    reservations = ec2.describe_instances(InstanceIds=ids)["Reservations"]
    instances = [i for r in reservations for i in r.get("Instances", [])]
    return sorted(instances, key=lambda i: int(i.get("AmiLaunchIndex", 0))), failures


def fleet_extra(instances: Sequence[Mapping[str, Any]], failures: Sequence[PoolFailure]) -> dict[str, str]:
    """What the run handle keeps of a fleet launch (strings): the zone it landed in and the pools that failed,
    which placement reads back (functions/service/placement.py `on_launched`)."""
    zone = str(instances[0].get("Placement", {}).get("AvailabilityZone", "")) if instances else ""
    return {"zone": zone, PoolFailure.EXTRA_KEY: PoolFailure.to_extra(failures)}
