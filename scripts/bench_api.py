"""`make bench`: the figures of issue 2's "Measure" section, printed (never asserted).

(a) Import time of the API handler module against `import boto3`: each imported in a fresh
    interpreter, timed inside it (interpreter start-up excluded), median of --runs runs, alternating
    the two so that disk cache and CPU frequency favour neither, under the deployed functions' runtime
    environment (functions.constants.FUNCTION_RUNTIME_ENV). Goal: handler <= 1.6x boto3.
(b) Latency through local mode's front door: starts `trainplane up --port 0` in a subprocess and
    pre-creates jobs. Then --concurrency signed clients call GET /jobs/{id} back to back for a fixed
    time (a closed loop): the lean load generator (below: its own process, one keep-alive connection
    per client, every request freshly SigV4-signed and verified by the front door); one client alone
    first gives the service time without queueing; an open loop at --paced-rate gives latency at a
    load the server carries easily. The same closed loop from SDK clients (trainplane.Client, one
    thread each) shows what a script sees with the SDK's own per-request CPU; then POST /jobs.
    Prints p50/p90/p99/max, requests/s and the cores the server and the clients kept busy.
    Goal on a 2-core machine (judged on the lean closed loop): GET p50 <= 15 ms, p99 <= 60 ms.

    python scripts/bench_api.py [--runs 11] [--concurrency 16] [--get-seconds 30] [--post-seconds 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from functions.constants import FUNCTION_RUNTIME_ENV  # noqa: E402
from trainplane import Client  # noqa: E402
from trainplane.endpoint import ENDPOINT_FILE  # noqa: E402

HANDLER_MODULE = "functions.handlers.api"
GOAL_IMPORT_RATIO = 1.6
GOAL_GET_P50_MS = 15.0
GOAL_GET_P99_MS = 60.0

# A valid job that the local scheduler refuses at once (1024 GPUs, the schema's maximum: PENDING ->
# QUEUED -> FAILED/CAPACITY): every POST runs the real submit path and a real lifecycle execution, but
# no trainer process competes with the API for the two cores while we measure.
BENCH_JOB: dict[str, Any] = {
    "name": "bench",
    "labels": {"purpose": "bench"},
    "training_config": {
        "training_type": "LORA",
        "base_model": {"model_id": "tiny", "source": "config", "tokenizer_id": "byte", "model_kwargs": {"architecture": "llama"}},
        "hyperparameters": {"max_steps": "1"},
    },
    # Never read; in the shared/ area every principal may name (docs/SECURITY.md).
    "data_config": {"sources": [{"path": "s3://trainplane-artifacts/shared/bench.jsonl"}]},
    "resource_config": {"gpu_count": 1024},
    "scheduling_config": {"queue": "bench", "priority": 0},
}


# --- (a) import time -----------------------------------------------------------------------------


def import_seconds(module: str, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of `import module` in a fresh interpreter; CPU time is what other load on a
    shared machine disturbs least."""
    code = (
        "import time; w, c = time.perf_counter(), time.process_time(); "
        f"import {module}; print(time.perf_counter() - w, time.process_time() - c)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"import {module} failed:\n{out.stderr[-2000:]}")
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def heaviest_imports(module: str, env: dict[str, str], top: int = 8) -> list[tuple[str, float]]:
    """The packages the module pulls in that cost the most (`python -X importtime`, cumulative ms).

    A package's first (outermost) import carries its whole cost, so the largest cumulative figure
    seen for each top-level package is what that package costs; the module's own package is left out.
    """
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], cwd=ROOT, env=env, capture_output=True, text=True)
    baseline = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], cwd=ROOT, env=env, capture_output=True, text=True)
    startup = {line.split("|")[-1].strip().split(".")[0] for line in baseline.stderr.splitlines() if "|" in line}
    own = module.split(".")[0]
    totals: dict[str, float] = {}
    for line in out.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        root = parts[2].strip().split(".")[0]
        if root != own and root not in startup:
            totals[root] = max(totals.get(root, 0.0), int(parts[1]) / 1000)
    return sorted(totals.items(), key=lambda kv: -kv[1])[:top]


