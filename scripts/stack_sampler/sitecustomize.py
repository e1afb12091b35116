"""A sampling profiler for `trainplane up` (or any Python process), with no profiler hooks in the sampled code:
a thread reads every other thread's stack (sys._current_frames) every STACK_SAMPLE_INTERVAL seconds (default
0.005) and charges the CPU time the thread used since its previous sample (its own CPU clock,
time.pthread_getcpuclockid) to the function it is running (self) and to every function on its stack
(inclusive): a CPU profile, where a thread blocked in a read or a queue costs nothing. Loaded as `sitecustomize` from PYTHONPATH, only where
STACK_SAMPLE_OUT is set and the process's command line contains STACK_SAMPLE_MATCH (default "up"); the
tables are written to STACK_SAMPLE_OUT every 10 s and at exit.

Usage: PYTHONPATH=scripts/stack_sampler STACK_SAMPLE_OUT=/tmp/up.txt <a command that starts trainplane up>
(tests/e2e's LocalPlane passes both variables on to the plane's process).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections import defaultdict
from types import FrameType


def _label(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    for marker in ("site-packages/", "/lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        path = os.path.relpath(path) if path.startswith("/") else path
    return f"{path}:{code.co_firstlineno}({code.co_name})"


class Sampler:
    def __init__(self, out: str, interval: float) -> None:
        self.out = out
        self.interval = interval
        self.self_counts: defaultdict[str, float] = defaultdict(float)  # CPU seconds
        self.inclusive: defaultdict[str, float] = defaultdict(float)
        self.busy = 0.0
        self.clocks: dict[int, tuple[int, float]] = {}  # thread ident -> (its CPU clock, its CPU time at the last sample)
        self.samples = 0
        self.started = time.monotonic()
        self.lock = threading.Lock()

    def run(self) -> None:
        me = threading.get_ident()
        last_write = time.monotonic()
        while True:
            time.sleep(self.interval)
            frames = sys._current_frames()
            with self.lock:
                self.samples += 1
                for ident, frame in frames.items():
                    cpu = self._cpu_since_last(ident)
                    if ident == me or not cpu:
                        continue
                    self.busy += cpu
                    self.self_counts[_label(frame)] += cpu
                    seen = set()
                    f: FrameType | None = frame
                    while f is not None:
                        label = _label(f)
                        if label not in seen:
                            seen.add(label)
                            self.inclusive[label] += cpu
                        f = f.f_back
            if time.monotonic() - last_write > 10:
                self.write()
                last_write = time.monotonic()

    def _cpu_since_last(self, ident: int) -> float:
        try:
            clock, last = self.clocks.get(ident) or (time.pthread_getcpuclockid(ident), None)
            now = time.clock_gettime(clock)
        except OSError:  # the thread has ended
            self.clocks.pop(ident, None)
            return 0.0
        self.clocks[ident] = (clock, now)
        return 0.0 if last is None else now - last

    def write(self) -> None:
        with self.lock:
            busy = max(self.busy, 1e-9)
            lines = [
                f"{time.monotonic() - self.started:.0f} s wall, {self.samples} sampling rounds every {self.interval * 1e3:.0f} ms, "
                f"{self.busy:.1f} s of the sampled threads' CPU",
                "",
                "--- self (the function a thread was running), % of the CPU",
                *(f"{n / busy * 100:6.1f}%  {label}" for label, n in _top(self.self_counts, 40)),
                "",
                "--- inclusive (on the thread's stack), % of the CPU",
                *(f"{n / busy * 100:6.1f}%  {label}" for label, n in _top(self.inclusive, 120)),
            ]
        tmp = self.out + ".tmp"
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, self.out)


def _top(counts: dict[str, float], n: int) -> list[tuple[str, float]]:
    return sorted(counts.items(), key=lambda kv: kv[1], reverse=True)[:n]


def _start() -> None:
    out = os.environ.get("STACK_SAMPLE_OUT")
    match = os.environ.get("STACK_SAMPLE_MATCH", "up")
    if not out or match not in getattr(sys, "orig_argv", sys.argv):
        return
    sampler = Sampler(out, float(os.environ.get("STACK_SAMPLE_INTERVAL", "0.005")))
    threading.Thread(target=sampler.run, name="stack-sampler", daemon=True).start()
    atexit.register(sampler.write)


_start()
