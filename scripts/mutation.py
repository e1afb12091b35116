"""`make mutation`: mutmut over the modules that guard data, one module at a time, each with only its tests.

For each module below, a scratch folder (.mutation/<name>/, ignored by git) gets links to the packages and
tests and a pyproject.toml with a [tool.mutmut] block that mutates that one file (only the guard functions
listed, where the whole module is too slow for the shared 2-core machine) and collects which of the
module's fast tests reach each function; mutmut then runs every mutant against only the tests that reach
it, MUTATION_CHILDREN mutants at a time (mutmut's --max-children; default: the machine's CPU count). The run
prints killed / survived / timeout per module, the score over the mutants that are not listed as equivalent
in docs/TESTING.md, and each survivor's diff.

    python scripts/mutation.py                # every module
    python scripts/mutation.py sigv4 paths    # some of them (or MUTATION_MODULES="sigv4 paths")
    MUTATION_CHILDREN=1 python scripts/mutation.py sigv4   # one mutant at a time (a shared machine)
    MUTATION_BUDGET_S=1800 python scripts/mutation.py   # stop starting modules after 30 minutes
    MUTATION_REPORT_ONLY=1 python scripts/mutation.py sigv4   # the last run's figures again, without running
    MUTATION_ONLY=mutmut_1 python scripts/mutation.py sweeps   # a smoke run: only mutant 1 of each function
    MUTATION_ONLY='*ǁupdate__mutmut_8' python scripts/mutation.py sweeps   # only the mutants named

Exit status 1 when a module scores under 90% (equivalents left out), or a survivor is neither killed nor
listed as equivalent; 2 when the budget ran out before every module ran.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / ".mutation"
PYTHON = sys.executable
GOAL = 0.90
# Top-level import name -> where it lives in the repository (the trainer is imported as `trainer`).
PACKAGES = {
    "schemas": "schemas",
    "functions": "functions",
    "localmode": "localmode",
    "trainplane": "trainplane",
    "trainer": "trainer_image/trainer",
}
# What the tests read besides the packages (linked, not mutated).
ALSO = ["tests", "examples", "dashboard_assets", "docs"]


@dataclass(frozen=True)
class Module:
    name: str
    path: str  # as imported: trainer/storage.py for trainer_image/trainer/storage.py
    tests: tuple[str, ...]
    functions: tuple[str, ...] = ()  # mutant-name globs after the module ("x_enforce*", "xǁClassǁmethod*"); () = all
    # mutmut's process_isolation: "fork" forks each mutant's worker from the process that ran the tests;
    # "forkserver" from a clean server, for tests that leave that process unsafe to fork (torch's threads).
    isolation: str = "fork"
    notes: list[str] = field(default_factory=list)


MODULES = [
    Module(
        "paths",
        "functions/service/paths.py",
        # The unit tests pin each decision on fakes; the API matrix (tests/integration/test_path_confinement.py,
        # ~200 cases on moto that reach every guard) stays in `make test`: per mutant it took minutes here.
        ("tests/unit/test_path_rules.py", "tests/unit/test_paths.py"),
        # The confinement decisions (what may be read and written, the claims, the id rule), not the walk of
        # a submission's fields; the whole module is ~700 mutants, hours on the shared machine.
        (
            *(f"*ǁ{m}__*" for m in ("check_read", "check_output", "_check_s3_read", "_check_s3_write", "_check_s3_claim", "_owned_job")),
            *(f"*ǁ{m}__*" for m in ("_check_local", "_check_local_one", "_check_local_claim", "_check_s3_write_area")),
            "x__key_under__*",
            "x_valid_checkpoint_id__*",
            "x_data_prefix__*",
        ),
    ),
    Module(
        "access",
        "trainer/access.py",
        ("tests/trainer/test_access.py", "tests/trainer/test_access_rules.py"),
        # The trainer's check before it reads or writes (not spec_paths' listing of the spec's fields).
        ("x_enforce__*", "x__check_tree__*", "x_own_prefix__*", "x_claim_export__*", "x__marker_owner__*"),
        # Forked from the process that ran the trainer's tests, every worker hung on a lock (a futex, 0% CPU:
        # mutmut's CPU-time limit never fires); workers forked from a clean server do not.
        isolation="forkserver",
    ),
    Module(
        "dynamodb",
        "functions/adapters/dynamodb.py",
        (
            "tests/integration/test_guarded_writes.py",
            "tests/integration/test_dynamodb_repository.py",
            "tests/unit/test_dynamodb_items.py",
            "tests/integration/test_dynamodb_requests.py",
        ),
        # The conditional writes: creation with its name claim, transitions, updates, progress, checkpoints, delete.
        (
            *(f"*ǁ{m}__*" for m in ("create", "transition", "update", "record_progress", "add_checkpoint", "delete", "_transact")),
            "*ǁ_update_existing__*",
            "x__claim_put__*",
        ),
    ),
    Module(
        "sweeps",
        "functions/adapters/sweeps.py",
        (
            "tests/integration/test_sweeps_repository.py",
            "tests/integration/test_sweeps_guards.py",
            "tests/integration/test_sweeps_controller.py",
            "tests/integration/test_sweeps_mutants_requests.py",
        ),
        # The conditional writes: a sweep's create/update/delete, a trial's claim, update, end and value.
        tuple(f"*ǁ{m}__*" for m in ("create", "update", "delete", "claim_trial", "update_trial", "end_trial", "record_value")),
    ),
    Module(
        "dynamodb_batch",
        "functions/adapters/dynamodb_batch.py",
        ("tests/unit/test_dynamodb_batch.py",),
        # The deletes of a job's history and a sweep's partition: batches of 25, unprocessed items sent again.
    ),
    Module(
        "sweeps_hooks",
        "functions/service/sweeps/hooks.py",
        ("tests/unit/test_sweeps_hooks.py", "tests/integration/test_sweeps_guards.py", "tests/integration/test_sweeps_controller.py"),
    ),
    Module(
        "storage",
        "trainer/storage.py",
        ("tests/trainer/test_storage.py",),
    ),
    Module(
        "checkpoint",
        "schemas/checkpoint.py",
        ("tests/unit/test_checkpoint_retention.py", "tests/trainer/test_retention_agrees.py"),
    ),
    Module(
        "sigv4",
        "localmode/sigv4.py",
        ("tests/unit/test_sigv4.py", "tests/unit/test_sigv4_details.py", "tests/unit/test_sigv4_frontdoor.py"),
    ),
    Module(
        "frontdoor",
        "localmode/frontdoor.py",
        ("tests/unit/test_sigv4_frontdoor.py", "tests/unit/test_frontdoor_handle.py"),
        # Its use of SigV4: handle() (pages first, verify, the handler's event and context, the refusal and
        # 502 answers). The event's shape (build_event) and the response mapping are not guards: not scored.
        ("*ǁFrontDoorǁhandle__*",),
    ),
    Module(
        "fair_share",
        "functions/service/fair_share.py",
        (
            "tests/unit/test_fair_share.py",
            "tests/unit/test_fair_share_exact.py",
            "tests/unit/test_fair_sharing_rules.py",
            "tests/unit/test_scheduler_reclaim.py",
            "tests/unit/test_scheduler_teams.py",
        ),
        # The scheduler's pure rules, whole: the cohort's quotas, borrowing and refusals (admission), the
        # admission order, and the reclaim victims (work lost, Kueue's reclaim and fair-sharing rules).
    ),
    Module(
        "scheduler",
        "functions/service/scheduler.py",
        (
            "tests/unit/test_scheduler_teams.py",
            "tests/unit/test_scheduler_reclaim.py",
            "tests/unit/test_scheduler_fair_pass.py",
            "tests/unit/test_team_hold_race.py",
        ),
        # The scheduler's use of those rules: the fair-share pass (admission under the teams' holds) and the
        # reclaim (which holders may be paused, how many units are needed, the reclaim's record).
        tuple(f"*ǁSchedulerǁ{m}__*" for m in ("_cohort", "_serve_pool_fairly", "_reclaim")),
    ),
    Module(
        "trainer_reports",
        "functions/service/trainer_reports.py",
        ("tests/unit/test_trainer_reports.py", "tests/unit/test_trainer_reports_outcome.py"),
    ),
]

STATUSES = ("killed", "survived", "timeout", "no tests", "suspicious", "segfault", "skipped", "not checked", "caught by type check")


def equivalents() -> dict[str, str]:
    """Mutants listed in docs/TESTING.md's table of equivalent mutants: name -> reason."""
    text = (ROOT / "docs" / "TESTING.md").read_text()
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `([\w.ǁ]+__mutmut_\d+)` \| (.+?) \|$", text, re.M)}


