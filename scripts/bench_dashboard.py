"""Benchmark of the web dashboard in a real headless Chromium: prints figures, asserts nothing (goals in brackets).

1. Job list with 1,000 jobs: first render (navigation to the rows drawn), p50/p95        [p95 <= 1 s]
2. Re-render after a filter change (status select changed to rows redrawn), p50/p95        [p95 <= 1 s]
3. A loss curve of 100,000 points: navigation to the curve drawn (page load, the API's answer to
   /metrics?max_points=<2 x the chart's pixels> fetched and parsed, uPlot), p50/p95; and the drawing alone [<= 500 ms]
   3s. The API's side of that answer, in this process: metrics.jsonl's 100,000 lines parsed, reduced to
   max_points and the kept ones built as models, as JobService.metrics does (functions/service/metrics_reduce.py)
4. Bytes shipped: index.html + every asset, gzipped (what CloudFront's compression serves)  [<= 300 KB]
5. A sweep's page with 1,000 trials (3 parameters, 20 intermediate values each): navigation to the trials
   table and the three charts drawn, p50/p95; and the charts alone                          [<= 1 s]
6. Comparing 5 runs of 100,000 points each: navigation to the overlaid curves drawn (5 /metrics answers
   reduced by the API to 2 points per pixel, aligned, uPlot), p50/p95; and the drawing alone  [<= 1 s]

What is measured is the page: the built bundle (dashboard_assets/static) is served and the API answered
by a stand-in HTTP server on loopback (pre-built answers: no signature check, no DynamoDB), with 1,000
synthetic jobs of the API's shape filtered and paged like GET /jobs does, and /metrics answered with the
API's own reduction (reduce_points, computed once per max_points), so server time is kept out of the
figures as far as a real socket allows; 3s measures the server's part on its own. The list shows
the API's page (50 rows, `--page-size` to change it: 200 is the API's largest).
Usage: .venv/bin/python scripts/bench_dashboard.py [--runs 20] [--jobs 1000] [--points 100000] [--page-size 50] [--trials 1000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import mimetypes
import os
import random
import statistics
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dashboard_assets import SOURCE_HASH_FILE, STATIC_DIR  # noqa: E402
from functions.service.metrics_reduce import parse_documents, reduce_documents, reduce_points  # noqa: E402
from schemas.api import MetricsPoint  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]  # fmt: skip
STATUSES = ["QUEUED", "TRAINING", "COMPLETED", "FAILED", "PAUSED", "CANCELLED"]


def make_jobs(n: int) -> list[dict[str, Any]]:
    rng = random.Random(7)
    now = datetime.now(UTC)
    jobs: list[dict[str, Any]] = []
    for i in range(n):
        status = STATUSES[i % len(STATUSES)]
        created = (now - timedelta(minutes=i * 7)).isoformat()
        jobs.append(
            {
                "job_id": f"job-bench-{i:05d}",
                "owner": "arn:aws:iam::123456789012:user/alice",
                "name": f"bench job {i} {rng.choice(['bert', 'llama', 'qwen', 'mistral'])}",
                "description": None,
                "status": status,
                "labels": {"experiment": f"exp-{i % 12}", "team": "bench"},
                "training_config": {"training_type": rng.choice(["LORA", "SFT", "DPO"]), "hyperparameters": {"max_steps": "1000"}},
                "data_config": {"batch_size": 8},
                "resource_config": {"gpu_count": 1},
                "output_config": {},
                "scheduling_config": {"priority": i % 11, "queue": "default"},
                "progress": {"step": (i * 37) % 1000, "total_steps": 1000, "percent": ((i * 37) % 1000) / 10},
                "created_at": created,
                "updated_at": created,
                "checkpoints": [],
                "cost": {"estimated_cost_usd": 0, "attempts": []},
                "version": 1,
                "attempt": 1,
            }
        )
    return jobs


def make_sweep(trials: int) -> dict[str, Any]:
    """A finished bayes sweep of the API's shape: `trials` trials over 3 parameters, 20 intermediate values each."""
    rng = random.Random(11)
    now = datetime.now(UTC).isoformat()
    rows: list[dict[str, Any]] = []
    for n in range(trials):
        x, y, lr = rng.random(), rng.random(), 10 ** rng.uniform(-5, -2)
        value = 1 - (x - 0.3) ** 2 - (y - 0.7) ** 2
        pruned = n % 3 == 0
        steps = 8 if pruned else 20
        rows.append({"number": n, "state": "PRUNED" if pruned else "COMPLETE", "params": {"x": x, "y": y, "learning_rate": lr},
                     "value": value, "job_id": f"job-bench-{n:05d}", "job_status": "COMPLETED", "created_at": now, "ended_at": now,
                     "intermediate_values": {str(s * 10): value * (1 - math.exp(-s / 4)) for s in range(1, steps + 1)}})  # fmt: skip
    best = max(rows, key=lambda t: t["value"])
    parameters = {"x": {"type": "double", "min": 0, "max": 1}, "y": {"type": "double", "min": 0, "max": 1},
                  "learning_rate": {"type": "double", "min": 1e-5, "max": 1e-2, "scale": "log"}}  # fmt: skip
    return {
        "sweep_id": "swp-bench", "owner": "arn:aws:iam::123456789012:user/alice", "name": "bench sweep", "status": "COMPLETED",
        "job_template": {}, "created_at": now, "updated_at": now, "version": 1,
        "hyperParameterTuningConfig": {"method": "bayes", "maxTrials": trials, "maxParallelTrials": 8,
                                       "metric": {"name": "score", "goal": "maximize"}, "parameters": parameters},
        "counts": {"total": trials, "completed": trials - len(rows[::3]), "pruned": len(rows[::3]), "failed": 0, "running": 0},
        "best_trial": {"number": best["number"], "value": best["value"], "params": best["params"], "job_id": best["job_id"]},
        "trials": rows,
    }  # fmt: skip


