"""A fake NVML (the pynvml calls trainer/telemetry.py makes) over devices whose readings a test sets.

Used in-process by tests/trainer/test_telemetry.py, and as the `pynvml` module of a real trainer process
by tests/nvml_site/pynvml.py (the dashboard's GPU panel e2e test puts that folder first on the plane's
PYTHONPATH, which its trainers inherit). Nothing outside tests/ names either.

A device is a dict: name, util (%), used_mib, total_mib (default 80 GiB), power_mw, sm_mhz; a missing
or null reading raises NotSupported, as NVML does for a field a device does not report.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

MIB = 1024 * 1024


class NotSupported(Exception):
    """pynvml's NVMLError_NotSupported, as far as the sampler cares."""


class NVMLError(Exception):
    """pynvml's NVMLError, e.g. NVMLError_DriverNotLoaded on a host without the driver."""


class FakeNvml:
    NVML_CLOCK_SM = 1

    def __init__(self, devices: list[dict[str, Any]], *, driver_loaded: bool = True) -> None:
        self.devices = devices
        self.driver_loaded = driver_loaded
        self.shut = False

    def nvmlInit(self) -> None:
        if not self.driver_loaded:
            raise NVMLError("Driver Not Loaded")
        self.shut = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def _get(self, handle: int, key: str) -> Any:
        value = self.devices[handle].get(key)
        if value is None:
            raise NotSupported(key)
        return value

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return str(self._get(handle, "name")).encode()  # older pynvml answers bytes

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=self._get(handle, "util"), memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        total = self.devices[handle].get("total_mib", 80 * 1024)
        return SimpleNamespace(used=self._get(handle, "used_mib") * MIB, total=total * MIB, free=0)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return int(self._get(handle, "power_mw"))

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return int(self._get(handle, "sm_mhz"))

    def nvmlShutdown(self) -> None:
        self.shut = True
