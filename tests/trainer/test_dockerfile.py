"""The trainer image, checked without a Docker daemon: the Dockerfile parsed by the official parser
(the `dockerfile` package), its pinned requirements against pyproject and against what the trainer imports."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import dockerfile
import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE = REPO / "trainer_image"
PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([0-9][A-Za-z0-9.+\-]*)$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def commands() -> list[dockerfile.Command]:
    return list(dockerfile.parse_file(str(IMAGE / "Dockerfile")))


@pytest.fixture(scope="module")
def requirements() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in (IMAGE / "requirements.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = PIN.match(line)
        assert match, f"requirements.txt: {line!r} is not pinned exactly (name==version)"
        pins[_norm(match[1])] = match[2]
    return pins


def _pyproject_pins() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = {}
    extras = project["optional-dependencies"]
    for spec in project["dependencies"] + extras["trainer"] + extras["deepspeed"] + extras["gpu"]:  # gpu: bitsandbytes
        name, _, version = spec.partition("==")
        pins[_norm(name.split("[")[0])] = version
    return pins


def test_the_base_is_a_cuda_pytorch_image_chosen_by_build_arg(commands) -> None:
    args = {c.value[0].split("=", 1)[0]: c.value[0].split("=", 1)[1] for c in commands if c.cmd == "ARG" and "=" in c.value[0]}
    froms = [c for c in commands if c.cmd == "FROM"]
    assert len(froms) == 1 and froms[0].value[0] == "${BASE_IMAGE}"
    assert commands.index(froms[0]) > 0 and commands[0].cmd == "ARG"  # ARG before FROM: usable in FROM
    assert args["BASE_IMAGE"].startswith("pytorch/pytorch:") and "cuda" in args["BASE_IMAGE"]
    # the build refuses a base whose torch is not the pinned one
    assert args["TORCH_VERSION"] == _pyproject_pins()["torch"]
    assert any(c.cmd == "RUN" and "TORCH_VERSION" in c.value[0] for c in commands)


def test_the_entrypoint_is_the_same_entry_point_as_outside_the_image(commands) -> None:
    entrypoints = [c for c in commands if c.cmd == "ENTRYPOINT"]
    assert len(entrypoints) == 1 and entrypoints[0].json, "ENTRYPOINT must be exec form (SIGTERM reaches python, not a shell)"
    assert list(entrypoints[0].value) == ["python", "-m", "trainer"]
    assert (IMAGE / "trainer" / "__main__.py").exists()
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["trainplane-trainer"] == "trainer.__main__:main"


def test_copies_the_schemas_the_trainer_and_the_requirements(commands) -> None:
    copies = {c.value[0]: c.value[1] for c in commands if c.cmd == "COPY"}
    assert copies == {
        "trainer_image/requirements.txt": "/opt/trainplane/requirements.txt",
        "schemas/": "/opt/trainplane/schemas/",
        "trainer_image/trainer/": "/opt/trainplane/trainer/",
    }
    for source in copies:
        assert (REPO / source).exists(), source
    env = next(c for c in commands if c.cmd == "ENV").value
    assert dict(zip(env[::2], env[1::2], strict=True))["PYTHONPATH"] == "/opt/trainplane"
    run_install = [c.value[0] for c in commands if c.cmd == "RUN" and "pip install" in c.value[0]]
    assert run_install == ["DS_BUILD_OPS=0 python -m pip install --no-build-isolation -r /opt/trainplane/requirements.txt"]


def test_requirements_are_pinned_and_agree_with_pyproject(requirements: dict[str, str]) -> None:
    assert "torch" not in requirements, "torch comes from the CUDA base image"
    pyproject = _pyproject_pins()
    shared = set(requirements) & set(pyproject)
    assert {"transformers", "peft", "accelerate", "safetensors", "tokenizers", "numpy", "pydantic", "boto3", "deepspeed"} <= shared
    assert {name: requirements[name] for name in shared} == {name: pyproject[name] for name in shared}


def test_every_package_the_trainer_imports_is_in_the_image(requirements: dict[str, str]) -> None:
    # Given every top-level import of the trainer package and of schemas/
    imported: set[str] = set()
    for folder in (IMAGE / "trainer", REPO / "schemas"):
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    imported |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    imported.add(node.module.split(".")[0])
    # Then each third-party one is provided by requirements.txt or by the base image (torch)
    third_party = imported - set(sys.stdlib_module_names) - {"trainer", "schemas", "__future__"}
    distributions = packages_distributions()
    missing = []
    for module in sorted(third_party):
        names = {_norm(d) for d in distributions.get(module, [module])}
        if not names & (set(requirements) | {"torch"}):
            missing.append(f"{module} ({', '.join(sorted(names))})")
    assert not missing, f"imported by the trainer but not installed in the image: {missing}"
