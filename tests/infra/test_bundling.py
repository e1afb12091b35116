"""The Lambda bundle: locked, cached, pruned, small, and free of torch and the sagemaker SDK."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra import bundling
from infra.bundling import BundlingError

pytestmark = pytest.mark.infra

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bundle() -> bundling.LambdaBundle:
    return bundling.build_bundle()


def test_lock_pins_exactly_what_pyproject_pins() -> None:
    # Given pyproject's core dependencies and the committed Lambda lock
    bundling.check_lock()  # raises on drift
    pins = bundling.project_pins()
    locked = bundling.lock_pins()
    # Then every core dependency is locked at its version, every line carries a sha256
    assert {name: locked[name] for name in pins} == pins
    lines = [line for line in bundling.LOCK_FILE.read_text().splitlines() if line and not line.startswith("#")]
    assert all(re.search(r"--hash=sha256:[0-9a-f]{64}$", line) for line in lines)
    assert not set(locked) & set(bundling.FORBIDDEN_DISTRIBUTIONS)


def test_a_lock_that_drifted_is_refused(tmp_path: Path) -> None:
    # Given a lock whose pydantic differs from pyproject's pin
    lock = tmp_path / "lock.txt"
    lock.write_text(bundling.LOCK_FILE.read_text().replace("pydantic==", "pydantic==0.0.1-"))
    # When it is checked, Then the error names the package and the command that fixes it
    with pytest.raises(BundlingError, match=r"pydantic: pyproject .*python -m infra.bundling lock"):
        bundling.check_lock(lock)
    with pytest.raises(BundlingError, match="is missing"):
        bundling.check_lock(tmp_path / "absent.txt")


def test_unpinned_dependency_is_refused(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["boto3>=1.30"]\n')
    with pytest.raises(BundlingError, match="not pinned"):
        bundling.project_pins(pyproject)


def test_bundle_is_small_and_has_no_heavy_packages(bundle: bundling.LambdaBundle) -> None:
    # Given the bundle the stack deploys
    names = {p.name.lower() for p in bundle.path.iterdir()}
    # Then it holds the code and the core dependencies ...
    assert {"functions", "schemas", "aws_lambda_powertools", "pydantic", "pydantic_core", "boto3", "botocore"} <= names
    # ... built for the Lambda platform (arm64, CPython 3.12) ...
    assert list((bundle.path / "pydantic_core").glob("*cpython-312-aarch64-linux-gnu.so"))
    # ... without torch, transformers or the sagemaker SDK, and within the 30 MB unzipped goal
    assert not {n for n in names if re.split(r"[-_.]", n)[0] in bundling.FORBIDDEN_DISTRIBUTIONS}
    assert bundle.unzipped_bytes <= bundling.SIZE_GOAL_BYTES, bundle.report()
    print(bundle.report())


def test_botocore_keeps_every_service_the_code_creates_a_client_for(bundle: bundling.LambdaBundle) -> None:
    # Given every boto3 client the Lambda code creates (client("...") with a literal name)
    sources = "\n".join(p.read_text() for p in (ROOT / "functions").rglob("*.py"))
    used = set(re.findall(r"""client\(\s*["']([a-z0-9-]+)["']""", sources))
    assert {"dynamodb", "s3", "stepfunctions"} <= used  # the scan does see the code's clients
    # Then each service's model survived the pruning
    kept = {p.name for p in (bundle.path / "botocore" / "data").iterdir() if p.is_dir()}
    assert used <= kept, f"add {sorted(used - kept)} to infra.bundling.BOTOCORE_SERVICES"
    assert kept <= bundling.BOTOCORE_SERVICES


def test_the_bundle_carries_the_working_trees_code(bundle: bundling.LambdaBundle) -> None:
    # The handlers' own modules are plain copies of the working tree's
    for relative in ("functions/settings.py", "schemas/job.py", "functions/handlers/lifecycle.py"):
        assert (bundle.path / relative).read_bytes() == (ROOT / relative).read_bytes()
    assert not list(bundle.path.rglob("__pycache__"))


def test_dependencies_are_built_once_per_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a cache that already holds the tree for the current lock
    key = bundling.dependencies_key()
    tree = tmp_path / "deps" / key
    (tree / "somepkg").mkdir(parents=True)
    (tmp_path / "deps" / f"{key}.complete").write_text("{}")

    def no_pip(args: list[str]) -> None:
        raise AssertionError("pip must not run when the cache holds this lock's tree")

    monkeypatch.setattr(bundling, "_pip", no_pip)
    # When the dependencies are asked for, Then the cached tree is returned without pip
    assert bundling.ensure_dependencies(cache=tmp_path) == tree


def test_a_failed_install_leaves_no_half_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given pip failing (the registry is down)
    def failing_pip(args: list[str]) -> None:
        raise BundlingError("pip failed 3 times")

    monkeypatch.setattr(bundling, "_pip", failing_pip)
    # When the dependencies are built, Then the error surfaces and nothing is left as if complete
    with pytest.raises(BundlingError, match="pip failed"):
        bundling.ensure_dependencies(cache=tmp_path)
    assert not (tmp_path / "deps").exists() or not any((tmp_path / "deps").iterdir())
    assert not list(tmp_path.glob("deps-*"))


def test_pip_is_retried_then_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    calls: list[list[str]] = []

    def run(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        return subprocess.CompletedProcess(command, 1, "", "ERROR: Could not find a version")

    monkeypatch.setattr(bundling.subprocess, "run", run)
    monkeypatch.setattr(bundling.time, "sleep", lambda _: None)
    with pytest.raises(BundlingError, match="Could not find a version"):
        bundling._pip(["install", "x"])
    assert len(calls) == bundling.PIP_ATTEMPTS


def test_prune_drops_unused_service_models(tmp_path: Path) -> None:
    # Given a tree with a used and an unused botocore service, examples and caches
    for service in ("dynamodb", "iot"):
        (tmp_path / "botocore" / "data" / service / "2020-01-01").mkdir(parents=True)
        (tmp_path / "botocore" / "data" / service / "2020-01-01" / "service-2.json.gz").write_text("{}")
        (tmp_path / "botocore" / "data" / service / "2020-01-01" / "examples-1.json").write_text("{}")
    (tmp_path / "botocore" / "data" / "endpoints.json").write_text("{}")
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    # When it is pruned
    bundling.prune(tmp_path)
    # Then only what the Lambda loads remains
    data = tmp_path / "botocore" / "data"
    assert (data / "dynamodb" / "2020-01-01" / "service-2.json.gz").exists()
    assert not (data / "iot").exists() and not (data / "dynamodb" / "2020-01-01" / "examples-1.json").exists()
    assert (data / "endpoints.json").exists()
    assert not (tmp_path / "pkg" / "__pycache__").exists() and not (tmp_path / "bin").exists()
