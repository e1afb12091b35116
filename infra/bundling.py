"""The Lambda bundle, built on this machine without Docker.

`PythonFunction` (alpha) always runs `docker build`; instead we let pip fetch the arm64 / CPython 3.12
wheels of the locked core dependencies (`pip install --target --platform --only-binary=:all:`),
then copy `schemas/` and `functions/` beside them. The dependency tree is cached under a key made of
the lock file, the platform and the pruning rules, so repeated synths and tests never download again.

The lock (`infra/lambda-requirements.txt`, every wheel pinned with its sha256) is regenerated from
pyproject.toml's `[project].dependencies` with `python -m infra.bundling lock`; a synth refuses a lock
that no longer matches those pins.

Size: botocore ships ~27 MB of service models. The bundle keeps only the services the Lambda code
talks to (BOTOCORE_SERVICES; a test checks every `client("...")` in functions/ is in it), which brings
the bundle well under the 30 MB unzipped goal.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCK_FILE = REPO_ROOT / "infra" / "lambda-requirements.txt"
# The sweep controller's bundle: the core dependencies and the `sweeps` extra (Optuna), never the API's.
SWEEPS_LOCK_FILE = REPO_ROOT / "infra" / "sweeps-requirements.txt"
SWEEPS_EXTRAS = ("sweeps",)
PLATFORM = "manylinux2014_aarch64"
PYTHON_VERSION = "3.12"
SOURCE_PACKAGES = ("schemas", "functions")
# Services the Lambda code creates clients for; everything else is pruned from botocore/boto3 data.
BOTOCORE_SERVICES = frozenset(
    {
        "dynamodb",
        "s3",
        "stepfunctions",
        "sagemaker",
        "ec2",
        "logs",
        "events",
        "scheduler",
        "sts",
        "cloudwatch",
        "ssm",
        "lambda",
        "cognito-idp",
    }
)
# Never in a Lambda bundle (docs/DESIGN.md): each is hundreds of MB or seconds of import time.
FORBIDDEN_DISTRIBUTIONS = ("torch", "transformers", "sagemaker", "peft", "accelerate", "trl", "tokenizers", "safetensors", "moto")
SIZE_GOAL_BYTES = 30 * 1024 * 1024
PRUNE_VERSION = "1"  # bump when the pruning rules change: it is part of the cache key
PIP_ATTEMPTS = 3

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")


class BundlingError(RuntimeError):
    """The bundle cannot be built; the message says what to run."""


@dataclass(frozen=True)
class LambdaBundle:
    path: Path
    asset_hash: str
    unzipped_bytes: int
    file_count: int

    def report(self) -> str:
        mb = self.unzipped_bytes / 1024 / 1024
        verdict = "within" if self.unzipped_bytes <= SIZE_GOAL_BYTES else "OVER"
        return f"Lambda asset: {mb:.1f} MB unzipped, {self.file_count} files ({verdict} the 30 MB goal) at {self.path}"


def cache_root() -> Path:
    return Path(os.environ.get("TRAINPLANE_BUNDLE_CACHE") or Path.home() / ".cache" / "trainplane" / "lambda")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(pyproject: Path, extras: tuple[str, ...] = ()) -> list[str]:
    """The core dependencies as written in pyproject.toml, then those of `extras`."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    deps = list(project["dependencies"])
    for extra in extras:
        deps += [d for d in project["optional-dependencies"][extra] if not d.startswith("trainplane[")]
    return [d.strip() for d in deps]


def project_pins(pyproject: Path = REPO_ROOT / "pyproject.toml", extras: tuple[str, ...] = ()) -> dict[str, str]:
    """The core dependencies (and `extras`') of pyproject.toml, name -> pinned version; every one must be pinned."""
    deps = _requirements(pyproject, extras)
    pins: dict[str, str] = {}
    for dep in deps:
        match = _PIN.match(dep.strip())
        if not match:
            raise BundlingError(f"pyproject.toml dependency {dep!r} is not pinned with ==: the Lambda bundle must be reproducible")
        pins[_normalise(match.group(1))] = match.group(3)
    return pins