def bench_imports(runs: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # both sides read cached .pyc files
    env.update({"PYTHONPATH": str(ROOT), "AWS_DEFAULT_REGION": "us-east-1"})
    env.update(FUNCTION_RUNTIME_ENV)  # as the deployed function runs (infra/constructs/function.py)
    # Warm the page cache and the .pyc files once, so run 1 is not a cold-disk outlier.
    import_seconds(HANDLER_MODULE, env)
    import_seconds("boto3", env)
    handler: list[tuple[float, float]] = []
    boto: list[tuple[float, float]] = []
    for i in range(runs):
        pair = [(HANDLER_MODULE, handler), ("boto3", boto)]
        for module, samples in pair if i % 2 == 0 else reversed(pair):
            samples.append(import_seconds(module, env))

    def median_ms(samples: list[tuple[float, float]], index: int) -> float:
        return statistics.median(s[index] for s in samples) * 1000

    result: dict[str, Any] = {"runs": runs, "handler_top": heaviest_imports(HANDLER_MODULE, env)}
    for kind, index in (("wall", 0), ("cpu", 1)):
        result[f"handler_{kind}_ms"] = median_ms(handler, index)
        result[f"boto3_{kind}_ms"] = median_ms(boto, index)
        result[f"{kind}_ratio"] = result[f"handler_{kind}_ms"] / result[f"boto3_{kind}_ms"]
    return result


# --- (b) latency through the front door ----------------------------------------------------------


@contextmanager
def local_mode(state_dir: Path, compute: str, timeout: float = 180.0) -> Iterator[subprocess.Popen[bytes]]:
    log = (state_dir / "bench-up.log").open("w")
    command = [sys.executable, "-m", "trainplane", "up", "--port", "0", "--state-dir", str(state_dir), "--compute", compute]
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not (state_dir / ENDPOINT_FILE).exists():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = (state_dir / "bench-up.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"`trainplane up` did not become ready (exit {process.poll()}):\n{tail}")
            time.sleep(0.1)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        log.close()


@dataclass
class LoadResult:
    name: str
    latencies_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    wall_seconds: float = 0.0
    server_cpu_seconds: float = 0.0
    client_cpu_seconds: float = 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]

    @property
    def rps(self) -> float:
        return len(self.latencies_ms) / self.wall_seconds if self.wall_seconds else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "requests": len(self.latencies_ms),
            "errors": dict(self.errors),
            "p50_ms": round(self.percentile(50), 2),
            "p90_ms": round(self.percentile(90), 2),
            "p99_ms": round(self.percentile(99), 2),
            "max_ms": round(max(self.latencies_ms, default=float("nan")), 2),
            "rps": round(self.rps, 1),
            # Cores kept busy while it ran: both sides share the same machine.
            "server_cores": round(self.server_cpu_seconds / self.wall_seconds, 2) if self.wall_seconds else 0.0,
            "client_cores": round(self.client_cpu_seconds / self.wall_seconds, 2) if self.wall_seconds else 0.0,
        }


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc), 0 where that is not available."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def hammer(
    name: str,
    clients: list[Client],
    seconds: float,
    call: Callable[[Client, int], object],
    server_pid: int = 0,
    rate: float | None = None,
) -> LoadResult:
    """One thread per client, released together, for `seconds`.

    Without `rate` each client calls back to back (a closed loop: the figures are at saturation).
    With `rate` (requests/s over all clients) each client sends on a fixed schedule and skips the
    sends it is too late for (an open loop: latency at that offered load, not at saturation).
    """
    result = LoadResult(name)
    lock = threading.Lock()
    start = threading.Barrier(len(clients) + 1)
    deadline = [0.0]

    def worker(index: int, client: Client) -> None:
        local: list[float] = []
        errors: dict[str, int] = {}
        start.wait()
        n = 0
        interval = len(clients) / rate if rate else 0.0
        next_send = time.perf_counter() + interval * index / len(clients)
        while time.perf_counter() < deadline[0]:
            if interval:
                delay = next_send - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                next_send = max(next_send + interval, time.perf_counter())
            n += 1
            t0 = time.perf_counter()
            try:
                call(client, index * 1_000_000 + n)
            except Exception as exc:  # counted and reported, never hidden in the percentiles
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                continue
            local.append((time.perf_counter() - t0) * 1000)
        with lock:
            result.latencies_ms.extend(local)
            for k, v in errors.items():
                result.errors[k] = result.errors.get(k, 0) + v

    threads = [threading.Thread(target=worker, args=(i, c), daemon=True) for i, c in enumerate(clients)]
    for t in threads:
        t.start()
    deadline[0] = time.perf_counter() + seconds
    start.wait()
    t0, server0, client0 = time.perf_counter(), cpu_seconds(server_pid), time.process_time()
    for t in threads:
        t.join()
    result.wall_seconds = time.perf_counter() - t0
    result.server_cpu_seconds = cpu_seconds(server_pid) - server0 if server_pid else 0.0
    result.client_cpu_seconds = time.process_time() - client0
    return result


