"""Python loads this at start-up in the trainers local mode's emulated compute starts while `make iam-check`
records (localmode.iam_calls.trainer_environment puts this folder on their PYTHONPATH): the trainer's own
AWS calls are recorded as its role's (the SageMaker execution role, the EC2 instance role)."""

import os
import sys

_role = os.environ.get("TRAINPLANE_IAM_PROCESS_ROLE")
_path = os.environ.get("TRAINPLANE_IAM_CALLS_FILE")
if _role and _path:
    _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if _root not in sys.path:
        sys.path.append(_root)
    from localmode import iam_calls

    iam_calls.install_process(_path, _role, os.environ.get("TRAINPLANE_IAM_PROCESS_NAMES", '{"compute": "local", "tokens": []}'))