def lock_pins(lock: Path = LOCK_FILE) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        match = _PIN.match(line.strip())
        if match:
            pins[_normalise(match.group(1))] = match.group(3)
    return pins


def check_lock(lock: Path = LOCK_FILE, pyproject: Path = REPO_ROOT / "pyproject.toml", extras: tuple[str, ...] = ()) -> None:
    if not lock.exists():
        raise BundlingError(f"{lock} is missing: run `python -m infra.bundling lock`")
    locked = lock_pins(lock)
    drift = [
        f"{name}: pyproject {version}, lock {locked.get(name, 'absent')}"
        for name, version in project_pins(pyproject, extras).items()
        if locked.get(name) != version
    ]
    if drift:
        raise BundlingError(f"the Lambda lock does not match pyproject.toml ({'; '.join(drift)}): run `python -m infra.bundling lock`")


def _pip_platform_args() -> list[str]:
    return ["--platform", PLATFORM, "--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp"]


def write_lock(lock: Path = LOCK_FILE, extras: tuple[str, ...] = ()) -> Path:
    """Resolve pyproject's core dependencies (and `extras`') for the Lambda platform and pin every wheel by hash."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        project_pins(extras=extras)  # refuses an unpinned dependency before anything is resolved
        # As written in pyproject, extras included (aws-lambda-powertools[tracer]).
        requirements = _requirements(REPO_ROOT / "pyproject.toml", extras)
        _pip(
            [
                "install",
                "--dry-run",
                "--ignore-installed",
                "--report",
                str(report),
                "--target",
                str(Path(tmp) / "t"),
                *_pip_platform_args(),
                *requirements,
            ]
        )
        installed = json.loads(report.read_text(encoding="utf-8"))["install"]
    lines = [
        "# The Lambda bundle's dependencies for linux/arm64, CPython 3.12: every wheel pinned by hash.",
        "# Generated from pyproject.toml [project].dependencies"
        + (f" and the {', '.join(extras)} extra" if extras else "")
        + " by `python -m infra.bundling lock`; do not edit.",
    ]
    for item in sorted(installed, key=lambda i: _normalise(i["metadata"]["name"])):
        digest = item["download_info"]["archive_info"]["hashes"]["sha256"]
        lines.append(f"{_normalise(item['metadata']['name'])}=={item['metadata']['version']} --hash=sha256:{digest}")
    lock.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lock


def _pip(args: list[str]) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    last = ""
    for attempt in range(1, PIP_ATTEMPTS + 1):
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode == 0:
            return
        last = (result.stderr or result.stdout)[-2000:]
        if attempt < PIP_ATTEMPTS:
            time.sleep(2**attempt)  # a registry hiccup: back off and try again
    raise BundlingError(f"pip failed {PIP_ATTEMPTS} times ({' '.join(command[3:6])} ...): {last}")


def dependencies_key(lock: Path = LOCK_FILE) -> str:
    digest = hashlib.sha256()
    for part in (
        lock.read_bytes(),
        PLATFORM.encode(),
        PYTHON_VERSION.encode(),
        PRUNE_VERSION.encode(),
        ",".join(sorted(BOTOCORE_SERVICES)).encode(),
    ):
        digest.update(part)
        digest.update(b"\0")
    return digest.hexdigest()[:20]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise builds across processes (two pytest sessions, a synth beside a test run)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_dependencies(lock: Path = LOCK_FILE, cache: Path | None = None, extras: tuple[str, ...] = ()) -> Path:
    """The installed, pruned dependency tree for this lock; built once per key, then reused."""
    check_lock(lock, extras=extras)
    root = cache or cache_root()
    target = root / "deps" / dependencies_key(lock)
    # The marker sits beside the tree, not in it: the tree is copied into the Lambda bundle as is.
    marker = target.with_name(target.name + ".complete")
    if marker.exists():
        return target
    with _locked(root / "deps.lock"):
        if marker.exists():
            return target
        staging = Path(tempfile.mkdtemp(prefix="deps-", dir=root))
        try:
            _pip(
                [
                    "install",
                    "--target",
                    str(staging),
                    *_pip_platform_args(),
                    "--no-deps",
                    "--require-hashes",
                    "--no-compile",
                    "-r",
                    str(lock),
                ]
            )
            prune(staging)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)  # then the marker: a reader sees no tree or a whole one
            marker.write_text(json.dumps({"lock": str(lock), "platform": PLATFORM, "python": PYTHON_VERSION}))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def prune(tree: Path) -> None:
    """Drop what the Lambda never loads: unused service models, examples, caches, console scripts."""
    for package in ("botocore", "boto3"):
        data = tree / package / "data"
        if not data.is_dir():
            continue
        for service in data.iterdir():
            if service.is_dir() and service.name not in BOTOCORE_SERVICES:
                shutil.rmtree(service)
    for examples in (tree / "botocore" / "data").glob("*/*/examples-1.json"):
        examples.unlink()
    for cache in list(tree.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(tree / "bin", ignore_errors=True)


def _source_files(root: Path) -> Iterable[Path]:
    for package in SOURCE_PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if (
                path.is_file()
                and "__pycache__" not in path.parts
                and not path.name.endswith((".pyc", ".tmp"))
                and not path.name.startswith(".")
            ):
                yield path


def _tree_size(tree: Path) -> tuple[int, int]:
    size = count = 0
    for path in tree.rglob("*"):
        if path.is_file():
            size += path.stat().st_size
            count += 1
    return size, count


def build_bundle(root: Path = REPO_ROOT, cache: Path | None = None, *, sweeps: bool = False) -> LambdaBundle:
    """dependencies + schemas/ + functions/ in one directory, named by the hash of its content.

    sweeps=True: the sweep controller's bundle, whose dependencies add the `sweeps` extra (Optuna)."""
    cache = cache or cache_root()
    lock, extras = (SWEEPS_LOCK_FILE, SWEEPS_EXTRAS) if sweeps else (LOCK_FILE, ())
    deps = ensure_dependencies(lock, cache=cache, extras=extras)
    digest = hashlib.sha256(deps.name.encode())
    sources = list(_source_files(root))
    for path in sources:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    asset_hash = digest.hexdigest()
    bundles = cache / "bundles"
    target = bundles / asset_hash[:20]
    marker = target.with_name(target.name + ".complete")
    with _locked(cache / "bundles.lock"):
        if not marker.exists():
            staging = Path(tempfile.mkdtemp(prefix="bundle-", dir=cache))
            try:
                # Hard links: the dependency tree is shared by every bundle built from this lock.
                shutil.copytree(deps, staging, dirs_exist_ok=True, copy_function=_link_or_copy)
                for path in sources:
                    destination = staging / path.relative_to(root)
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, destination)
                _check_forbidden(staging)
                bundles.mkdir(parents=True, exist_ok=True)
                if target.exists():
                    shutil.rmtree(target)
                staging.rename(target)
                marker.write_text(asset_hash)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        _drop_old_bundles(bundles, keep=target)
    size, count = _tree_size(target)
    return LambdaBundle(path=target, asset_hash=asset_hash, unzipped_bytes=size, file_count=count)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _check_forbidden(tree: Path) -> None:
    found = sorted({p.name for p in tree.iterdir() if _normalise(p.name.split("-")[0]) in FORBIDDEN_DISTRIBUTIONS})
    if found:
        raise BundlingError(f"the Lambda bundle must not contain {', '.join(found)} (docs/DESIGN.md: no torch, no sagemaker SDK in Lambda)")


def _drop_old_bundles(bundles: Path, keep: Path, spare: int = 3) -> None:
    """Keep the newest few bundles (two worktrees or a running synth may still use them); delete the rest."""
    others = sorted((p for p in bundles.iterdir() if p.is_dir() and p != keep), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[spare:]:
        old.with_name(old.name + ".complete").unlink(missing_ok=True)  # first: a half-deleted tree is never "complete"
        shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.bundling", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["lock", "build"], help="lock: regenerate the lock file; build: build and report the bundle")
    args = parser.parse_args(argv)
    if args.command == "lock":
        print(f"wrote {write_lock().relative_to(REPO_ROOT)}")
        print(f"wrote {write_lock(SWEEPS_LOCK_FILE, SWEEPS_EXTRAS).relative_to(REPO_ROOT)}")
    else:
        print(build_bundle().report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
