"""The seed's waits against `trainplane up` (fake trainer): through a proxy that drops every connection
every second or so the followed log is exactly the job's log, nothing lost or repeated; keys that rotate
mid-wait (and one that is refused) do not end the wait; reconnect_and_wait resumes a paused job; a
failed job raises JobFailed with its error and last lines; the CLI's `jobs submit --wait --follow`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.credentials import Credentials, RefreshableCredentials
from typer.testing import CliRunner

from functions import constants
from tests.e2e.conftest import LocalPlane
from tests.e2e.test_lifecycle_e2e import FAKE_TRAINER_ENV, fake_spec
from trainplane import AsyncClient, Client, JobFailed
from trainplane.cli import app


def run_async(coro: Any) -> Any:
    """asyncio.run in a thread of its own: a browser test's session (Playwright's sync API) may keep an event
    loop running in this thread, where asyncio.run refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _principal(name: str, arn_name: str | None = None, user_id: str | None = None) -> dict[str, str]:
    return {
        "name": name,
        "access_key_id": "AKIA" + secrets.token_hex(8).upper(),
        "secret_access_key": secrets.token_urlsafe(30),
        "arn": f"arn:aws:iam::{constants.LOCAL_ACCOUNT_ID}:user/{arn_name or name}",
        "user_id": user_id or "AIDA" + secrets.token_hex(8).upper() + "X",
    }


@pytest.fixture(scope="module")
def plane(module_plane_factory: Callable[..., LocalPlane], tmp_path_factory: pytest.TempPathFactory) -> LocalPlane:
    """A fake-trainer plane whose alice has two access keys (as an IAM user may, for rotation)."""
    state = tmp_path_factory.mktemp("waits") / "state"
    state.mkdir()
    alice = _principal("alice")
    rotated = {**_principal("alice-rotated", "alice"), "user_id": alice["user_id"]}
    (state / "credentials.json").write_text(json.dumps({"principals": [_principal("admin"), alice, rotated]}))
    return module_plane_factory(env=FAKE_TRAINER_ENV, state_dir=state)


class DroppingProxy:
    """A TCP proxy to the API that, every `every` seconds, cuts the next response in flight (the server
    did the work, the client never hears of it) and then every other open connection."""

    def __init__(self, upstream: str, every: float) -> None:
        host, port = upstream.split("://", 1)[1].split(":")
        self.upstream = (host, int(port))
        self.every = every
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.live: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.armed = threading.Event()
        self.lost_responses = 0
        self.stopped = threading.Event()

    def __enter__(self) -> DroppingProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        threading.Thread(target=self._arm, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.server.close()
        self._cut()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            with self.lock:
                self.live |= {client, upstream}
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, responses: bool) -> None:
        try:
            while data := source.recv(65536):
                if responses and self.armed.is_set():
                    self.armed.clear()
                    self.lost_responses += 1
                    self._cut()  # this response is lost, and every other connection with it
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def _cut(self) -> None:
        with self.lock:
            cut, self.live = self.live, set()
        for s in cut:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
                s.close()

    def _arm(self) -> None:
        while not self.stopped.wait(self.every):
            self.armed.set()


def _messages(plane: LocalPlane, job_id: str) -> list[str]:
    lines: list[str] = []
    token: str | None = None
    while True:
        body = plane.request("GET", f"/jobs/{job_id}/logs", params={"limit": 1000, **({"next_token": token} if token else {})}).json()
        lines += [line["message"] for line in body["lines"]]
        token = body.get("next_token")
        if not token:
            return lines


def test_followed_log_through_a_dropping_proxy_is_exact(plane: LocalPlane) -> None:
    # Given a client that reaches the API only through a proxy that loses a response and cuts every
    # connection every 0.7 s
    alice = plane.principal("alice")
    with DroppingProxy(plane.api_url, every=0.7) as proxy:
        client = Client(proxy.url, credentials=Credentials(alice["access_key_id"], alice["secret_access_key"]), region=plane.region)
        followed: list[str] = []
        # When a 40-step job is created, waited for and its log followed
        job = client.create_and_wait(
            fake_spec("waits-proxy", max_steps=40, step_seconds=0.25),
            poll_interval_s=0.3,
            timeout_s=240,
            follow_logs=True,
            on_log=lambda line: followed.append(line.message),
        )
    # Then it COMPLETED, responses were really lost meanwhile, and the followed lines are exactly the
    # job's log (read directly afterwards): every line once, in order
    assert job.status.value == "COMPLETED"
    assert proxy.lost_responses >= 5
    log = _messages(plane, job.job_id)
    assert followed == log
    assert len(log) >= 40 and len(set(log)) == len(log)


