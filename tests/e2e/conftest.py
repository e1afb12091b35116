"""e2e fixtures: a real `trainplane up --port 0` in a subprocess, with its own state dir.

- `local_plane` (session): one shared plane serving the real API. Use it for anything that does not
  restart or kill the process; create your own jobs (other tests share it), e.g.
      r = local_plane.request("POST", "/jobs", json=spec)            # signed as alice
      r = local_plane.request("GET", f"/jobs/{job_id}", principal="admin")
      s3 = local_plane.client("s3")                                   # the emulated AWS
- every plane allows jobs to name local files under the repo's `examples/` and pytest's base temp dir
  (`--allow-dir`), never under its state dir: put a test's local data in tmp_path / tmp_path_factory.
- `local_plane_factory` (session): `make(api_handler=None, state_dir=None, env=None, port=0, args=None)` starts a plane
  of your own (restarts, kill -9, a stand-in handler, extra TRAINPLANE_* variables, more `up` options such as
  `--gpus H100=2 --principal bob`); every plane it made is stopped at the end of the session. For a plane
  shared by one module's tests use `module_plane_factory` (stopped after the module), for one test's own
  plane `plane_factory` (stopped after the test): idle planes left running load the rest of the suite.

A plane: `api_url`, `aws_endpoint_url`, `region`, `bucket`, `credentials` (endpoint.json's list),
`state_dir`, `endpoint` (the parsed endpoint.json); `auth(name)`, `request(...)`, `client(service)`;
`stop()` (SIGTERM, waits), `kill()` (SIGKILL), `start()`, `restart()` (stop + start, same state dir).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
from requests_aws4auth import AWS4Auth

REPO_ROOT = Path(__file__).resolve().parents[2]
IAM_CALLS_FILE_ENV = "TRAINPLANE_IAM_CALLS_FILE"  # localmode.iam_calls.CALLS_FILE_ENV
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


class LocalPlane:
    def __init__(
        self,
        state_dir: Path,
        api_handler: str | None = None,
        env: dict[str, str] | None = None,
        port: int = 0,
        allow_dirs: list[Path] | None = None,
        args: list[str] | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.args = list(args or [])  # more `trainplane up` options, e.g. --gpus H100=2 --principal bob
        # Local files jobs may name (docs/SECURITY.md): tests put their data under these.
        self.allow_dirs = list(allow_dirs or [])
        self.api_handler = api_handler
        self.port = port
        self.extra_env = dict(env or {})  # e.g. TRAINPLANE_LOCAL_* knobs of a plane of one's own
        self.log_path = state_dir.parent / f"{state_dir.name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.endpoint: dict[str, Any] = {}
        self._sessions = threading.local()  # requests.Session is not thread-safe: one per thread

    # --- what endpoint.json says ---------------------------------------------------------------

    @property
    def endpoint_path(self) -> Path:
        return self.state_dir / "endpoint.json"

    @property
    def api_url(self) -> str:
        return str(self.endpoint["api_url"])

    @property
    def aws_endpoint_url(self) -> str:
        return str(self.endpoint["aws_endpoint_url"])

    @property
    def region(self) -> str:
        return str(self.endpoint["region"])

    @property
    def bucket(self) -> str:
        return str(self.endpoint["bucket"])

    @property
    def credentials(self) -> list[dict[str, str]]:
        return list(self.endpoint["credentials"])

    def principal(self, name: str) -> dict[str, str]:
        return next(c for c in self.credentials if c["name"] == name)

    # --- talking to it -------------------------------------------------------------------------

    def auth(self, name: str = "alice") -> AWS4Auth:
        p = self.principal(name)
        return AWS4Auth(p["access_key_id"], p["secret_access_key"], self.region, "execute-api")

    def request(self, method: str, path: str, *, principal: str | None = "alice", timeout: float = 30, **kwargs: Any) -> requests.Response:
        """A request to the API, SigV4-signed as `principal` (None: unsigned)."""
        auth = self.auth(principal) if principal else None
        session = getattr(self._sessions, "session", None)
        if session is None:
            session = self._sessions.session = requests.Session()
        return session.request(method, self.api_url + path, auth=auth, timeout=timeout, **kwargs)

    def client(self, service: str) -> Any:
        p = self.principal("admin")
        return boto3.client(
            service,
            endpoint_url=self.aws_endpoint_url,
            region_name=self.region,
            aws_access_key_id=p["access_key_id"],
            aws_secret_access_key=p["secret_access_key"],
        )

    # --- its life ------------------------------------------------------------------------------

    def command(self) -> list[str]:
        common = ["--port", str(self.port), "--state-dir", str(self.state_dir)]
        for directory in self.allow_dirs:
            common += ["--allow-dir", str(directory)]
        common += self.args
        if self.api_handler is None:
            return [sys.executable, "-m", "trainplane", "up", *common]  # the real CLI, the real API
        return [sys.executable, "-m", "localmode", *common, "--api-handler", self.api_handler]

    def start(self) -> LocalPlane:
        assert self.process is None or self.process.poll() is not None, "already running"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # A kill -9 leaves the old endpoint.json behind: only a new one (new ports) means "ready".
        stale = self.endpoint_path.read_bytes() if self.endpoint_path.exists() else None
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINPLANE_", "AWS_", "MOTO_"))}
        if IAM_CALLS_FILE_ENV in os.environ:  # the run's record of AWS calls (make iam-check) includes the plane's
            env[IAM_CALLS_FILE_ENV] = os.environ[IAM_CALLS_FILE_ENV]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        env.update(self.extra_env)
        log = open(self.log_path, "ab")  # noqa: SIM115 (the child writes it; a pipe nobody reads would fill up)
        self.process = subprocess.Popen(self.command(), cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"trainplane up exited with {self.process.returncode} before it was ready:\n{self.log_tail()}")
            if self.endpoint_path.exists() and (current := self.endpoint_path.read_bytes()) != stale:
                self.endpoint = json.loads(current)
                return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"trainplane up was not ready within {START_TIMEOUT_S:.0f}s:\n{self.log_tail()}")

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit status."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"trainplane up did not stop within {STOP_TIMEOUT_S:.0f}s of SIGTERM:\n{self.log_tail()}") from None

    def kill(self) -> None:
        """kill -9: no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def restart(self) -> LocalPlane:
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


