"""EC2 Fleet in moto, as AWS answers an instant fleet (installed by moto_hooks.install(); pinned to moto_pin's moto).

The EC2 launcher sends a placement's candidates x zones as one instant EC2 Fleet over a per-attempt launch
template version that carries the attempt's user data (docs/PLACEMENT.md, "EC2 Fleet"). moto 5.2.5 fails it
in two places, both fixed here:

1. CreateLaunchTemplateVersion ignores `SourceVersion`: AWS copies the source version's data and applies the
   given fields over it; moto stores only the given fields, so the new version has no ImageId and moto's
   CreateFleet then dies with `KeyError: 'ImageId'` (moto/ec2/models/fleets.py, Fleet.__init__: a 500).
   Here the new version's data is the source's with the given fields over it, as on AWS.
2. moto's instant fleet drops each override's AvailabilityZone (its instances land in the region's first
   zone), never fails a pool (it knows no capacity), so it never fills `Errors`, and launches spot through a
   persistent spot request. Here an instant fleet tries its overrides in priority order (the order given when
   no Priority: moto has no price or capacity signal for price-capacity-optimized to weigh), each as one
   RunInstances of the whole target capacity in that override's zone (all or nothing, as MinTargetCapacity
   with SingleInstanceType and SingleAvailabilityZone asks), spot as a one-time spot market launch. A
   RunInstances capacity error (local mode's scripted pools, emulated_compute/moto_patches.py) becomes an
   entry of `Errors` for that override and the next is tried; the first that launches answers `Instances`.
   Other fleet types (maintain, request) are moto's own.
3. DeleteLaunchTemplateVersions is not implemented in moto (NotImplementedError): the launcher deletes each
   attempt's version once the fleet answered (a template holds at most 10,000 versions). Here the version is
   marked deleted and answered as AWS does (the default version is refused); moto still lists it, as its
   version numbers are list positions.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

from localmode import moto_pin

_CAPACITY_CODES = frozenset(
    {"InsufficientInstanceCapacity", "InstanceLimitExceeded", "MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow", "VcpuLimitExceeded"}
)
_patches: list[tuple[Any, str, Any]] = []


def install() -> None:
    if _patches:
        return
    moto_pin.check("localmode.moto_ec2", "moto/ec2/responses/fleets.py create_fleet and launch_templates.py create_launch_template_version")
    from moto.ec2.responses.fleets import Fleets
    from moto.ec2.responses.launch_templates import LaunchTemplates

    for owner, name, replacement in (
        (LaunchTemplates, "create_launch_template_version", _create_launch_template_version),
        (LaunchTemplates, "delete_launch_template_versions", _delete_launch_template_versions),
        (Fleets, "create_fleet", _create_fleet),
    ):
        _patches.append((owner, name, getattr(owner, name, None)))
        setattr(owner, name, replacement)


def uninstall() -> None:
    while _patches:
        owner, name, original = _patches.pop()
        if original is None:
            delattr(owner, name)
        else:
            setattr(owner, name, original)


def _original(name: str) -> Any:
    return next(original for _, patched, original in _patches if patched == name)


def _create_launch_template_version(self: Any) -> Any:
    source = self._get_param("SourceVersion")
    if not source:
        return _original("create_launch_template_version")(self)
    from moto.core.responses import ActionResult

    template = _template(self.ec2_backend, self._get_param("LaunchTemplateId"), self._get_param("LaunchTemplateName"))
    self.error_on_dryrun()
    data = {**template.get_version(_version_number(template, source)).data, **self._get_param("LaunchTemplateData", {})}
    version = template.create_version(data, self._get_param("VersionDescription"))
    return ActionResult(
        {
            "LaunchTemplateVersion": {
                "CreateTime": version.create_time,
                "CreatedBy": f"arn:{self.partition}:iam::{self.current_account}:root",
                "DefaultVersion": template.is_default(version),
                "LaunchTemplateData": version.data,
                "LaunchTemplateId": template.id,
                "LaunchTemplateName": template.name,
                "VersionDescription": version.description,
                "VersionNumber": version.number,
            }
        }
    )


def _delete_launch_template_versions(self: Any) -> Any:
    from moto.core.responses import ActionResult

    template = _template(self.ec2_backend, self._get_param("LaunchTemplateId"), self._get_param("LaunchTemplateName"))
    self.error_on_dryrun()
    done, refused = [], []
    for raw in self._get_param("LaunchTemplateVersion", []) or self._get_param("Versions", []):
        number = int(raw)
        which = {"LaunchTemplateId": template.id, "LaunchTemplateName": template.name, "VersionNumber": number}
        exists = 1 <= number <= len(template.versions)
        if number == int(template.default_version_number) or not exists:
            code = "InvalidLaunchTemplateVersion.DefaultVersion" if exists else "launchTemplateVersionDoesNotExist"
            refused.append({**which, "ResponseError": {"Code": code, "Message": f"version {number} cannot be deleted"}})
            continue
        template.versions[number - 1].deleted = True
        done.append(which)
    return ActionResult({"SuccessfullyDeletedLaunchTemplateVersions": done, "UnsuccessfullyDeletedLaunchTemplateVersions": refused})


def _create_fleet(self: Any) -> Any:
    if self._get_param("Type", if_none="maintain") != "instant":
        return _original("create_fleet")(self)
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError

    self.error_on_dryrun()
    target = self._get_param("TargetCapacitySpecification", {})
    count = int(target.get("TotalTargetCapacity", 1))
    lifecycle = "spot" if target.get("DefaultTargetCapacityType") == "spot" else "on-demand"
    instances: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for spec, override in _overrides(self._get_param("LaunchTemplateConfigs", [])):
        template = _template(self.ec2_backend, spec.get("LaunchTemplateId"), spec.get("LaunchTemplateName"))
        version = _version_number(template, spec.get("Version") or "$Default")
        data = {**template.get_version(version).data, **override}
        which = {"LaunchTemplateSpecification": {"LaunchTemplateId": template.id, "Version": str(version)}, "Overrides": override}
        try:
            reservation = self.ec2_backend.run_instances(
                data.get("ImageId"),
                count,
                _user_data(data.get("UserData")),
                [],
                instance_type=data.get("InstanceType", "m1.small"),
                is_instance_type_default=False,
                placement=override.get("AvailabilityZone"),
                subnet_id=override.get("SubnetId") or data.get("SubnetId"),
                security_group_ids=data.get("SecurityGroupIds", []),
                tags=_tags(data.get("TagSpecifications", [])),
                instance_market_options="spot" if lifecycle == "spot" else None,
                instance_initiated_shutdown_behavior=data.get("InstanceInitiatedShutdownBehavior"),
                metadata_options=data.get("MetadataOptions", {}),
                launch_template={"LaunchTemplateId": template.id, "Version": str(version)},
                iam_instance_profile_arn=(data.get("IamInstanceProfile") or {}).get("Arn"),
                region_name=self.region,
            )
        except EC2ClientError as exc:
            if exc.code not in _CAPACITY_CODES:
                raise
            errors.append({"LaunchTemplateAndOverrides": which, "Lifecycle": lifecycle, "ErrorCode": exc.code, "ErrorMessage": exc.message})
            continue
        profile = (data.get("IamInstanceProfile") or {}).get("Arn")
        for instance in reservation.instances:
            if profile:
                self.ec2_backend.associate_iam_instance_profile(instance_id=instance.id, iam_instance_profile_arn=profile)
        ids = [instance.id for instance in reservation.instances]
        launched = {"LaunchTemplateAndOverrides": which, "Lifecycle": lifecycle, "InstanceIds": ids}
        instances.append({**launched, "InstanceType": data.get("InstanceType")})
        break
    result: dict[str, Any] = {"FleetId": f"fleet-{uuid.uuid4()}", "Instances": instances, "Errors": errors}
    return ActionResult(result)


def _overrides(configs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(launch template spec, override) pairs in the order tried: by Priority (lower first), else as given."""
    pairs = [(config["LaunchTemplateSpecification"], override) for config in configs for override in (config.get("Overrides") or [{}])]
    ranked = sorted(enumerate(pairs), key=lambda row: (float(row[1][1].get("Priority", float("inf"))), row[0]))
    return [pair for _, pair in ranked]


def _template(backend: Any, template_id: str | None, name: str | None) -> Any:
    return backend.get_launch_template(template_id) if template_id else backend.get_launch_template_by_name(name)


def _version_number(template: Any, version: str) -> int:
    if version == "$Latest":
        return int(template.latest_version_number)
    if version == "$Default":
        return int(template.default_version_number)
    return int(version)


def _user_data(encoded: str | None) -> Any:
    """A launch template holds UserData base64-encoded; RunInstances' backend takes it as parse_user_data leaves it."""
    if not encoded:
        return None
    from moto.ec2.utils import parse_user_data

    base64.b64decode(encoded)  # a template with bad base64 would have been refused at creation on AWS
    return parse_user_data(encoded)


def _tags(specs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """TagSpecifications -> moto's {resource type: {key: value}}."""
    out: dict[str, dict[str, str]] = {}
    for spec in specs:
        out.setdefault(spec.get("ResourceType", "instance"), {}).update({t["Key"]: t["Value"] for t in spec.get("Tags", [])})
    return out