def api_answer(jobs: list[dict[str, Any]], points: list[dict[str, Any]], url: str, sweep: dict[str, Any] | None = None) -> tuple[int, Any]:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    path = parts.path
    if path.startswith("/sweeps/") and sweep is not None:
        return 200, sweep
    if path == "/summary":
        counts: dict[str, int] = {}
        for job in jobs:
            counts[job["status"]] = counts.get(job["status"], 0) + 1
        return 200, {"total": len(jobs), "running": counts.get("TRAINING", 0), "completed": counts.get("COMPLETED", 0),
                     "failed": counts.get("FAILED", 0), "queued": counts.get("QUEUED", 0), "paused": counts.get("PAUSED", 0),
                     "counts": counts}  # fmt: skip
    if path == "/jobs":
        low, high = int(query.get("priority_min", "0")), int(query.get("priority_max", "10"))
        chosen = [
            j
            for j in jobs
            if (not query.get("status") or j["status"] == query["status"])
            and query.get("name", "") in j["name"]
            and low <= j["scheduling_config"]["priority"] <= high
        ]
        start = int(query.get("next_token", "0"))
        limit = int(query.get("limit", "50"))
        page = chosen[start : start + limit]
        return 200, {"jobs": page, "next_token": str(start + limit) if start + limit < len(chosen) else None}
    if path.startswith("/jobs/"):
        job_id = path.split("/")[2]
        if path.endswith("/metrics"):
            return 200, {"points": points}
        if path.endswith("/events"):
            return 200, {"events": []}
        if path.endswith("/logs"):
            return 200, {"lines": [], "next_token": None}
        found: dict[str, Any] | None = next((j for j in jobs if j["job_id"] == job_id), None)
        return (200, found) if found else (404, {"message": "not found"})
    return 404, {"message": "unknown"}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1)]


