"""Suite-wide settings. Fixtures that build tiny models and data live in tests/helpers.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Never reach real AWS from a test, whatever the developer's shell holds.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("AWS_PROFILE", None)

# One torch (OpenMP/MKL) intra-op thread, here and in every process the suite starts (trainers under
# `trainplane up`, the trainer tests' children, DeepSpeed's and DDP's workers inherit it): the models are
# tiny, and on the shared 2-core host a second thread spin-waits for a descheduled sibling while the plane,
# pytest and other workers want the cores (a tiny LoRA step took ~50x longer with two threads than one under
# load; docs/TESTING.md, "CI wall time"). Set before anything imports torch; OMP_NUM_THREADS=N overrides.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", os.environ["OMP_NUM_THREADS"])

# pytest-xdist's workers start with COLUMNS=80, which the CLI's consoles (trainplane/cli_output.py) read once at
# import: a worker would render tables and messages 80 columns wide where the serial run (no COLUMNS) lets each
# CliRunner.invoke(env={"COLUMNS": ...}) decide. Give the workers the serial run's environment.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.pop("COLUMNS", None)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # pytest exits 5 when it collected nothing: CI must not read that as a pass.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config: pytest.Config) -> None:
    # Every AWS call the control plane makes during this run, one JSON line each, for `make iam-check`
    # (localmode/iam_calls.py; docs/DEPLOY.md). One file per run: a run starts it empty; the `trainplane
    # up` processes the e2e tests start inherit the variable and append to it.
    from localmode import iam_calls

    if hasattr(config, "workerinput"):  # an xdist worker appends to its controller's file
        iam_calls.install_from_env()
        return
    path = Path(os.environ.get(iam_calls.CALLS_FILE_ENV) or Path(__file__).resolve().parents[1] / "build" / "iam" / "calls.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    os.environ[iam_calls.CALLS_FILE_ENV] = str(path)
    iam_calls.install(str(path))


# --- the GPU tests (marker `gpu`; `make test-gpu`) -------------------------------------------------


def _selects_gpu(markexpr: str) -> bool:
    """Whether a -m expression asks for the gpu-marked tests (`-m gpu`, `-m "gpu and slow"`), rather
    than admitting them among others (`-m "not e2e"`) or leaving them out (`-m "not gpu"`)."""
    if not markexpr:
        return False
    from _pytest.mark.expression import Expression

    expression = Expression.compile(markexpr)
    return expression.evaluate(lambda name: name == "gpu") and not expression.evaluate(lambda name: False)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    selected = _selects_gpu(config.option.markexpr or "") or os.environ.get("TRAINPLANE_GPU_TESTS") == "1"
    if not gpu_items and not selected:
        return
    if _cuda_available():
        return
    if selected:
        # Asked for the GPU tests on a host without CUDA: an error, never a run of skips that reads as a pass.
        raise pytest.UsageError(
            f"the gpu-marked tests were selected ({len(gpu_items)} collected) but torch sees no CUDA device here: "
            "run them on a GPU host (`make test-gpu`)"
        )
    skip = pytest.mark.skip(reason="needs a CUDA device: `make test-gpu` runs it on a GPU host")
    for item in gpu_items:
        item.add_marker(skip)