PlaneFactory = Callable[..., LocalPlane]


def _stop_all(planes: list[LocalPlane]) -> None:
    """SIGTERM to all first, then wait: they shut down in parallel."""
    for plane in planes:
        if plane.process is not None and plane.process.poll() is None:
            plane.process.send_signal(signal.SIGTERM)
    for plane in planes:
        try:
            plane.stop()
        except RuntimeError:
            plane.kill()


@pytest.fixture(scope="session")
def local_plane_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlaneFactory]:
    planes: list[LocalPlane] = []

    def make(
        api_handler: str | None = None,
        state_dir: Path | None = None,
        env: dict[str, str] | None = None,
        port: int = 0,
        args: list[str] | None = None,
    ) -> LocalPlane:
        # The repo's examples/ and pytest's base temp dir (tmp_path, tmp_path_factory) are allowed; each
        # plane's state dir lies inside the latter and is refused all the same (docs/SECURITY.md).
        allow = [REPO_ROOT / "examples", tmp_path_factory.getbasetemp()]
        plane = LocalPlane(state_dir or tmp_path_factory.mktemp("plane") / "state", api_handler, env, port, allow, args)
        planes.append(plane)
        return plane.start()

    yield make
    _stop_all(planes)


def _scoped(factory: PlaneFactory) -> tuple[PlaneFactory, list[LocalPlane]]:
    started: list[LocalPlane] = []

    def make(**kwargs: Any) -> LocalPlane:
        plane = factory(**kwargs)
        started.append(plane)
        return plane

    return make, started


@pytest.fixture(scope="module")
def module_plane_factory(local_plane_factory: PlaneFactory) -> Iterator[PlaneFactory]:
    """As `local_plane_factory`, its planes stopped once the module's tests are done: an idle plane still runs
    its scheduler, reconciler and publisher (~2% of a core each), and a session holds two dozen of them."""
    make, started = _scoped(local_plane_factory)
    yield make
    _stop_all(started)


@pytest.fixture
def plane_factory(local_plane_factory: PlaneFactory) -> Iterator[PlaneFactory]:
    """As `local_plane_factory`, its planes stopped at the end of the test."""
    make, started = _scoped(local_plane_factory)
    yield make
    _stop_all(started)


@pytest.fixture(scope="session")
def local_plane(local_plane_factory: PlaneFactory) -> LocalPlane:
    """The shared plane with the real API (functions.handlers.api)."""
    return local_plane_factory()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # schemathesis' `schema.parametrize()` makes one item per API operation, each named for it
    # (`test_every_operation_holds_its_contract[GET /jobs]`), but under pytest 9 all of them keep the test
    # function's node id (schemathesis still writes the id to `_nodeid`, which pytest 9 no longer reads).
    # pytest-xdist keys its work by node id, so `make test`'s workers ran one of them (the fuzz module's
    # test_the_fuzz_run_reached_real_objects caught it). Each gets the id pytest gives a parametrized item.
    for item in items:
        if type(item).__name__ == "SchemathesisFunction" and item.parent is not None and not item.nodeid.endswith("]"):
            item._id = item.parent.id.child(item.name)