# --- the lean load generator --------------------------------------------------------------------
#
# The SDK client (botocore's SigV4Auth + requests, one thread per client) spends ~2.5 ms of CPU per
# request: at the ~1,000 requests/s that 16 clients with a 15 ms p50 make, that is more than the two
# cores of this machine, so the SDK clients would measure themselves, not the front door. The lean
# generator is what wrk is to a web server: 16 keep-alive connections on one asyncio loop in a
# process of its own (the other core), each request signed afresh with SigV4 (a new X-Amz-Date and
# signature every time; the signing key derived once per day, as SigV4 allows) and verified by the
# front door exactly like any other. Its signer is checked against botocore's before every run.


def lean_signer(access_key: str, secret_key: str, region: str, host: str) -> Callable[[str, str], bytes]:
    """(path, amz_date) -> the request's bytes: GET, signed host;x-amz-date, empty body."""
    import hashlib
    import hmac

    empty_hash = hashlib.sha256(b"").hexdigest()
    keys: dict[str, bytes] = {}

    def signing_key(day: str) -> bytes:
        key = keys.get(day)
        if key is None:
            key = ("AWS4" + secret_key).encode()
            for part in (day, region, "execute-api", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            keys[day] = key
        return key

    def request(path: str, amz_date: str) -> bytes:
        day = amz_date[:8]
        canonical = f"GET\n{path}\n\nhost:{host}\nx-amz-date:{amz_date}\n\nhost;x-amz-date\n{empty_hash}"
        scope = f"{day}/{region}/execute-api/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(signing_key(day), to_sign.encode(), hashlib.sha256).hexdigest()
        authorization = f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders=host;x-amz-date, Signature={signature}"
        return (
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nX-Amz-Date: {amz_date}\r\nAuthorization: {authorization}\r\n"
            "User-Agent: trainplane-bench\r\nAccept: application/json\r\n\r\n"
        ).encode()

    return request


def check_lean_signer(access_key: str, secret_key: str, region: str, host: str) -> None:
    """The lean signer's Authorization equals botocore's SigV4Auth for the same request and time."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    amz_date = "20261123T120000Z"
    path = "/jobs/job-20261123-0123456789ab"
    ours = lean_signer(access_key, secret_key, region, host)(path, amz_date).decode()
    theirs = AWSRequest(method="GET", url=f"http://{host}{path}", headers={"X-Amz-Date": amz_date})
    theirs.context["timestamp"] = amz_date
    signer = SigV4Auth(Credentials(access_key, secret_key), "execute-api", region)
    canonical = signer.canonical_request(theirs)
    signature = signer.signature(signer.string_to_sign(theirs, canonical), theirs)
    if f"Signature={signature}" not in ours:
        raise RuntimeError("the bench's lean SigV4 signer disagrees with botocore's: fix it before measuring")


def lean_load(spec: dict[str, Any], results: Any) -> None:
    """Runs in its own process: `connections` clients on GET paths for `seconds`; closed loop, or
    `rate` requests/s over all of them (open loop). Sends back latencies, errors and CPU seconds."""
    import asyncio
    import resource

    sign = lean_signer(spec["access_key"], spec["secret_key"], spec["region"], spec["host"])
    paths: list[str] = spec["paths"]
    latencies: list[float] = []
    errors: dict[str, int] = {}

    class Client(asyncio.Protocol):
        def __init__(self, index: int, done: asyncio.Future[None]) -> None:
            self.index, self.done, self.n = index, done, 0
            self.buffer = b""
            self.sent_at = 0.0
            self.transport: asyncio.Transport | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport  # type: ignore[assignment]

        def send(self) -> None:
            self.n += 1
            path = paths[(self.index * 7919 + self.n) % len(paths)]
            payload = sign(path, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
            self.sent_at = time.perf_counter()
            assert self.transport is not None
            self.transport.write(payload)

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < head_end + 4 + length:
                return
            elapsed = (time.perf_counter() - self.sent_at) * 1000
            status = head.split(" ", 2)[1]
            self.buffer = self.buffer[head_end + 4 + length :]
            if status == "200":
                latencies.append(elapsed)
            else:
                errors[f"HTTP {status}"] = errors.get(f"HTTP {status}", 0) + 1
            self.done.set_result(None) if not self.done.done() else None

        def connection_lost(self, exc: Exception | None) -> None:
            if not self.done.done():
                self.done.set_exception(ConnectionError("the front door closed the connection"))

    async def one_client(index: int, deadline: float, interval: float) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        _, client = await loop.create_connection(lambda: Client(index, done), "127.0.0.1", spec["port"])
        next_send = time.perf_counter() + interval * index / spec["connections"]
        while time.perf_counter() < deadline:
            if interval:
                delay = next_send - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                next_send = max(next_send + interval, time.perf_counter())
            client.done = done = loop.create_future()
            client.send()
            await done
        assert client.transport is not None
        client.transport.close()

    async def main() -> float:
        interval = spec["connections"] / spec["rate"] if spec.get("rate") else 0.0
        started = time.perf_counter()
        deadline = started + spec["seconds"]
        await asyncio.gather(*(one_client(i, deadline, interval) for i in range(spec["connections"])))
        return time.perf_counter() - started

    before = resource.getrusage(resource.RUSAGE_SELF)
    wall = asyncio.run(main())
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    results.put({"latencies": latencies, "errors": errors, "wall": wall, "cpu": cpu})


def lean_hammer(name: str, spec: dict[str, Any], server_pid: int) -> LoadResult:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    worker = context.Process(target=lean_load, args=(spec, results), daemon=True)
    worker.start()
    # Server CPU from when the worker is ready to send; a spawn takes ~0.1 s, negligible beside 15 s+.
    server0 = cpu_seconds(server_pid)
    outcome = results.get(timeout=spec["seconds"] + 120)
    worker.join(30)
    result = LoadResult(name, latencies_ms=outcome["latencies"], errors=outcome["errors"], wall_seconds=outcome["wall"])
    result.server_cpu_seconds = cpu_seconds(server_pid) - server0
    result.client_cpu_seconds = outcome["cpu"]
    return result


def bench_front_door(args: argparse.Namespace) -> dict[str, Any]:
    concurrency, get_seconds, post_seconds, jobs = args.concurrency, args.get_seconds, args.post_seconds, args.jobs
    with tempfile.TemporaryDirectory(prefix="trainplane-bench-") as tmp:
        state_dir = Path(tmp)
        started = time.perf_counter()
        with local_mode(state_dir, args.compute) as process:
            startup = time.perf_counter() - started
            clients = [Client(state_dir=state_dir) for _ in range(concurrency)]
            ids = [clients[0].submit(BENCH_JOB).job_id for _ in range(jobs)]
            time.sleep(5)  # let the pre-created jobs' lifecycles settle (they end FAILED/CAPACITY at once)
            # Warm every SDK client's connection and the server's code paths before measuring.
            hammer("warm-up", clients, 3.0, lambda c, n: c.get(ids[n % len(ids)]))

            def get_job(c: Client, n: int) -> object:
                return c.get(ids[n % len(ids)])

            endpoint = json.loads((state_dir / ENDPOINT_FILE).read_text())
            owner = clients[0].resolved.credentials.get_frozen_credentials()
            host = endpoint["api_url"].removeprefix("http://")
            check_lean_signer(owner.access_key, owner.secret_key, endpoint["region"], host)
            spec = {
                "access_key": owner.access_key,
                "secret_key": owner.secret_key,
                "region": endpoint["region"],
                "host": host,
                "port": int(host.rsplit(":", 1)[1]),
                "paths": [f"/jobs/{job_id}" for job_id in ids],
                "seconds": get_seconds,
                "connections": concurrency,
            }
            lean_hammer("warm-up", {**spec, "seconds": 3.0}, process.pid)
            # One client alone first: the service time, without queueing behind the others.
            single = lean_hammer("GET /jobs/{id} x1", {**spec, "connections": 1, "seconds": get_seconds / 2}, process.pid)
            get = lean_hammer("GET /jobs/{id}", spec, process.pid)
            paced = lean_hammer("GET /jobs/{id} paced", {**spec, "rate": args.paced_rate}, process.pid)
            # The same closed loop from 16 SDK clients (threads of this process): what a script using
            # trainplane.Client sees, its own ~2.5 ms of CPU per request included.
            sdk = hammer("GET /jobs/{id} SDK", clients, get_seconds / 2, get_job, process.pid)
            post = hammer("POST /jobs", clients, post_seconds, lambda c, n: c.submit(BENCH_JOB), process.pid)
            for c in clients:
                c.close()
        return {
            "startup_seconds": round(startup, 2),
            "get_single": single.summary(),
            "get": get.summary(),
            "get_paced": paced.summary(),
            "get_sdk": sdk.summary(),
            "paced_rate": args.paced_rate,
            "post": post.summary(),
            "concurrency": concurrency,
        }


# --- output --------------------------------------------------------------------------------------


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=11, help="Import-time runs per module (median).")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=64, help="Jobs created before the GET phase.")
    parser.add_argument("--get-seconds", type=float, default=30.0, help="Length of the concurrent GET phase (the 1-client phase: half).")
    parser.add_argument("--post-seconds", type=float, default=20.0, help="Length of the POST phase.")
    parser.add_argument("--paced-rate", type=float, default=20.0, help="Offered GET load (req/s, all clients) of the open-loop phase.")
    parser.add_argument("--compute", default="local", choices=["local", "sagemaker", "ec2"], help="`trainplane up --compute`.")
    parser.add_argument("--skip-imports", action="store_true")
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--json", action="store_true", help="Print the figures as one JSON document.")
    args = parser.parse_args(argv)

    figures: dict[str, Any] = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(), "load_before": load()}
    if not args.skip_imports:
        figures["imports"] = bench_imports(args.runs)
    if not args.skip_load:
        figures["front_door"] = bench_front_door(args)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0

    print(f"trainplane API benchmark, {figures['date']}\nmachine: {figures['machine']}")
    print(f"load average before: {figures['load_before']}, after: {load()} (other work on the machine skews every figure)\n")
    if "imports" in figures:
        imp = figures["imports"]
        print(f"(a) import time, median of {imp['runs']} fresh interpreters     wall ms    CPU ms")
        print(f"    import {HANDLER_MODULE:<24} {imp['handler_wall_ms']:12.1f} {imp['handler_cpu_ms']:9.1f}")
        print(f"    import {'boto3':<24} {imp['boto3_wall_ms']:12.1f} {imp['boto3_cpu_ms']:9.1f}")
        print(f"    ratio {'':<28} {imp['wall_ratio']:11.2f}x {imp['cpu_ratio']:8.2f}x")
        print(f"    goal <= {GOAL_IMPORT_RATIO}x (on CPU time): {verdict(imp['cpu_ratio'] <= GOAL_IMPORT_RATIO)}")
        heaviest = ", ".join(f"{n} {ms:.0f}" for n, ms in imp["handler_top"])
        print(f"    heaviest packages under the handler (cumulative ms): {heaviest}")
    if "front_door" in figures:
        fd = figures["front_door"]
        print(f"\n(b) local front door, {fd['concurrency']} concurrent signed clients (local mode ready in {fd['startup_seconds']} s)")
        header = ["requests", "errors", "p50 ms", "p90 ms", "p99 ms", "max ms", "req/s", "srv cores", "cli cores"]
        print(f"    {'route':<22}" + "".join(f" {h:>9}" for h in header))
        rows = (
            ("get_single", "GET /jobs/{id}, 1 cli"),
            ("get", "GET /jobs/{id}"),
            ("get_paced", f"GET, {fd['paced_rate']:g} req/s offered"),
            ("get_sdk", "GET, 16 SDK clients"),
            ("post", "POST /jobs"),
        )
        for key, label in rows:
            s = fd[key]
            cells = [s["requests"], sum(s["errors"].values()), s["p50_ms"], s["p90_ms"], s["p99_ms"], s["max_ms"], s["rps"]]
            cells += [s["server_cores"], s["client_cores"]]
            print(f"    {label:<22}" + "".join(f" {c:>9}" for c in cells))
            if s["errors"]:
                print(f"      errors: {s['errors']}")
        g = fd["get"]
        p50_ok, p99_ok = g["p50_ms"] <= GOAL_GET_P50_MS, g["p99_ms"] <= GOAL_GET_P99_MS
        print(f"    GET p50 goal <= {GOAL_GET_P50_MS} ms: {verdict(p50_ok)}; p99 goal <= {GOAL_GET_P99_MS} ms: {verdict(p99_ok)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
