"""The trainer the fuzzing plane runs (tests/e2e/test_fuzz_api.py): tests/fake_trainer.py, kept short.

Jobs the fuzzer submits carry arbitrary hyperparameters, some of which the fake trainer reads
(max_steps, fake_step_seconds, fake_hang_at_step, ...): a generated "max_steps": "99999999" would keep
a process alive for days. This runs the fake trainer's contract (events, a checkpoint, the export, the
exit codes) with those knobs (hyperparameters and environment) replaced by a run of two quick steps, so
the plane stays light whatever the fuzzer sends.
"""

from __future__ import annotations

import json
import os
import sys

from schemas.trainer import ENV_RUN_SPEC
from tests import fake_trainer

LIGHT_RUN = {"max_steps": "2"}  # a hyperparameter the real trainer knows too (fake_step_seconds: its default)


def main() -> int:
    spec = json.loads(fake_trainer.read_text(os.environ[ENV_RUN_SPEC]))
    spec["training_config"]["hyperparameters"] = dict(LIGHT_RUN)
    spec["training_config"]["environment"] = {}  # where fake_trainer may also read its knobs from
    os.environ[ENV_RUN_SPEC] = json.dumps(spec)  # fake_trainer.read_text takes inline JSON as well
    return int(fake_trainer.main())


if __name__ == "__main__":
    sys.exit(main())