def test_keys_rotating_mid_wait_and_a_refused_key_do_not_end_the_wait(plane: LocalPlane) -> None:
    # Given credentials that change on every request: alice's two keys in turn, and once a key the
    # control plane does not know (a revoked one), which earns a 403
    keys = [plane.principal("alice"), plane.principal("alice-rotated")]
    revoked = {"access_key_id": "AKIAREVOKED000000000", "secret_access_key": "x" * 40}
    sequence = itertools.chain(keys * 3, [revoked], itertools.cycle(keys))
    used: list[str] = []

    def refresh() -> dict[str, str]:
        key = next(sequence)
        used.append(key["access_key_id"])
        # Inside botocore's advisory window: every request refreshes them first.
        expiry = (datetime.now(UTC) + timedelta(minutes=10)).isoformat()
        return {"access_key": key["access_key_id"], "secret_key": key["secret_access_key"], "token": "", "expiry_time": expiry}

    credentials = RefreshableCredentials.create_from_metadata(refresh(), refresh, "rotating")
    client = Client(plane.api_url, credentials=credentials, region=plane.region)
    # When a job is created and followed to the end
    followed: list[str] = []
    job = client.create_and_wait(
        fake_spec("waits-rotate", max_steps=20, step_seconds=0.25),
        poll_interval_s=0.3,
        timeout_s=240,
        follow_logs=True,
        on_log=lambda line: followed.append(line.message),
    )
    # Then it completed, both keys and the revoked one were used, and the log is still exact
    assert job.status.value == "COMPLETED"
    assert {k["access_key_id"] for k in keys} | {revoked["access_key_id"]} <= set(used)
    assert followed == _messages(plane, job.job_id)
    # And the job belongs to alice whichever of her keys signed
    assert job.owner.endswith(":user/alice")


def test_reconnect_and_wait_resumes_a_paused_job_until_it_trains_again(plane: LocalPlane) -> None:
    # Given a job that trained a while and was paused
    client = Client(state_dir=plane.state_dir, principal="alice")
    job = client.create_and_wait(
        fake_spec("waits-reconnect", max_steps=400, step_seconds=0.1), until="training", poll_interval_s=0.2, timeout_s=120
    )
    client.wait_for_existing(job.job_id, until="training", poll_interval_s=0.2, timeout_s=60)
    while True:
        try:
            client.pause(job.job_id)
            break
        except Exception as exc:  # a 409 while it moves TRAINING <-> CHECKPOINTING: try again
            if "changed by another request" not in str(exc):
                raise
            time.sleep(0.1)
    # When reconnected (the pause may still be in progress: it is waited out)
    again = client.reconnect_and_wait(job.job_id, poll_interval_s=0.2, timeout_s=120, max_wait_for_resumable_s=60)
    # Then the same job trains again, as a new attempt that went through PAUSED
    assert again.job_id == job.job_id and again.status.value in {"TRAINING", "CHECKPOINTING"}
    assert again.attempt >= 2
    assert "PAUSED" in [e.to_status.value for e in client.events(job.job_id)]
    client.cancel(job.job_id)


def test_a_failed_job_raises_job_failed_with_its_last_log_lines_sync_and_async(plane: LocalPlane) -> None:
    # Given a job whose trainer fails at step 3
    spec = fake_spec("waits-fail", max_steps=10, fake_fail_at_step="3", fake_failure="ValueError: bad row 17")
    client = Client(state_dir=plane.state_dir, principal="alice")
    # When it is created and waited for  Then JobFailed carries its error and the end of its log
    with pytest.raises(JobFailed) as caught:
        client.create_and_wait(spec, poll_interval_s=0.3, timeout_s=120)
    failed = caught.value
    assert failed.job_status == "FAILED"
    assert failed.error_message and "bad row 17" in failed.error_message
    assert failed.error_type == "USER_ERROR"
    assert any("starting at step 0" in line for line in failed.last_log_lines)

    # And the AsyncClient waits the same way
    async def again() -> JobFailed:
        async with AsyncClient(state_dir=plane.state_dir, principal="alice") as aclient:
            try:
                await aclient.wait_for_existing(failed.job_id, poll_interval_s=0.3, timeout_s=30)
            except JobFailed as exc:
                return exc
        raise AssertionError("no JobFailed")

    assert run_async(again()).error_message == failed.error_message


def test_cli_submit_wait_follow_prints_the_log_and_the_final_status(plane: LocalPlane, tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(fake_spec("waits-cli", max_steps=8, step_seconds=0.1)))
    result = CliRunner().invoke(
        app,
        ["--state-dir", str(plane.state_dir), "--principal", "alice", "jobs", "submit", str(path), "--wait", "--follow"],
        env={"COLUMNS": "250"},
    )
    assert result.exit_code == 0, result.output
    assert "starting at step 0 of 8" in result.stdout
    assert "COMPLETED" in result.stdout.splitlines()[-1]