def prepare(module: Module) -> Path:
    work = SCRATCH / module.name
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    for name, where in PACKAGES.items():
        (work / name).symlink_to(ROOT / where, target_is_directory=True)
    for name in ALSO:
        if (ROOT / name).exists():
            (work / name).symlink_to(ROOT / name, target_is_directory=True)
    tests = [t for t in module.tests if (ROOT / t).exists()]
    block = "\n".join(
        [
            "",
            "[tool.mutmut]",
            f"source_paths = {list(PACKAGES)!r}",
            f"only_mutate = [{module.path!r}]",
            f"pytest_add_cli_args_test_selection = {tests!r}",
            'pytest_add_cli_args = ["--no-cov", "-p", "no:cacheprovider", "-q", "-x", "-m", "not gpu", "--durations=0"]',
            "use_git_change_detection = false",
            f"process_isolation = {module.isolation!r}",
            # Log lines and the text of a raised error are not mutated: the guard is the condition that leads
            # to the raise (its wording is the API tests' business, each message's fragment checked there).
            'do_not_mutate_patterns = ["^\\\\s*(logger|logging|log)\\\\.\\\\w+\\\\(", "^\\\\s*raise \\\\w"]',
            "",
        ]
    )
    # Not the repository's pytest addopts (coverage, durations): each mutant runs as lean as it can.
    pyproject = (ROOT / "pyproject.toml").read_text()
    pyproject = re.sub(r'^addopts = ".*"$', 'addopts = "--strict-markers"', pyproject, flags=re.M)
    (work / "pyproject.toml").write_text(pyproject + block)
    return work


