"""The one moto that local mode is written against, and what local mode switches on in it.

Three modules reach into moto's internals (moto_hooks.py: locks and the journal, with moto_journal_ops.py; moto_lambda.py: the
in-process Lambda and the Step Functions callbacks; deploy/emulated_compute/: SageMaker's training jobs;
moto_ec2.py: EC2 Fleet and launch template versions).
Each refuses to start on another moto than this pin (pyproject.toml pins the same version; a test
compares them) with `check`, naming what to re-verify before the pin moves.
"""

from __future__ import annotations

import moto

PINNED_MOTO_VERSION = "5.2.5"

# What local mode and the tests switch on in moto (docs/LOCAL_AWS.md): Step Functions that really execute
# the ASL, and the no-Docker Lambda backend (no Docker daemon; the lifecycle deployer runs handlers in-process).
MOTO_CONFIG: dict[str, dict[str, bool]] = {"lambda": {"use_docker": False}, "stepfunctions": {"execute_state_machine": True}}


class MotoVersionError(RuntimeError):
    """The installed moto is not the pinned one."""


def check(component: str, internals: str) -> None:
    """MotoVersionError unless the installed moto is the pinned one: `component` patches `internals`."""
    if moto.__version__ != PINNED_MOTO_VERSION:
        raise MotoVersionError(
            f"{component} is written against moto {PINNED_MOTO_VERSION}'s internals but moto {moto.__version__} is installed: "
            f"re-check {internals}, then move the pin (localmode/moto_pin.py and pyproject.toml's moto[server]=={PINNED_MOTO_VERSION})"
        )
