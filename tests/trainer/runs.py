"""Run the real trainer entry point on a tiny job: in-process (fast: torch and transformers are imported
once per pytest process) or as a child process where the contract needs one (SIGTERM, exit codes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from schemas.api import MetricsPoint
from schemas.checkpoint import MANIFEST_NAME, CheckpointManifest
from schemas.configs import TrainingType
from schemas.trainer import TrainerEvent, TrainerEventKind
from tests.trainer.conftest import DATASET_KIND, TINY_LLAMA, make_records, write_jsonl

REPO = Path(__file__).resolve().parents[2]

# Fast enough to learn something in ~20 steps of a 2-layer, 32-wide llama on the byte tokenizer.
FAST_HYPER = {"max_steps": "12", "learning_rate": "3e-3", "logging_steps": "1"}


def make_spec(
    root: Path,
    training_type: str = "FULL_FINETUNE",
    *,
    hyperparameters: dict[str, str] | None = None,
    records: int = 24,
    data_config: dict[str, Any] | None = None,
    output_config: dict[str, Any] | None = None,
    model_kwargs: dict[str, Any] | None = None,
    framework: dict[str, Any] | None = None,
    resource_config: dict[str, Any] | None = None,
    **spec_fields: Any,
) -> dict[str, Any]:
    """A RunSpec dict for a tiny CPU job whose data, checkpoints and metrics live under root."""
    data_file = root / "data" / "train.jsonl"
    if not data_file.exists():
        kind = DATASET_KIND.get(TrainingType(training_type), "text")
        write_jsonl(data_file, make_records(kind, records))
    spec: dict[str, Any] = {
        "job_id": "job-1",
        "attempt": 1,
        "training_config": {
            "training_type": training_type,
            "base_model": {
                "model_id": "tiny-llama",
                "source": "config",
                "tokenizer_id": "byte",
                "dtype": "float32",
                "model_kwargs": dict(TINY_LLAMA if model_kwargs is None else model_kwargs),
            },
            "hyperparameters": dict(FAST_HYPER if hyperparameters is None else hyperparameters),
            "framework": framework or {},
        },
        "data_config": {"sources": [{"path": str(data_file)}], "max_seq_length": 48, "batch_size": 4, **(data_config or {})},
        "output_config": {"checkpoint": {"save_steps": 1000, "save_total_limit": 3}, **(output_config or {})},
        "resource_config": {"gpu_count": 0, **(resource_config or {})},
        "checkpoint_uri": str(root / "checkpoints"),
        "metrics_uri": str(root / "metrics.jsonl"),
    }
    spec.update(spec_fields)
    return spec


def trainer_env(root: Path, spec: dict[str, Any] | None) -> dict[str, str]:
    """The LocalLauncher's environment: every /opt/ml path moved under root."""
    env = {
        "SM_MODEL_DIR": str(root / "model"),
        "TRAINPLANE_CHECKPOINT_DIR": str(root / "staging"),
        "SM_OUTPUT_DATA_DIR": str(root / "output" / "data"),
        "TRAINPLANE_FAILURE_FILE": str(root / "output" / "failure"),
        "SM_INPUT_CONFIG_DIR": str(root / "config"),
    }
    if spec is not None:
        spec_file = root / "config" / "run.json"
        spec_file.parent.mkdir(parents=True, exist_ok=True)
        spec_file.write_text(json.dumps(spec), encoding="utf-8")
        env["TRAINPLANE_RUN_SPEC"] = str(spec_file)
    return env


@dataclass
class Outcome:
    code: int
    events: list[TrainerEvent]
    stdout: str
    root: Path
    stderr: str = ""

    def of_kind(self, kind: TrainerEventKind) -> list[TrainerEvent]:
        return [e for e in self.events if e.kind == kind]

    @property
    def done(self) -> TrainerEvent:
        return self.of_kind(TrainerEventKind.DONE)[-1]

    def losses(self) -> dict[int, float]:
        """step -> training loss, from metrics.jsonl (the latest attempt's point wins)."""
        return {p.step: p.loss for p in metrics_points(self.root) if p.loss is not None}

    def failure_text(self) -> str:
        return (self.root / "output" / "failure").read_text(encoding="utf-8")

    def checkpoints(self) -> list[CheckpointManifest]:
        folder = self.root / "checkpoints"
        found = [d / MANIFEST_NAME for d in sorted(folder.glob("step-*"))]
        manifests = [CheckpointManifest.model_validate_json(path.read_text()) for path in found if path.exists()]
        return sorted(manifests, key=lambda m: m.step)


def metrics_points(root: Path) -> list[MetricsPoint]:
    path = root / "metrics.jsonl"
    return [MetricsPoint.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def parse_events(stdout: str) -> list[TrainerEvent]:
    return [event for line in stdout.splitlines() if (event := TrainerEvent.from_line(line)) is not None]


def run_in_process(root: Path, spec: dict[str, Any] | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Outcome:
    from trainer.__main__ import main

    for key, value in trainer_env(root, spec).items():
        monkeypatch.setenv(key, value)
    capsys.readouterr()  # drop whatever an earlier run of this test printed
    code = main([])
    captured = capsys.readouterr()
    return Outcome(code=code, events=parse_events(captured.out), stdout=captured.out, root=root, stderr=captured.err)


def child_env(extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """A child interpreter's environment: this one's, the repository and the trainer importable, no coverage."""
    env = {**os.environ, **(extra_env or {})}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "trainer_image"), env.get("PYTHONPATH", "")])
    env.pop("COV_CORE_SOURCE", None)  # no coverage in the child: it would slow the start-up
    return env


def start_subprocess(root: Path, spec: dict[str, Any], extra_env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    env = child_env({**trainer_env(root, spec), **(extra_env or {})})
    return subprocess.Popen(
        [sys.executable, "-m", "trainer"], env=env, cwd=str(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
    )


@dataclass
class StoppedRun:
    """A trainer child process stopped with SIGTERM: its exit code, every event, stderr, and how long
    it took to exit after the signal."""

    returncode: int
    events: list[TrainerEvent]
    stderr: str
    seconds_to_exit: float


def run_until_sigterm(root: Path, spec: dict[str, Any], after_step: int, timeout: float = 240) -> StoppedRun:
    """Start the trainer; SIGTERM it once (rank 0) reports `after_step`; wait for it to exit."""
    proc = start_subprocess(root, spec)
    events: list[TrainerEvent] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        for line in proc.stdout:
            event = TrainerEvent.from_line(line.rstrip("\n"))
            if event is not None:
                events.append(event)
                if event.kind == TrainerEventKind.PROGRESS and event.data["step"] >= after_step:
                    break
            assert time.monotonic() < deadline, f"the trainer never reached step {after_step}"
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=120)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
    return StoppedRun(proc.returncode, events + parse_events(rest), err, took)
