"""The sweep calls of both SDK clients (trainplane/client_sweeps.py), against the stand-in API: Client and
AsyncClient have the same surface (one implementation, run by each), send the same requests and get the
same answers."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from botocore.credentials import Credentials

from schemas.sweeps import Sweep, SweepStatus
from tests.unit import test_client_standin
from tests.unit.test_client_standin import ACCESS_KEY, MINIMAL_REQUEST, SECRET_KEY, StandInApi
from tests.unit.test_waits import run_async
from trainplane import AsyncClient, Client
from trainplane.client_sweeps import SweepWaitTimeout
from trainplane.errors import Conflict

standin = test_client_standin.standin

SWEEP_CALLS = ("create_sweep", "get_sweep", "list_sweeps_page", "list_sweeps", "pause_sweep", "resume_sweep", "cancel_sweep")
SWEEP_CALLS += ("delete_sweep", "wait_sweep")


def sweep_body(name: str) -> dict[str, Any]:
    tuning = {
        "method": "random",
        "maxTrials": 2,
        "metric": {"name": "eval_loss", "goal": "minimize"},
        "parameters": {"learning_rate": {"type": "double", "min": 1e-5, "max": 1e-3, "scale": "log"}},
    }
    return {"name": name, "job_template": MINIMAL_REQUEST, "hyperParameterTuningConfig": tuning}


def test_the_async_client_has_every_sweep_call_with_the_same_arguments() -> None:
    for name in SWEEP_CALLS:
        sync, asynchronous = getattr(Client, name), getattr(AsyncClient, name)
        assert inspect.signature(sync).parameters.keys() == inspect.signature(asynchronous).parameters.keys(), name
        assert inspect.iscoroutinefunction(asynchronous) or inspect.isasyncgenfunction(asynchronous), name


async def scenario(client: Any, api: StandInApi, awaited: bool) -> dict[str, Any]:
    """Every sweep call once, on either client; what each answered."""

    async def call(name: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(client, name)(*args, **kwargs)
        return await result if awaited else result

    seen: dict[str, Any] = {}
    created = [await call("create_sweep", sweep_body(f"lr-{i}")) for i in range(3)]
    first = created[0].sweep_id
    seen["get"] = (await call("get_sweep", first)).name
    page, token = await call("list_sweeps_page", limit=2)
    seen["page"] = ([s.name for s in page], token is not None)
    listed = client.list_sweeps(page_size=2)
    seen["all"] = [s.name async for s in listed] if awaited else [s.name for s in listed]
    seen["pause"] = (await call("pause_sweep", first, reason="lunch")).status
    seen["resume"] = (await call("resume_sweep", first)).status
    with pytest.raises(Conflict):
        await call("resume_sweep", first)  # not PAUSED: the API's 409 reaches the caller as it is
    api.sweep_script[first] = ["RUNNING", "COMPLETED"]
    updates: list[SweepStatus] = []
    done = await call("wait_sweep", first, poll=0.01, timeout=10, on_update=lambda s: updates.append(s.status))
    seen["wait"] = (done.status, updates)
    with pytest.raises(SweepWaitTimeout):
        await call("wait_sweep", created[1].sweep_id, poll=0.01, timeout=0.05)
    seen["cancel"] = (await call("cancel_sweep", created[1].sweep_id, reason="enough")).status
    await call("delete_sweep", created[1].sweep_id)
    seen["left"] = sorted(s["name"] for s in api.sweeps.values())
    assert isinstance(done, Sweep)
    return seen


def requests_sent(api: StandInApi) -> list[tuple[str, str, Any]]:
    """The requests the stand-in received, sweep ids cut off; a run of polls of one sweep counts once: how many
    GETs a wait with a timeout makes before it gives up depends on the machine's speed, not on the client."""
    sent: list[tuple[str, str, Any]] = []
    last = None
    for r in api.requests:
        key = (r.method, r.path, repr(r.body))
        if not (r.method == "GET" and key == last):
            sent.append((r.method, r.path.split("/sweep-")[0], r.body))
        last = key
    return sent


def test_both_clients_make_the_same_sweep_calls_and_get_the_same_answers(standin: StandInApi) -> None:
    def sync_client() -> Client:
        return Client(standin.url, credentials=Credentials(ACCESS_KEY, SECRET_KEY), region="us-east-1")

    async def with_async() -> dict[str, Any]:
        async with AsyncClient(standin.url, credentials=Credentials(ACCESS_KEY, SECRET_KEY), region="us-east-1") as client:
            return await scenario(client, standin, awaited=True)

    # Given the sync client's answers and requests
    with sync_client() as client:
        sync_seen = run_async(scenario(client, standin, awaited=False))
    sync_requests = requests_sent(standin)
    standin.requests.clear()
    standin.sweeps.clear()
    # When the async client does the same
    async_seen = run_async(with_async())
    async_requests = requests_sent(standin)
    # Then both saw the same answers and sent the same requests (signed: the stand-in checks every signature)
    assert async_seen == sync_seen
    assert async_requests == sync_requests
    assert sync_seen["page"] == (["lr-2", "lr-1"], True) and sync_seen["all"] == ["lr-2", "lr-1", "lr-0"]
    assert (sync_seen["pause"], sync_seen["resume"], sync_seen["cancel"]) == ("PAUSED", "RUNNING", "CANCELLED")
    assert sync_seen["wait"] == ("COMPLETED", ["RUNNING", "COMPLETED"])
    assert sync_seen["left"] == ["lr-0", "lr-2"]
    assert ("POST", "/sweeps", {"reason": "lunch"}) in sync_requests
