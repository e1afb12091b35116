"""`pynvml` for a trainer process under test: tests/fake_nvml.py's FakeNvml over the devices in
FAKE_NVML_DEVICES (a JSON list of FakeNvml's device dicts); FAKE_NVML_DRIVER=unloaded (e.g. one job's
`training_config.environment`): NVML's init fails as on a host without the driver.

Only a test puts this folder on a PYTHONPATH (tests/e2e/dashboard/test_gpu_panel.py, first on its own
plane's, which the trainers it launches inherit); no deployment ships or names it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tests.fake_nvml import FakeNvml

_nvml = FakeNvml(json.loads(os.environ["FAKE_NVML_DEVICES"]), driver_loaded=os.environ.get("FAKE_NVML_DRIVER") != "unloaded")


def __getattr__(name: str) -> Any:
    return getattr(_nvml, name)
