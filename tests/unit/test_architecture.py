"""The habits that keep the house so: import rules, the client without the server, citations that resolve.

The import rules are pyproject.toml's [tool.importlinter] contracts (docs/ARCHITECTURE.md): a back arrow
between rooms or layers, a forbidden import, or a circle between sibling modules fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["schemas", "functions", "infra", "localmode", "trainplane", "trainer_image/trainer", "scripts", "examples"]


def _env() -> dict[str, str]:
    paths = [str(ROOT), str(ROOT / "trainer_image")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])}


def test_the_import_contracts_hold() -> None:
    # Given the contracts in pyproject.toml / When import-linter checks the whole house
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    # Then every contract is kept (the output names the broken one and the import that breaks it)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    contracts = len(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"])
    assert "BROKEN" not in result.stdout and f"Contracts: {contracts} kept, 0 broken." in result.stdout


def test_the_client_imports_and_runs_without_local_mode_or_moto(tmp_path: Path) -> None:
    # Given an interpreter where moto cannot be imported (`pip install trainplane[client]`)
    code = (
        "import sys; sys.modules['moto'] = None\n"
        "import trainplane, trainplane.cli, trainplane.client\n"
        "from trainplane import Client\n"
        "loaded = {m for m, module in sys.modules.items() if module is not None}\n"
        "print(sorted(m for m in loaded if m.split('.')[0] in {'moto', 'localmode', 'functions', 'infra', 'trainer'}), flush=True)\n"
        "sys.argv = ['trainplane', 'up', '--port', '0', '--state-dir', sys.argv[1]]\n"
        "trainplane.cli.main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    # Then nothing of the server was loaded, and `up` says how to get local mode instead of crashing
    assert out.stdout.splitlines() == ["[]"], out.stdout + out.stderr
    assert out.returncode == 1 and "pip install 'trainplane[local]'" in out.stderr, out.stderr


def _cited(pattern: str, sources: list[str] = SOURCES) -> set[tuple[str, str]]:
    found = set()
    for source in sources:
        for path in (ROOT / source).rglob("*.py"):
            for match in re.finditer(pattern, path.read_text(encoding="utf-8")):
                found.add((str(path.relative_to(ROOT)), match.group(1)))
    return found


@pytest.mark.parametrize("kind", ["tests", "docs"])
def test_every_test_and_document_the_code_cites_is_in_the_repo(kind: str) -> None:
    pattern = r"\b(tests/[\w/]+\.py)\b" if kind == "tests" else r"\b(docs/[\w/]+\.md|docs/seeds/\d{3}_\*\.txt)"
    cited = _cited(pattern)
    assert cited, f"no {kind} citations found: the pattern is wrong"
    missing = sorted((where, what) for where, what in cited if not list(ROOT.glob(what)))
    assert not missing, f"cited but not in the repo: {missing}"
    if kind == "tests":
        # The bare test names the moto modules cite resolve too
        bare = _cited(r"\b(test_\w+\.py)\b")
        assert not [(w, t) for w, t in bare if not list((ROOT / "tests").rglob(t))]


def test_every_seed_the_code_cites_is_in_docs_seeds() -> None:
    # Given every seed document cited by number ("seeds/004", "docs/seeds/000_*.txt"), in the code and the tests
    cited = {(w, n) for w, n in _cited(r"\bseeds/(\d{3})\b") | _cited(r"\bseeds/(\d{3})\b", sources=["tests"])}
    assert len({n for _, n in cited}) >= 4, f"too few seed citations found: the pattern is wrong ({sorted(cited)})"
    # Then each resolves to one document under docs/seeds/ (a bare "seeds/NNN" included)
    missing = sorted((where, n) for where, n in cited if len(list((ROOT / "docs" / "seeds").glob(f"{n}_*.txt"))) != 1)
    assert not missing, f"cited but not in docs/seeds/: {missing}"
