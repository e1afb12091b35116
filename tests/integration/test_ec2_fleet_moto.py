"""The EC2 launcher's fleet path on moto (docs/PLACEMENT.md, "EC2 Fleet"; localmode/moto_ec2.py): placement's
candidates x zones as one instant EC2 Fleet over a per-attempt launch template version, the instances it
returns, and each pool's capacity error from the fleet's Errors into pool health."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from functions.adapters.launchers.cloud import LaunchCapacityError
from functions.adapters.launchers.ec2 import EC2Launcher
from functions.service.placement import PlacementService, fleet_pools, placement_fields
from functions.service.ports import LaunchHandle, LaunchRequest, PoolFailure
from localmode import moto_ec2
from localmode.deploy.emulated_compute import moto_patches
from schemas.configs import ResourceConfig
from tests.cloud_fixtures import BUCKET, cloud_settings, make_launch_request
from tests.integration.test_launchers_moto import REGION, Clients
from tests.lifecycle_support import make_job, make_request
from tests.placement_support import InMemoryPoolHealth

TEMPLATE_AMI = "ami-0dlami0gpu0000000"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clients]:
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    installed_here = not moto_ec2._patches
    moto_ec2.install()
    try:
        with mock_aws():
            clients = Clients()
            clients.client("s3").create_bucket(Bucket=BUCKET)
            clients.client("ec2").create_launch_template(LaunchTemplateName="trainplane-gpu", LaunchTemplateData={"ImageId": TEMPLATE_AMI})
            yield clients
    finally:
        moto_patches.set_capacity_check(None)
        if installed_here:
            moto_ec2.uninstall()


def _no_room_for(*instance_types: str) -> None:
    """Local mode's capacity hook (emulated_compute/moto_patches.py): RunInstances of these types is EC2's capacity error."""
    moto_patches.set_capacity_check(lambda _backend, instance_type, _count, _kw: "no room" if instance_type in instance_types else None)


def _fleet_request(pools: tuple[tuple[str, str | None], ...], *, nodes: int = 1, spot: bool = True) -> LaunchRequest:
    request = make_launch_request(preemptible=spot, resources=ResourceConfig(gpu_count=8, gpu_type="H100", node_count=nodes))
    return LaunchRequest(**{**request.__dict__, "fleet_pools": pools})


def _launcher(aws: Clients, **settings: Any) -> EC2Launcher:
    profile = aws.client("iam").create_instance_profile(InstanceProfileName="trainplane-trainer")["InstanceProfile"]["Arn"]
    return EC2Launcher(cloud_settings(ec2_instance_profile_arn=profile, **settings), aws)


def test_one_fleet_takes_the_next_pool_when_the_first_has_no_capacity(aws: Clients) -> None:
    # Given H100 spot with no room and A100 spot with room, in two zones
    _no_room_for("p5.48xlarge")
    launcher = _launcher(aws)
    request = _fleet_request((("p5.48xlarge", "us-east-1a"), ("p4d.24xlarge", "us-east-1b")))
    # When the attempt launches
    handle = launcher.launch(request)
    # Then one fleet answered: the instance is the A100 pool's, spot, in its zone, with the attempt's user data,
    # tags and profile (carried by the attempt's launch template version over the deployment's AMI)
    ec2 = aws.client("ec2")
    instance = ec2.describe_instances(InstanceIds=[handle.run_id])["Reservations"][0]["Instances"][0]
    assert (instance["InstanceType"], instance["Placement"]["AvailabilityZone"]) == ("p4d.24xlarge", "us-east-1b")
    assert instance["InstanceLifecycle"] == "spot" and instance["ImageId"] == TEMPLATE_AMI
    assert instance["IamInstanceProfile"]["Arn"].endswith("instance-profile/trainplane-trainer")
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert (tags["trainplane:job-id"], tags["trainplane:attempt"]) == ("job-0a1b2c3d", "1")
    raw = ec2.describe_instance_attribute(InstanceId=handle.run_id, Attribute="userData")["UserData"]["Value"]
    assert request.run_spec_uri in base64.b64decode(raw).decode()
    # And the handle says where it landed and which pool failed, for placement's pool health
    assert (handle.extra["instance_type"], handle.extra["zone"]) == ("p4d.24xlarge", "us-east-1b")
    assert [(f.instance_type, f.zone, f.code) for f in PoolFailure.from_extra(handle.extra)] == [
        ("p5.48xlarge", "us-east-1a", "InsufficientInstanceCapacity")
    ]


def test_no_pool_with_capacity_is_a_capacity_error_naming_every_pool(aws: Clients) -> None:
    _no_room_for("p5.48xlarge", "p4d.24xlarge")
    launcher = _launcher(aws)
    with pytest.raises(LaunchCapacityError) as caught:
        launcher.launch(_fleet_request((("p5.48xlarge", "us-east-1a"), ("p4d.24xlarge", "us-east-1a"))))
    assert [f.instance_type for f in caught.value.failures] == ["p5.48xlarge", "p4d.24xlarge"]
    assert "p5.48xlarge/us-east-1a (InsufficientInstanceCapacity)" in str(caught.value)
    assert aws.client("ec2").describe_instances()["Reservations"] == []


def test_a_multi_node_fleet_starts_every_node_in_one_pool_and_writes_the_rendezvous(aws: Clients) -> None:
    launcher = _launcher(aws, ec2_placement_group="trainplane-cluster")
    handle = launcher.launch(_fleet_request((("p5.48xlarge", None), ("p4d.24xlarge", None)), nodes=2, spot=False))
    ids = handle.run_id.split(",")
    assert len(ids) == 2 and handle.extra["instance_count"] == "2"
    found = aws.client("ec2").describe_instances(InstanceIds=ids)["Reservations"][0]["Instances"]
    assert {i["InstanceType"] for i in found} == {"p5.48xlarge"} and all("InstanceLifecycle" not in i for i in found)
    body = aws.client("s3").get_object(Bucket=BUCKET, Key="jobs/job-0a1b2c3d/runs/001/rendezvous.json")["Body"].read()
    assert ids[0] in body.decode()


def test_each_attempt_gets_its_own_template_version_and_gives_it_back(aws: Clients) -> None:
    # Given the deployment's template at version 1
    ec2 = aws.client("ec2")
    launcher = _launcher(aws)
    # When two attempts launch through fleets
    launcher.launch(_fleet_request((("p5.48xlarge", None), ("p4d.24xlarge", None))))
    second = make_launch_request(attempt=2, preemptible=True, resources=ResourceConfig(gpu_count=8, gpu_type="H100"))
    launcher.launch(LaunchRequest(**{**second.__dict__, "fleet_pools": (("p5.48xlarge", None), ("p4d.24xlarge", None))}))
    # Then each made a version from the deployment's (its AMI kept), and deleted it after the fleet answered
    versions = ec2.describe_launch_template_versions(LaunchTemplateName="trainplane-gpu")["LaunchTemplateVersions"]
    made = [v for v in versions if v["VersionNumber"] > 1]
    assert len(made) == 2 and all(v["LaunchTemplateData"]["ImageId"] == TEMPLATE_AMI for v in made)
    assert all(getattr(v, "deleted", False) for v in _moto_versions()[1:])


def _moto_versions() -> list[Any]:
    from moto.ec2.models import ec2_backends

    backend = ec2_backends["123456789012"][REGION]
    template = backend.get_launch_template_by_name("trainplane-gpu")
    return list(template.versions)


def test_the_fleets_errors_block_their_pools_and_the_try_moves_to_the_pool_that_launched(aws: Clients) -> None:
    # Given a placed job whose attempt's fleet is H100 spot then A100 spot (same shape), H100 without room
    _no_room_for("p5.48xlarge")
    candidates = [
        {"gpu_type": "H100", "gpus_per_node": 8, "purchase": "spot"},
        {"gpu_type": "A100", "gpus_per_node": 8, "purchase": "spot"},
        {"gpu_type": "A100", "gpus_per_node": 8, "purchase": "on_demand"},
    ]
    job = make_job(make_request(resource_config={"gpu_count": 8, "placement": {"candidates": candidates}}))
    health = InMemoryPoolHealth()
    service = PlacementService(health)
    job = job.model_copy(update={"attempt": 1, **placement_fields(service.choose(job, 1))})
    assert fleet_pools(job) == (("p5.48xlarge", None), ("p4d.24xlarge", None))
    # When the launcher's fleet lands on A100 and placement reads the handle
    handle = _launcher(aws).launch(_fleet_request(fleet_pools(job)))
    landed = LaunchHandle.from_dict(handle.to_dict())
    assert landed.extra["zone"]  # the zone EC2 chose (the job allows any)
    changes = service.on_launched(job, landed.extra["instance_type"], landed.extra["zone"], PoolFailure.from_extra(landed.extra))
    job = job.model_copy(update=placement_fields(changes))
    # Then H100 spot is blocked for a capacity error, and the try is A100 spot's (a preemption counts there)
    assert health.pools["ec2/p5.48xlarge/any/spot"].capacity_errors == 1
    assert job.placement is not None and job.placement.pools_blocked == ["ec2/p5.48xlarge/any/spot"]
    current = job.placement.tries[-1]
    assert (current.pool, current.candidate, current.instance_type) == ("ec2/p4d.24xlarge/any/spot", 1, "p4d.24xlarge")


def test_plain_moto_fails_the_fleet_path_as_docs_placement_md_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reason for localmode/moto_ec2.py: when a moto upgrade makes this fail, the patch can go."""
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    reinstall = bool(moto_ec2._patches)  # moto_hooks.install() may have installed it for the process
    moto_ec2.uninstall()
    try:
        _plain_moto_fleet()
    finally:
        if reinstall:
            moto_ec2.install()


def _plain_moto_fleet() -> None:
    with mock_aws():
        ec2 = Clients().client("ec2")
        template = ec2.create_launch_template(LaunchTemplateName="t", LaunchTemplateData={"ImageId": TEMPLATE_AMI})["LaunchTemplate"]
        made = ec2.create_launch_template_version(
            LaunchTemplateId=template["LaunchTemplateId"], SourceVersion="1", LaunchTemplateData={"UserData": "ZWNobw=="}
        )["LaunchTemplateVersion"]
        # moto keeps only the given fields: no ImageId from the source version
        assert "ImageId" not in made["LaunchTemplateData"]
        with pytest.raises(Exception, match="ImageId"):
            ec2.create_fleet(
                Type="instant",
                TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
                LaunchTemplateConfigs=[
                    {
                        "LaunchTemplateSpecification": {"LaunchTemplateId": template["LaunchTemplateId"], "Version": "2"},
                        "Overrides": [{"InstanceType": "p5.48xlarge"}],
                    }
                ],
            )
