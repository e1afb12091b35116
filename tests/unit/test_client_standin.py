"""A stand-in for the trainplane HTTP API, for the SDK and CLI unit tests, and the tests of the stand-in.

It speaks the routes and error bodies of docs/CONTRACTS.md from an in-memory dict, and it checks every
request's SigV4 signature with its own small implementation of the algorithm (hashlib/hmac, not
botocore), so the SDK's signing is checked by code that does not share it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import pytest
import requests
from pydantic import ValidationError

from schemas.job import Job, SubmitJobRequest
from schemas.status import TERMINAL, JobStatus
from schemas.sweeps import SWEEP_TERMINAL, SweepRequest

ACCESS_KEY = "AKIDSTANDIN"
SECRET_KEY = "standin-secret"
REGION = "us-east-1"

MINIMAL_REQUEST: dict[str, Any] = {
    "name": "tiny",
    "training_config": {
        "training_type": "LORA",
        "base_model": {"model_id": "tiny-llama", "source": "config", "tokenizer_id": "byte", "model_kwargs": {"architecture": "llama"}},
        "hyperparameters": {"max_steps": "10"},
    },
    "data_config": {"sources": [{"path": "/tmp/data.jsonl"}]},
    "resource_config": {"gpu_count": 0},
}


@dataclass
class Recorded:
    method: str
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, str]
    body: Any


@dataclass
class StandInApi:
    url: str = ""
    secrets: dict[str, str] = field(default_factory=lambda: {ACCESS_KEY: SECRET_KEY})
    jobs: dict[str, Job] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # oldest first
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    metrics: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    logs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # job_id -> statuses that successive GETs of the job move through (a scripted lifecycle)
    script: dict[str, list[JobStatus]] = field(default_factory=dict)
    idempotency: dict[str, str] = field(default_factory=dict)
    # Answer GET /logs with a `cursor` (a position after the page), as the real API's local reader does.
    log_cursor: bool = False
    # Statuses to answer (after checking the signature) before serving normally again: throttling, 5xx.
    fail_next: list[int] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # /sweeps: sweep_id -> the Sweep as the API answers it, and statuses successive GETs move through
    sweeps: dict[str, dict[str, Any]] = field(default_factory=dict)
    sweep_script: dict[str, list[str]] = field(default_factory=dict)

    def add_job(self, name: str = "tiny", status: JobStatus = JobStatus.QUEUED, **overrides: Any) -> Job:
        request = SubmitJobRequest.model_validate({**MINIMAL_REQUEST, "name": name, **overrides})
        return self._create(request, status)

    def _create(self, request: SubmitJobRequest, status: JobStatus, parent: str | None = None) -> Job:
        now = datetime.now(UTC)
        job = Job(
            job_id=f"job-{uuid.uuid4().hex[:12]}",
            owner="arn:aws:iam::123456789012:user/standin",
            status=status,
            created_at=now,
            updated_at=now,
            parent_job_id=parent,
            **request.model_dump(exclude={"description"}),
        )
        with self.lock:
            self.jobs[job.job_id] = job
            self.order.append(job.job_id)
            self.history[job.job_id] = [{"at": now.isoformat(), "from": None, "to": status.value, "reason": "submitted", "actor": "user"}]
        return job

    def set_status(self, job_id: str, status: JobStatus, **changes: Any) -> Job:
        with self.lock:
            old = self.jobs[job_id]
            self.jobs[job_id] = Job.model_validate({**old.model_dump(), "status": status, "updated_at": datetime.now(UTC), **changes})
            self.history[job_id].append(
                {"at": datetime.now(UTC).isoformat(), "from": old.status.value, "to": status.value, "reason": "", "actor": "system"}
            )
        return self.jobs[job_id]

    def calls(self, method: str, path_prefix: str = "") -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path.startswith(path_prefix)]


# --- SigV4 verification, written from the AWS documentation (not botocore's code) -----------------


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def verify_sigv4(method: str, raw_path: str, headers: dict[str, str], body: bytes, secrets: dict[str, str]) -> str | None:
    """None when the signature is right, else why not (the fake answers 403 with that message)."""
    auth = headers.get("authorization", "")
    if not auth:
        return "Missing Authentication Token"
    try:
        algorithm, rest = auth.split(" ", 1)
        parts = dict(p.strip().split("=", 1) for p in rest.split(","))
        access_key, date, region, service, terminator = parts["Credential"].split("/")
    except ValueError:
        return "malformed Authorization header"
    if algorithm != "AWS4-HMAC-SHA256" or service != "execute-api" or terminator != "aws4_request" or region != REGION:
        return f"bad credential scope {parts.get('Credential')}"
    if access_key not in secrets:
        return "The security token included in the request is invalid."
    amz_date = headers.get("x-amz-date", "")
    if not amz_date.startswith(date):
        return "x-amz-date does not match the credential date"
    split = urlsplit(raw_path)
    pairs = sorted(
        (quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in parse_qsl(split.query, keep_blank_values=True, strict_parsing=False)
    )
    canonical_query = "&".join(f"{k}={v}" for k, v in pairs)
    signed_headers = parts["SignedHeaders"].split(";")
    if "host" not in signed_headers or "x-amz-date" not in signed_headers:
        return "host and x-amz-date must be signed"
    canonical_headers = "".join(f"{h}:{' '.join(headers.get(h, '').split())}\n" for h in signed_headers)
    canonical_request = "\n".join(
        [
            method,
            quote(split.path, safe="/-_.~"),
            canonical_query,
            canonical_headers,
            ";".join(signed_headers),
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical_request.encode()).hexdigest()}"
    key = _hmac(_hmac(_hmac(_hmac(("AWS4" + secrets[access_key]).encode(), date), region), service), "aws4_request")
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, parts.get("Signature", "")):
        return "The request signature we calculated does not match the signature you provided."
    return None


# --- the HTTP side ---------------------------------------------------------------------------------


class _Reply(Exception):
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body


def _error(status: int, message: str, errors: list[dict[str, str]] | None = None) -> _Reply:
    return _Reply(status, {"message": message, "errors": errors or []})


def _handler_for(api: StandInApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            pass

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            split = urlsplit(self.path)
            query = parse_qsl(split.query, keep_blank_values=True)
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
            api.requests.append(Recorded(method, split.path, query, headers, body))
            try:
                problem = verify_sigv4(method, self.path, headers, raw, api.secrets)
                if problem:
                    raise _Reply(403, {"message": problem})
                if api.fail_next:
                    raise _error(api.fail_next.pop(0), "try again later")
                raise _route(api, method, split.path.strip("/").split("/"), dict(query), headers, body)
            except _Reply as reply:
                payload = json.dumps(reply.body).encode() if reply.body is not None else b""
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

    return Handler


def _job_json(job: Job) -> dict[str, Any]:
    return job.model_dump(mode="json")


def _route(api: StandInApi, method: str, parts: list[str], query: dict[str, str], headers: dict[str, str], body: Any) -> _Reply:
    if parts == ["summary"] and method == "GET":
        counts = {s.value: sum(1 for j in api.jobs.values() if j.status == s) for s in JobStatus}
        return _Reply(
            200,
            {
                "counts": counts,
                "total": len(api.jobs),
                "running": counts["TRAINING"],
                "queued": counts["QUEUED"],
                "completed": counts["COMPLETED"],
                "failed": counts["FAILED"],
                "paused": counts["PAUSED"],
            },
        )
    if parts[0] == "sweeps":
        return _sweeps(api, method, parts[1:], query, body)
    if parts == ["jobs"] and method == "POST":
        return _submit(api, headers, body)
    if parts == ["jobs"] and method == "GET":
        return _list(api, query)
    if len(parts) < 2 or parts[0] != "jobs":
        return _error(404, f"no route {method} /{'/'.join(parts)}")
    job = api.jobs.get(parts[1])
    if job is None:
        return _error(404, f"job {parts[1]} not found")
    action = parts[2] if len(parts) > 2 else ""
    if action == "" and method == "GET":
        steps = api.script.get(job.job_id)
        if steps:
            job = api.set_status(job.job_id, steps.pop(0), progress={"percent": 50.0, "step": 5, "total_steps": 10, "loss": 1.5})
        return _Reply(200, _job_json(job))
    if action == "" and method == "DELETE":
        if job.status not in TERMINAL:
            return _error(409, f"cannot delete job {job.job_id} while it is {job.status}")
        del api.jobs[job.job_id]
        api.order.remove(job.job_id)
        return _Reply(204, None)
    if action == "" and method == "PATCH":
        if job.status not in {JobStatus.PENDING, JobStatus.QUEUED, JobStatus.FAILED}:
            return _error(409, f"cannot edit job {job.job_id} while it is {job.status}")
        update: dict[str, Any] = {k: v for k, v in body.items() if k in {"name", "description"}}
        return _Reply(200, _job_json(api.set_status(job.job_id, job.status, **update)))
    return _verb(api, job, method, action, query, body)


def _verb(api: StandInApi, job: Job, method: str, action: str, query: dict[str, str], body: Any) -> _Reply:
    if method == "GET" and action == "events":
        return _Reply(200, {"events": api.history[job.job_id]})
    if method == "GET" and action == "metrics":
        return _Reply(200, {"points": api.metrics.get(job.job_id, [])})
    if method == "GET" and action == "logs":
        lines = api.logs.get(job.job_id, [])
        # As the real API: `since` is exclusive and applies to every page; the token is a position.
        start = int(query.get("next_token") or 0)
        if "since" in query:
            lines = [line for line in lines if line["timestamp"] > float(query["since"])]
        page = lines[start : start + 2]
        token = str(start + 2) if start + 2 < len(lines) else None
        if api.log_cursor:
            return _Reply(200, {"lines": page, "next_token": token, "cursor": str(start + len(page))})
        return _Reply(200, {"lines": page, "next_token": token})
    if method != "POST":
        return _error(404, f"no route {method} {action}")
    if action == "cancel":
        if job.status in TERMINAL:
            return _error(409, f"cannot cancel job {job.job_id} while it is {job.status}")
        new = api.set_status(job.job_id, JobStatus.CANCELLED, error_message=(body or {}).get("reason") or None)
        return _Reply(200, {"job": _job_json(new), "action": "cancel", "detail": {}})
    if action == "pause":
        if job.status != JobStatus.TRAINING:
            return _error(409, f"cannot pause job {job.job_id} while it is {job.status}; allowed from TRAINING")
        return _Reply(200, _job_json(api.set_status(job.job_id, JobStatus.PAUSED)))
    if action == "resume":
        if job.status != JobStatus.PAUSED:
            return _error(409, f"cannot resume job {job.job_id} while it is {job.status}")
        return _Reply(200, _job_json(api.set_status(job.job_id, JobStatus.QUEUED)))
    if action == "retry":
        request = job.submit_request()
        if body.get("modify_resources"):
            request = SubmitJobRequest.model_validate({**request.model_dump(), "resource_config": body["new_resource_config"]})
        child = api._create(request, JobStatus.QUEUED, parent=job.job_id)
        return _Reply(201, _job_json(child))
    return _error(404, f"no route POST {action}")


_SWEEP_MOVES = {"pause": ({"RUNNING"}, "PAUSED"), "resume": ({"PAUSED"}, "RUNNING"), "cancel": ({"RUNNING", "PAUSED"}, "CANCELLED")}


def _sweeps(api: StandInApi, method: str, parts: list[str], query: dict[str, str], body: Any) -> _Reply:
    """/sweeps as the real API answers it (functions/handlers/sweeps.py), over a dict: no controller."""
    if not parts and method == "POST":
        try:
            request = SweepRequest.model_validate(body)
        except ValidationError as exc:
            return _error(422, "invalid request", [{"field": ".".join(map(str, e["loc"])), "message": e["msg"]} for e in exc.errors()])
        now = datetime.now(UTC).isoformat()
        sweep = {
            **request.model_dump(mode="json", by_alias=True),
            "sweep_id": f"sweep-{uuid.uuid4().hex[:12]}",
            "owner": "arn:aws:iam::123456789012:user/standin",
            "status": "RUNNING",
            "created_at": now,
            "updated_at": now,
        }
        api.sweeps[sweep["sweep_id"]] = sweep
        return _Reply(201, sweep)
    if not parts and method == "GET":
        newest = list(reversed(api.sweeps.values()))
        start, limit = int(query.get("next_token") or 0), int(query.get("limit") or 50)
        token = str(start + limit) if start + limit < len(newest) else None
        return _Reply(200, {"sweeps": newest[start : start + limit], "next_token": token})
    sweep = api.sweeps.get(parts[0])
    if sweep is None:
        return _error(404, f"sweep {parts[0]} not found")
    if len(parts) == 1 and method == "GET":
        steps = api.sweep_script.get(parts[0])
        if steps:
            sweep["status"] = steps.pop(0)
        return _Reply(200, sweep)
    if len(parts) == 1 and method == "DELETE":
        if sweep["status"] not in {s.value for s in SWEEP_TERMINAL}:
            return _error(409, f"cannot delete sweep {parts[0]} while it is {sweep['status']}")
        del api.sweeps[parts[0]]
        return _Reply(204, None)
    if len(parts) == 2 and method == "POST" and parts[1] in _SWEEP_MOVES:
        sources, target = _SWEEP_MOVES[parts[1]]
        if sweep["status"] not in sources:
            return _error(409, f"cannot {parts[1]} sweep {parts[0]} while it is {sweep['status']}")
        sweep.update(status=target, status_reason=(body or {}).get("reason"))
        return _Reply(200, sweep)
    return _error(404, f"no route {method} /sweeps/{'/'.join(parts)}")


def _submit(api: StandInApi, headers: dict[str, str], body: Any) -> _Reply:
    key = headers.get("idempotency-key")
    if key and key in api.idempotency:
        return _Reply(201, _job_json(api.jobs[api.idempotency[key]]))
    try:
        request = SubmitJobRequest.model_validate(body)
    except ValidationError as exc:
        errors = [{"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"], "type": e["type"]} for e in exc.errors()]
        return _error(422, "invalid request", errors)
    job = api._create(request, JobStatus.PENDING)
    if key:
        api.idempotency[key] = job.job_id
    return _Reply(201, _job_json(job))


def _list(api: StandInApi, query: dict[str, str]) -> _Reply:
    labels = {k.removeprefix("labels."): v for k, v in query.items() if k.startswith("labels.")}
    matching = [
        api.jobs[i]
        for i in reversed(api.order)
        if (not query.get("status") or api.jobs[i].status == query["status"])
        and (not query.get("queue") or api.jobs[i].queue == query["queue"])
        and (not query.get("name") or query["name"] in api.jobs[i].name)
        and all(api.jobs[i].labels.get(k) == v for k, v in labels.items())
    ]
    start = int(query.get("next_token") or 0)
    limit = int(query.get("limit") or 50)
    page = matching[start : start + limit]
    token = str(start + limit) if start + limit < len(matching) else None
    return _Reply(200, {"jobs": [_job_json(j) for j in page], "next_token": token})


@pytest.fixture
def standin() -> Iterator[StandInApi]:
    api = StandInApi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(api))
    server.daemon_threads = True
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()


# --- the stand-in's own tests: a fake that accepts anything would prove nothing ------------------


def test_standin_rejects_unsigned_requests(standin: StandInApi) -> None:
    # Given the stand-in API
    # When a request arrives without a signature
    response = requests.get(standin.url + "/jobs", timeout=5)
    # Then it answers 403 like API Gateway's IAM authorizer
    assert response.status_code == 403
    assert response.json()["message"] == "Missing Authentication Token"


def test_standin_rejects_a_tampered_signature(standin: StandInApi) -> None:
    # Given a request correctly signed by botocore
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    signed = AWSRequest(method="GET", url=standin.url + "/jobs?limit=2", headers={})
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "execute-api", REGION).add_auth(signed)
    headers = dict(signed.headers.items())
    # When it is sent as signed, and then with the query changed after signing
    good = requests.get(standin.url + "/jobs?limit=2", headers=headers, timeout=5)
    tampered = requests.get(standin.url + "/jobs?limit=3", headers=headers, timeout=5)
    # Then the first passes and the second is refused
    assert good.status_code == 200
    assert tampered.status_code == 403
    assert "signature" in tampered.json()["message"]
