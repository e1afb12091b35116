"""Which Service Quotas a deployment's instance types need, and the request that raises one.

SageMaker counts instances per type ("ml.g5.xlarge for training job usage"); EC2 counts the vCPUs of
running On-Demand instances per family group (P; G and VT; the standard families), so one quota
covers several types and the largest single job of that group is what it must allow. Every new
account starts with 0 for most GPU types: a first job would fail with ResourceLimitExceeded.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.deployment import InstanceUse
from trainplane.doctor.ports import Quota

SAGEMAKER = "sagemaker"
EC2 = "ec2"
# EC2's On-Demand vCPU quotas by the family's first letter(s) (AWS's quota names; the codes are stable).
_EC2_GROUPS = (
    (("p",), "L-417A185B", "Running On-Demand P instances"),
    (("g", "vt"), "L-DB2E81BA", "Running On-Demand G and VT instances"),
    (("a", "c", "d", "h", "i", "m", "r", "t", "z"), "L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
)


@dataclass(frozen=True)
class Need:
    service_code: str
    quota_name: str
    quota_code: str | None  # known for EC2; SageMaker's are looked up by name
    amount: int
    unit: str  # "instances" or "vCPUs"
    used_by: tuple[str, ...]


def needs(uses: list[InstanceUse]) -> list[Need]:
    found: dict[tuple[str, str], Need] = {}
    for use in uses:
        if use.engine == "sagemaker":
            key = (SAGEMAKER, f"{use.instance_type} for training job usage")
            need = Need(SAGEMAKER, key[1], None, use.instances, "instances", (use.instance_type,))
        else:
            code, name = _ec2_group(use.instance_type)
            key = (EC2, name)
            need = Need(EC2, name, code, use.vcpus * use.instances, "vCPUs", (use.instance_type,))
        known = found.get(key)
        if known is not None:
            need = Need(
                need.service_code, need.quota_name, need.quota_code, max(known.amount, need.amount), need.unit, known.used_by + need.used_by
            )
        found[key] = need
    return list(found.values())


def _ec2_group(instance_type: str) -> tuple[str, str]:
    family = instance_type.split(".", 1)[0]
    for prefixes, code, name in _EC2_GROUPS:
        if (family.startswith("vt") and "vt" in prefixes) or family[:1] in prefixes:
            return code, name
    return _EC2_GROUPS[-1][1], _EC2_GROUPS[-1][2]


def find(quotas: list[Quota], need: Need) -> Quota | None:
    for quota in quotas:
        if (need.quota_code and quota.code == need.quota_code) or quota.name == need.quota_name:
            return quota
    return None


def increase_command(need: Need, quota: Quota | None, region: str) -> str:
    code = quota.code if quota is not None else (need.quota_code or "<code of '" + need.quota_name + "'>")
    return (
        f"aws service-quotas request-service-quota-increase --region {region} --service-code {need.service_code} "
        f"--quota-code {code} --desired-value {need.amount}"
    )