def mutmut(work: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([PYTHON, "-m", "mutmut", *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout, check=False)


# Every survivor's diff in one process (`mutmut show` is one process per mutant).
_SHOW = """
import sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
path = sys.argv[1]
for name in sys.argv[2:]:
    print("@@@ " + name)
    print(get_diff_for_mutant(name, path=path))
"""


def diffs(work: Path, path: str, names: list[str]) -> dict[str, str]:
    if not names:
        return {}
    shown = subprocess.run([PYTHON, "-c", _SHOW, path, *names], cwd=work, capture_output=True, text=True, check=False).stdout
    out: dict[str, str] = {}
    for block in shown.split("@@@ ")[1:]:
        name, _, diff = block.partition("\n")
        out[name.strip()] = diff.strip()
    return out


def children() -> int:
    """MUTATION_CHILDREN: how many mutants mutmut runs at once (default: the machine's CPU count)."""
    raw = os.environ.get("MUTATION_CHILDREN", "").strip()
    count = int(raw) if raw else (os.cpu_count() or 1)
    if count < 1:
        raise SystemExit(f"MUTATION_CHILDREN must be at least 1, not {raw!r}")
    return count


def mutant_patterns(module: Module, only: str = "") -> list[str]:
    """The mutant-name globs of a module's selection. `only` (MUTATION_ONLY, space-separated) narrows it for a
    smoke run of the whole pipeline on a few mutants: `mutmut_1` takes mutant 1 of each selected function;
    a glob after the module (`*ǁupdate__mutmut_8`) takes the mutants it names."""
    dotted = module.path[:-3].replace("/", ".")
    patterns = [f"{dotted}.{f}" for f in module.functions] or [f"{dotted}.*"]
    suffixes = [o for o in only.split() if o.startswith("mutmut_")]
    named = [f"{dotted}.{o}" for o in only.split() if not o.startswith("mutmut_")]
    if suffixes:
        narrowed = [p[:-1] + o if p.endswith("__*") else f"{p}__{o}" for p in patterns for o in suffixes]
        return narrowed + named
    return named or patterns


def run_module(module: Module, known: dict[str, str], budget_left: float, *, report_only: bool = False) -> tuple[bool, str]:
    work = SCRATCH / module.name if report_only else prepare(module)
    dotted = module.path[:-3].replace("/", ".")
    patterns = mutant_patterns(module, os.environ.get("MUTATION_ONLY", "").strip())
    started = time.monotonic()
    if not report_only:
        try:
            ran = mutmut(work, "run", "--max-children", str(children()), *patterns, timeout=budget_left)
        except subprocess.TimeoutExpired:
            return False, f"{module.name}: the time budget ran out during its run"
        if ran.returncode != 0:
            tail = (ran.stdout + ran.stderr)[-3000:]
            return False, f"{module.name}: mutmut failed (exit {ran.returncode})\n{tail}"
    listing = mutmut(work, "results", "--all", "true").stdout
    by_status: dict[str, list[str]] = {}
    for line in listing.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if not name.startswith(dotted + "."):
            continue
        if module.functions and not any(Path(name).match(p) or re.fullmatch(_glob(p), name) for p in patterns):
            continue
        by_status.setdefault(status, []).append(name)
    survived = by_status.get("survived", []) + by_status.get("no tests", [])
    equivalent = [n for n in survived if n in known]
    open_ = [n for n in survived if n not in known]
    killed = len(by_status.get("killed", [])) + len(by_status.get("caught by type check", []))
    timeout = len(by_status.get("timeout", []))
    total = sum(len(v) for v in by_status.values())
    counted = total - len(equivalent)
    score = (killed + timeout) / counted if counted else 1.0
    line = (
        f"{module.name:16} {module.path:38} mutants {total:4}  killed {killed:4}  survived {len(survived):3} "
        f"(equivalent {len(equivalent)}, open {len(open_)})  timeout {timeout:3}  "
        f"other {total - killed - timeout - len(survived):3}  score {score:6.1%}  {time.monotonic() - started:5.0f} s"
    )
    detail = [line]
    shown = diffs(work, module.path, open_)
    for name in open_:
        detail.append(f"  SURVIVED {name}\n" + "\n".join("    " + s for s in shown.get(name, "").splitlines()[2:]))
    other = [n for s, names in by_status.items() if s not in ("killed", "survived", "timeout", "no tests", "not checked") for n in names]
    for name in other:
        detail.append(f"  OTHER {name}")
    if by_status.get("not checked"):
        detail.append(f"  not checked: {len(by_status['not checked'])} (MUTATION_ONLY, or a run cut short)")
    ok = score >= GOAL and not open_
    return ok, "\n".join(detail)


def _glob(pattern: str) -> str:
    return ".*".join(re.escape(part) for part in pattern.split("*"))


def main(argv: list[str]) -> int:
    argv = argv or os.environ.get("MUTATION_MODULES", "").replace(",", " ").split()
    by_name = {m.name: m for m in MODULES}
    chosen = [by_name[n] for n in argv if n in by_name] if argv else MODULES
    unknown = set(argv) - {m.name for m in MODULES}
    if unknown:
        print(f"unknown module(s): {', '.join(sorted(unknown))}; known: {', '.join(m.name for m in MODULES)}")
        return 2
    budget = float(os.environ.get("MUTATION_BUDGET_S", "5400"))
    deadline = time.monotonic() + budget
    known = equivalents()
    results: list[tuple[bool, str]] = []
    for module in chosen:
        left = deadline - time.monotonic()
        if left <= 0:
            results.append((False, f"{module.name}: not run, the time budget ({budget:.0f} s) is spent"))
            continue
        print(f"--- {module.name}: {module.path}, tests {' '.join(module.tests)}", flush=True)
        ok, text = run_module(module, known, left, report_only=os.environ.get("MUTATION_REPORT_ONLY") == "1")
        print(text, flush=True)
        results.append((ok, text))
    print("\n=== mutation scores (goal >= 90% of non-equivalent mutants killed) ===")
    for ok, text in results:
        print(("ok   " if ok else "FAIL ") + text.splitlines()[0])
    if any("budget" in text.splitlines()[0] for _, text in results):
        return 2
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
