"""`trainplane up`: the whole control plane on this machine, until SIGINT/SIGTERM.

Start-up, in this order (each step needs the previous one):
1. lock the state dir (one `up` per state dir: two would interleave one journal), load the principals;
2. moto's server on loopback, with the lock + journal hooks installed (journaling still off);
3. the deployers (localmode/deploy): tables, buckets, state machine ... as the cloud stack has them;
4. the journal folded, replayed into moto, compacted; from here every write is journaled;
5. the handlers' TRAINPLANE_* environment exported; the deployers' background threads; the in-process
   API handler; the front door; and last endpoint.json, atomically: it appears only when all of the
   above serves. Shutdown undoes it in reverse, endpoint.json first.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import importlib
import json
import logging
import os
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any

from functions import constants
from functions.adapters import aws as aws_clients
from functions.catalog.quotas import parse_gpu_inventory
from functions.settings import PREFIX
from localmode import iam_calls, moto_hooks
from localmode.credentials import ADMIN, Principal, dashboard_user_specs, load_or_create, principal_names
from localmode.dashboard import DashboardSite
from localmode.deploy.user_pool import DashboardUser
from localmode.frontdoor import FrontDoor, Handler
from localmode.journal import Journal
from localmode.moto_inprocess import InProcessAws
from localmode.server import LOOPBACK, EmulatedAws

logger = logging.getLogger("localmode")
ALLOWED_DIRS_ENV = PREFIX + "LOCAL_ALLOWED_DIRS"

DEFAULT_API_HANDLER = "functions.handlers.api:lambda_handler"
ENDPOINT_FILE = "endpoint.json"
LOCK_FILE = ".lock"
JOURNAL_DIR = "journal"
COMPUTE_CHOICES = ("local", "sagemaker", "ec2")
# The control plane's own identity towards the emulated AWS (moto accepts any key; never a user's).
_CONTROL_PLANE_KEY = "local-control-plane"
# "0" sends the in-process handlers' AWS calls over HTTP to moto's server, as before moto_inprocess.py
# (to compare, or to rule it out); anything else, or unset, calls moto in-process.
IN_PROCESS_AWS_ENV = PREFIX + "LOCAL_IN_PROCESS_AWS"


def run_up(
    host: str,
    port: int,
    state_dir: Path,
    compute: str = "local",
    *,
    api_handler: str = DEFAULT_API_HANDLER,
    exit_process: bool = True,
    allow_dirs: Sequence[Path] = (),
    gpus: str = "",
    capacity_pools: Path | None = None,
    principals: Sequence[str] = (),
    dashboard_users: Sequence[str] = (),
) -> None:
    """Serve until SIGINT/SIGTERM. `port=0` picks a free port (endpoint.json tells which).

    With `exit_process` (the default: this is a process's main loop) the process ends right after the
    orderly shutdown, without the interpreter's teardown of moto's in-memory world, which takes seconds
    and holds nothing that must survive: the journal is on disk and endpoint.json is gone by then.
    """
    _configure_logging()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logger.info("received %s, shutting down", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    plane = LocalPlane(
        host,
        port,
        Path(state_dir),
        compute=compute,
        api_handler=api_handler,
        allow_dirs=allow_dirs,
        gpus=gpus,
        capacity_pools=capacity_pools,
        principals=principals,
        dashboard_users=dashboard_users,
    )
    try:
        plane.start()
        print(f"trainplane local mode: API {plane.api_url}  AWS {plane.aws_endpoint_url}  state {plane.state_dir}", flush=True)
        print(f"endpoint and credentials: {plane.endpoint_path}  (Ctrl-C to stop)", flush=True)
        shown = os.pathsep.join(str(d) for d in plane.allowed_dirs) or "none (trainplane up --allow-dir DIR)"
        print(f"local files jobs may name: {shown}", flush=True)
        print(f"dashboard: {plane.api_url}/  (`trainplane dashboard` opens it signed in)", flush=True)
        while not stop.wait(0.2):
            pass
    finally:
        plane.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if exit_process:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


class LocalPlane:
    """Local mode's parts, started and stopped in order. run_up() drives one per process."""

    def __init__(
        self,
        host: str,
        port: int,
        state_dir: Path,
        *,
        compute: str = "local",
        api_handler: str = DEFAULT_API_HANDLER,
        allow_dirs: Sequence[Path] = (),
        gpus: str = "",
        capacity_pools: Path | None = None,
        principals: Sequence[str] = (),
        dashboard_users: Sequence[str] = (),
    ) -> None:
        if compute not in COMPUTE_CHOICES:
            raise ValueError(f"compute: must be one of {', '.join(COMPUTE_CHOICES)}, not {compute!r}")
        if capacity_pools is not None and compute != "ec2":
            raise ValueError("capacity_pools: scripted capacity pools are EC2's (trainplane up --compute ec2)")
        self.capacity_pools = capacity_pools
        parse_gpu_inventory(gpus)  # a bad --gpus fails now, not in the first pass
        self.gpus = gpus
        self.principal_names = principal_names(principals)  # a bad --principal fails now too
        self.dashboard_groups = dashboard_user_specs(dashboard_users)  # --dashboard-user NAME:GROUP,...: likewise
        self.host = host
        self.port = port
        self.state_dir = state_dir.resolve()
        # Directories whose files jobs may name (docs/SECURITY.md): --allow-dir, then the environment.
        self.allowed_dirs = allowed_dirs(allow_dirs, os.environ.get(ALLOWED_DIRS_ENV, ""))
        self.compute = compute
        self.api_handler = api_handler
        self.endpoint_path = self.state_dir / ENDPOINT_FILE
        self.principals: list[Principal] = []
        self.aws = EmulatedAws()
        self.journal: Journal | None = None
        self.in_process_aws: InProcessAws | None = None
        self.front_door: FrontDoor | None = None
        self.ctx: Any = None
        self._lock_file: IO[str] | None = None
        self._started: list[str] = []

    @property
    def api_url(self) -> str:
        assert self.front_door is not None
        shown = LOOPBACK if self.host in ("", "0.0.0.0", "::") else self.host
        if ":" in shown:
            shown = f"[{shown}]"
        return f"http://{shown}:{self.front_door.port}"

    @property
    def aws_endpoint_url(self) -> str:
        return self.aws.endpoint_url

    def start(self) -> None:
        from localmode.deploy import LocalContext, deploy_all  # localmode/deploy: local-mode-only, loads with it

        # Before any boto3 session exists: make iam-check records this process's calls too.
        iam_calls.install_from_env()
        _private_dir(self.state_dir)
        self._lock_state_dir()
        self._remove_stale_endpoint()
        self.principals = load_or_create(self.state_dir, self.principal_names, tuple(self.dashboard_groups))
        admin = next(p for p in self.principals if p.name == ADMIN)
        # Bound now, served at the end: a busy port fails in a second, not after the deployers.
        site = DashboardSite(state_dir=self.state_dir, principals=self.principals, region=constants.LOCAL_REGION)
        self.front_door = FrontDoor(
            self.host,
            self.port,
            principals=self.principals,
            region=constants.LOCAL_REGION,
            account_id=constants.LOCAL_ACCOUNT_ID,
            site=site,
        )
        self._started.append("front_door")

        moto_hooks.install()
        self.aws.start()
        self._started.append("aws")
        _set_aws_environment(self.aws.endpoint_url)
        if os.environ.get(IN_PROCESS_AWS_ENV, "1") != "0":
            # Before anything creates the composition's clients: they all get it.
            self.in_process_aws = InProcessAws(self.aws.endpoint_url)
            aws_clients.add_client_hook(self.in_process_aws.attach)

        self.ctx = LocalContext(
            endpoint_url=self.aws.endpoint_url,
            state_dir=self.state_dir,
            compute=self.compute,
            env={k: v for k, v in os.environ.items() if k.startswith(PREFIX)},
            capacity_pools=self.capacity_pools,
            dashboard_users=[
                DashboardUser(p.name, p.cognito_identity_id, self.dashboard_groups.get(p.name, ()))
                for p in self.principals
                if p.cognito_identity_id is not None
            ],
        )
        deploy_all(self.ctx)
        self.front_door.cognito_providers.update(self.ctx.user_pool.providers)  # dashboard users, as API Gateway names them

        self.journal = Journal(self.state_dir / JOURNAL_DIR)
        state = self.journal.fold()
        self.ctx.restored = moto_hooks.restore(state, self.journal)
        self.journal.compact(state)
        moto_hooks.attach(self.journal)
        self._started.append("journal")
        logger.info("restored from %s: %s", self.journal.path, self.ctx.restored)

        # The handlers' environment, complete before anything in-process can read settings (once).
        admins = [a for a in self.ctx.env.get(PREFIX + "ADMIN_ARNS", "").split(",") if a]
        self.ctx.env[PREFIX + "ADMIN_ARNS"] = ",".join(dict.fromkeys([admin.arn, *admins]))
        self.ctx.env.setdefault(PREFIX + "COMPUTE", self.compute)
        if self.gpus:  # --gpus: the scheduler's emulated inventory (functions/service/scheduler.py LocalCapacity)
            self.ctx.env[PREFIX + "LOCAL_GPU_INVENTORY"] = self.gpus
        # Path confinement: local files only under the allowed directories, never the state directory.
        self.ctx.env[PREFIX + "LOCAL_STATE_DIR"] = str(self.state_dir)
        self.ctx.env[ALLOWED_DIRS_ENV] = os.pathsep.join(str(d) for d in self.allowed_dirs)
        self.ctx.env.setdefault(PREFIX + "DASHBOARD_URL", self.api_url)  # events link to the dashboard it serves
        os.environ.update(self.ctx.env)

        self.ctx.start_background()
        self._started.append("background")
        handler = _import_handler(self.api_handler)
        # Everything alive now (moto's backends, botocore's models, pydantic's schemas: ~0.4 M objects)
        # lives as long as the process: out of the collector's sight, a full collection no longer walks
        # them all, which was a stall of a few hundred ms in the middle of serving.
        gc.collect()
        gc.freeze()
        self.front_door.start(handler)
        from localmode.deploy import stack

        stack.publish(self.ctx, self.api_url)  # the outputs `trainplane doctor` reads, as a cloud stack's
        self._write_endpoint()
        self._started.append("endpoint")

    def stop(self) -> None:
        """Reverse order of start; safe after a partial start."""
        began = time.monotonic()
        if "endpoint" in self._started:
            self.endpoint_path.unlink(missing_ok=True)
        if "front_door" in self._started and self.front_door is not None:
            self.front_door.stop()
        if "background" in self._started:
            self.ctx.shutdown()
        if "journal" in self._started:
            moto_hooks.detach()
        if self.journal is not None:
            self.journal.close()
        if self.in_process_aws is not None:
            aws_clients.remove_client_hook(self.in_process_aws.attach)
            self.in_process_aws = None
        if "aws" in self._started:
            self.aws.stop()
        self._started.clear()
        if self._lock_file is not None:
            self._lock_file.close()  # releases the flock
            self._lock_file = None
        logger.info("stopped in %.1fs", time.monotonic() - began)

    def endpoint_document(self) -> dict[str, Any]:
        """endpoint.json: docs/CONTRACTS.md's shape, plus who wrote it (`pid`, `hostname`), so that a reader
        can tell a stale file (its process killed with -9) from a live one (trainplane/endpoint.py)."""
        return {
            "api_url": self.api_url,
            "region": self.ctx.region,
            "aws_endpoint_url": self.aws.endpoint_url,
            "bucket": self.ctx.settings().artifacts_bucket,
            "stack": constants.LOCAL_STACK_NAME,
            "event_bus": self.ctx.settings().trainplane_bus_name,
            "credentials": [p.public() for p in self.principals],
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
        }

    def _remove_stale_endpoint(self) -> None:
        # We hold the state dir's lock, so no live `up` wrote what is there: its process died without
        # shutting down (kill -9, a crash). Gone now, so that nobody reads it while this one starts.
        for leftover in (self.endpoint_path, self.endpoint_path.with_name(ENDPOINT_FILE + ".tmp")):
            if leftover.exists():
                print(f"trainplane local mode: replacing the stale {leftover} (its process is gone)", flush=True)
                leftover.unlink(missing_ok=True)

    def _write_endpoint(self) -> None:
        tmp = self.endpoint_path.with_name(ENDPOINT_FILE + ".tmp")
        tmp.unlink(missing_ok=True)  # O_CREAT keeps an existing file's mode: start from none
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # it holds the secret keys
        with os.fdopen(fd, "w") as fh:
            json.dump(self.endpoint_document(), fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.endpoint_path)

    def _lock_state_dir(self) -> None:
        self._lock_file = open(self.state_dir / LOCK_FILE, "a+")  # noqa: SIM115 (held for the process's life)
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.seek(0)
            holder = self._lock_file.read().strip() or "another process"
            self._lock_file.close()
            self._lock_file = None
            raise RuntimeError(f"state dir {self.state_dir} is in use by a running `trainplane up` (pid {holder})") from None
        self._lock_file.seek(0)
        self._lock_file.truncate()
        self._lock_file.write(str(os.getpid()))
        self._lock_file.flush()


def allowed_dirs(given: Sequence[Path], from_env: str) -> list[Path]:
    """--allow-dir values and TRAINPLANE_LOCAL_ALLOWED_DIRS (os.pathsep-separated), absolute and resolved."""
    dirs = [*given, *(Path(d) for d in from_env.split(os.pathsep) if d)]
    return list(dict.fromkeys(d.expanduser().resolve() for d in dirs))


def _private_dir(path: Path) -> None:
    """The state dir holds the principals' secret keys and every job's data: owner-only (0700)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        logger.warning("state dir %s was readable by others (mode %o): now 0700", path, mode)
        path.chmod(0o700)


def _set_aws_environment(endpoint_url: str) -> None:
    """Every boto3 client this process creates talks to the emulated AWS, never to a real account."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        os.environ.pop(name, None)
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": _CONTROL_PLANE_KEY,
            "AWS_SECRET_ACCESS_KEY": _CONTROL_PLANE_KEY,
            "AWS_DEFAULT_REGION": constants.LOCAL_REGION,
            "AWS_REGION": constants.LOCAL_REGION,
            "AWS_ENDPOINT_URL": endpoint_url,
            "AWS_EC2_METADATA_DISABLED": "true",
            "POWERTOOLS_SERVICE_NAME": constants.SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": constants.METRICS_NAMESPACE,
            # No X-Ray daemon here.
            "POWERTOOLS_TRACE_DISABLED": "true",
        }
    )


def _import_handler(spec: str) -> Handler:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
        handler = getattr(module, attr or "lambda_handler")
    except (ImportError, AttributeError) as exc:
        raise RuntimeError(f"the API handler {spec!r} cannot be loaded: {exc}") from exc
    if not callable(handler):
        raise RuntimeError(f"the API handler {spec!r} is not callable")
    return handler


def _configure_logging() -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with contextlib.suppress(Exception):
        logging.getLogger("botocore").setLevel(logging.WARNING)
