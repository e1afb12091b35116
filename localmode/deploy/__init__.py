"""The local deployment: the cloud stack's resources, created in the emulated AWS by `trainplane up`.

`deploy_all(ctx)` runs DEPLOYERS in order. A deployer is a function `deploy(ctx: LocalContext) -> None`
that creates its resources through `ctx.client(...)` (boto3 against moto, exactly as a deployed stack
would hold them: names from functions/constants.py), publishes the settings the in-process handlers
need with `ctx.set_setting(...)`, and registers what must run while local mode serves:

- `ctx.add_background(name, target)`: `target(stop: threading.Event)` runs in a daemon thread started
  AFTER the journal has been restored (so it sees the restored jobs) and the handlers' TRAINPLANE_*
  environment has been exported (so settings read in it are complete), before the front door opens;
  it must return soon after `stop` is set.
- `ctx.on_shutdown(fn)`: called once on shutdown, newest first, after the front door has closed.

Deployers run on every start, against a fresh (empty) moto: create, don't check-then-skip. Items and
objects are NOT created here; the journal restores them afterwards (`ctx.restored` says what came back,
for a deployer's background thread that reconciles, e.g. executions lost with the old process).

To add a deployer: write `localmode/deploy/<name>.py` with `deploy(ctx)`, and append it to DEPLOYERS below.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from functions import constants
from functions.settings import PREFIX, Settings
from localmode.deploy import emulated_compute, event_bus, lifecycle, retraining, storage, sweeps, trainer_reports, user_pool, webhooks
from localmode.deploy.user_pool import DashboardUser, UserPool

logger = logging.getLogger(__name__)

Deployer = Callable[["LocalContext"], None]
BackgroundTarget = Callable[[threading.Event], None]

# Order matters: storage first (everything else refers to its tables and bucket).
DEPLOYERS: list[Deployer] = [
    storage.deploy,
    lifecycle.deploy,
    emulated_compute.deploy,  # --compute sagemaker|ec2: the launchers' resources and the compute behind them
    trainer_reports.deploy,  # --compute sagemaker|ec2: the trainer's log group -> subscription filter -> events Lambda
    retraining.deploy,  # the dispatcher, its rules on the local bus, and the schedule ticker
    sweeps.deploy,  # the sweep controller's worker thread
    event_bus.deploy,  # the deployment's own bus and the outbox's publisher loop
    webhooks.deploy,  # the webhook delivery loop (the publisher queues the deliveries)
    user_pool.deploy,  # the dashboard's Cognito user pool: its people and their groups (team membership)
]


@dataclass
class LocalContext:
    """What a deployer gets: where the emulated AWS is, the state dir, and hooks into local mode's life."""

    endpoint_url: str
    state_dir: Path
    region: str = constants.LOCAL_REGION
    account_id: str = constants.LOCAL_ACCOUNT_ID
    compute: str = "local"
    # `trainplane up --capacity-pools FILE`: the emulated EC2's scripted pools (emulated_compute/capacity_pools.py).
    capacity_pools: Path | None = None
    # The state dir's dashboard users (their identity ids, `--dashboard-user` groups); user_pool.deploy's result.
    dashboard_users: list[DashboardUser] = field(default_factory=list)
    user_pool: UserPool = field(default_factory=UserPool)
    # TRAINPLANE_* variables for the in-process handlers (functions/settings.py reads them once).
    env: dict[str, str] = field(default_factory=dict)
    # Filled by `trainplane up` after the journal replay: counts of restored tables/items/buckets/objects.
    restored: dict[str, int] = field(default_factory=dict)
    stop_event: threading.Event = field(default_factory=threading.Event)
    _background: list[tuple[str, BackgroundTarget]] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)
    _shutdown: list[Callable[[], None]] = field(default_factory=list)

    def client(self, service: str) -> Any:
        """A boto3 client for the emulated AWS (boto3 loads only here: localmode/deploy is local-mode-only)."""
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id="local-deployer",
            aws_secret_access_key="local-deployer",  # noqa: S106 (moto accepts any key)
        )

    def set_setting(self, name: str, value: str) -> None:
        """Publish a Settings field (e.g. "state_machine_arn") to the in-process handlers."""
        if name not in Settings.model_fields:
            raise ValueError(f"{name!r} is not a field of functions.settings.Settings")
        self.env[PREFIX + name.upper()] = value

    def settings(self) -> Settings:
        """The settings the in-process handlers will read, as published so far."""
        return Settings.from_env(self.env)

    def add_background(self, name: str, target: BackgroundTarget) -> None:
        self._background.append((name, target))

    def on_shutdown(self, fn: Callable[[], None]) -> None:
        self._shutdown.append(fn)

    # --- driven by `trainplane up` ---------------------------------------------------------------

    def start_background(self) -> None:
        for name, target in self._background:
            thread = threading.Thread(target=self._run, args=(name, target), name=f"local-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def shutdown(self, timeout: float = 10.0) -> None:
        self.stop_event.set()
        for fn in reversed(self._shutdown):
            try:
                fn()
            except Exception:
                logger.exception("local mode: a shutdown hook failed")
        for thread in self._threads:
            thread.join(timeout)
            if thread.is_alive():
                logger.warning("local mode: background thread %s did not stop within %.0fs", thread.name, timeout)

    def _run(self, name: str, target: BackgroundTarget) -> None:
        try:
            target(self.stop_event)
        except Exception:
            logger.exception("local mode: background task %s crashed", name)


def deploy_all(ctx: LocalContext) -> None:
    for deploy in DEPLOYERS:
        logger.info("local deploy: %s.%s", deploy.__module__, deploy.__name__)
        deploy(ctx)