def summary(name: str, values: list[float], goal: str) -> None:
    print(f"{name:<58} p50 {statistics.median(values):7.1f} ms   p95 {percentile(values, 95):7.1f} ms   max {max(values):7.1f} ms   {goal}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--page-size", type=int, default=50)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--timeline", action="store_true", help="print the first measured navigation's resource timeline")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    load_before = os.getloadavg()
    jobs = make_jobs(args.jobs)
    sweep_body = json.dumps(make_sweep(args.trials)).encode()
    rng = random.Random(1)
    points = [
        {
            "step": s,
            "loss": 3.0 * math.exp(-s / 30000) + rng.random() * 0.2,
            "eval_loss": 2.9 * math.exp(-s / 30000) if s % 1000 == 0 else None,
        }
        for s in range(args.points)
    ]
    lines = [json.dumps({k: v for k, v in p.items() if v is not None}) for p in points]
    parsed = [MetricsPoint.model_validate_json(line) for line in lines]
    metrics_bodies: dict[str, bytes] = {}

    def metrics_body(max_points: str | None) -> bytes:
        # The API's answer (JobService.metrics): every point, or reduced to max_points; built once per value.
        key = max_points or ""
        if key not in metrics_bodies:
            kept = reduce_points(parsed, int(max_points)) if max_points else parsed
            document = {"points": [p.model_dump(mode="json", exclude_none=True) for p in kept], "total_points": len(parsed)}
            metrics_bodies[key] = json.dumps(document).encode()
        return metrics_bodies[key]

    server_side: list[float] = []
    for _ in range(min(args.runs, 10)):
        started = time.perf_counter()
        kept = reduce_documents(parse_documents(lines), 1800)  # JobService.metrics(max_points=1800)'s work
        [MetricsPoint.model_validate(d) for d in kept]
        server_side.append((time.perf_counter() - started) * 1000)
    files = {"/" if p.name == "index.html" else "/" + p.relative_to(STATIC_DIR).as_posix(): p
             for p in STATIC_DIR.rglob("*") if p.is_file() and p.name != SOURCE_HASH_FILE}  # fmt: skip
    config = json.dumps({"mode": "local", "region": "us-east-1", "api_url": ""})

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path in files:
                kind = mimetypes.guess_type(files[path].name)[0] or "text/html"
                self.reply(200, files[path].read_bytes(), kind)
            elif path == "/dashboard-config.json":
                self.reply(200, config.encode(), "application/json")
            elif path.endswith("/metrics"):
                asked = parse_qs(urlsplit(self.path).query).get("max_points", [None])[0]
                self.reply(200, metrics_body(asked), "application/json")
            else:
                if urlsplit(self.path).path == "/sweeps/swp-bench":
                    self.reply(200, sweep_body, "application/json")
                    return
                status, body = api_answer(jobs, points, self.path)
                self.reply(status, json.dumps(body).encode(), "application/json")

        def reply(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            if not isinstance(sys.exc_info()[1], ConnectionError):  # a navigation away cut an answer short: expected
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"

    creds = json.dumps({"accessKeyId": "AKIABENCHBENCHBENCH0", "secretAccessKey": "b" * 40, "principal": "bench"})
    first, refilter, curve, draw = [], [], [], []
    sweep_page: list[float] = []
    sweep_draw: list[float] = []
    compare_page: list[float] = []
    compare_draw: list[float] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        context.add_init_script(f"sessionStorage.setItem('trainplane.credentials', {json.dumps(creds)})")
        page = context.new_page()
        for run in range(args.runs + 1):  # the first run warms the HTTP cache and the JIT: not counted
            page.goto(f"{origin}/?run={run}#/jobs?size={args.page_size}")
            page.wait_for_selector(f"tbody tr:nth-child({min(args.page_size, args.jobs)})")
            loaded = page.evaluate("performance.now()")  # since this navigation started
            if run == 1 and args.timeline:
                entries = page.evaluate(
                    "performance.getEntries().map(e => "
                    "[e.entryType, e.name.split('/').pop().slice(0, 40), Math.round(e.startTime), Math.round(e.duration)])"
                )
                for entry in entries:
                    print("   timeline:", *entry)
            if run:
                first.append(loaded)
            took = page.evaluate(
                """(status) => new Promise((resolve) => {
                    const tbody = document.querySelector('tbody');
                    const select = document.querySelector('select[name=status]');
                    const t0 = performance.now();
                    new MutationObserver((_, obs) => {
                        if (tbody.querySelector('tr') && [...tbody.querySelectorAll('.badge')].every(b => b.dataset.status === status)) {
                            obs.disconnect(); resolve(performance.now() - t0);
                        }
                    }).observe(tbody, {childList: true});
                    select.value = status; select.dispatchEvent(new Event('change'));
                })""",
                STATUSES[run % len(STATUSES)] if STATUSES[run % len(STATUSES)] != "TRAINING" else "FAILED",
            )
            if run:
                refilter.append(took)
        for run in range(min(args.runs, 10) + 1):
            page.goto(f"{origin}/?curve={run}#/jobs/job-bench-00001")
            page.wait_for_selector(f'[data-testid="loss-chart"][data-points="{args.points}"] canvas', timeout=60_000)
            drawn = page.evaluate("performance.now()")
            if run:
                curve.append(drawn)
                draw.append(page.evaluate("performance.getEntriesByName('loss-chart').pop().duration"))
        drawn_points = page.evaluate("document.querySelector('[data-testid=loss-chart]').nextElementSibling.textContent")
        for run in range(min(args.runs, 10) + 1):
            page.goto(f"{origin}/?sweep={run}#/sweeps/swp-bench")
            page.wait_for_selector(f'table.trials[data-rows="{args.trials}"]', timeout=60_000)
            page.wait_for_selector('[data-testid="intermediate-chart"] canvas')
            if run:
                sweep_page.append(page.evaluate("performance.now()"))
                sweep_draw.append(page.evaluate("performance.getEntriesByName('sweep-charts').pop().duration"))
        compared = ",".join(f"job-bench-{i:05d}" for i in range(5))
        for run in range(min(args.runs, 10) + 1):
            page.goto(f"{origin}/?compare={run}#/compare?jobs={compared}")
            page.wait_for_selector('[data-testid="compare-chart"][data-runs="5"] canvas', timeout=60_000)
            if run:
                compare_page.append(page.evaluate("performance.now()"))
                compare_draw.append(page.evaluate("performance.getEntriesByName('compare-chart').pop().duration"))
        compare_note = page.evaluate("document.querySelector('[data-testid=compare-chart]').dataset.points")
        browser.close()
    server.shutdown()

    metrics_body(None)  # the whole answer's size, for the note
    shipped = {p.name: len(gzip.compress(p.read_bytes(), 9)) for p in files.values()}
    print(f"dashboard benchmark: {args.jobs} jobs, page size {args.page_size}, {args.runs} runs; curve {args.points} points")
    print(f"load average (1, 5, 15 min) before: {load_before[0]:.1f} {load_before[1]:.1f} {load_before[2]:.1f}; after: "
          f"{os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}; {os.cpu_count()} cores")  # fmt: skip
    summary("1. job list, first render (navigation -> rows drawn)", first, "[p95 <= 1000 ms]")
    summary("2. re-render after a status filter change", refilter, "[p95 <= 1000 ms]")
    summary("3. loss curve of 100,000 points (navigation -> drawn)", curve, "[<= 500 ms]")
    summary("   of which drawing (uPlot, client-side min/max a no-op)", draw, "")
    summary("3s. API side: parse 100,000 lines, reduce to 1,800 points", server_side, "")
    sizes = ", ".join(f"max_points={k or 'none'}: {len(v) / 1024:.0f} KB" for k, v in sorted(metrics_bodies.items()))
    print(f"   curve note: {drawn_points}  /metrics answers ({sizes})")
    total = sum(shipped.values())
    detail = ", ".join(f"{name} {size / 1024:.1f} KB" for name, size in sorted(shipped.items()))
    print(f"4. bytes shipped, gzipped: {total / 1024:.1f} KB ({detail})   [<= 300 KB]")
    summary(f"5. sweep page, {args.trials} trials (navigation -> table + charts)", sweep_page, "[<= 1000 ms]")
    summary("   of which the three charts", sweep_draw, "")
    summary(f"6. compare 5 runs x {args.points} points (navigation -> drawn)", compare_page, "[<= 1000 ms]")
    summary("   of which aligning and drawing (uPlot)", compare_draw, "")
    print(f"   compare note: {compare_note} points in all, each run's /metrics reduced by the API to 2 per pixel")


if __name__ == "__main__":
    main()
