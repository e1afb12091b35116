"""framework CUSTOM: the user's script runs with the same contract, and its exit code is the run's."""

from __future__ import annotations

import json
import signal
import textwrap
import time
from pathlib import Path

import pytest

from schemas.trainer import ExitCode, TrainerEvent, TrainerEventKind
from tests.trainer.runs import make_spec, run_in_process, start_subprocess

SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys, time
    spec = json.load(open(os.environ["TRAINPLANE_RUN_SPEC"]))
    out = os.path.join(os.environ["SM_MODEL_DIR"], "seen.json")
    os.makedirs(os.environ["SM_MODEL_DIR"], exist_ok=True)
    json.dump({"argv": sys.argv[1:], "job_id": spec["job_id"], "token": spec["output_config"]["hub_token"]}, open(out, "w"))
    if "--own_group" in sys.argv:
        os.setpgid(0, 0)  # out of the trainer's process group: a signal sent to that group misses it
    if "--wait_for_sigterm" in sys.argv:
        signal.signal(signal.SIGTERM, lambda *a: (open(out + ".stopped", "w").write("yes"), sys.exit(75)))
        print("ready", flush=True)
        time.sleep(float(sys.argv[sys.argv.index("--wait_for_sigterm") + 1]))
    sys.exit(int(sys.argv[sys.argv.index("--exit_code") + 1]))
    """
)


def _custom_spec(root: Path, hyperparameters: dict[str, str]) -> dict:
    script = root / "user" / "train.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(SCRIPT)
    return make_spec(
        root,
        hyperparameters=hyperparameters,
        framework={"type": "CUSTOM", "custom_script_path": str(script)},
        output_config={"hub_token": "hf_for_the_script"},
    )


def test_a_custom_script_gets_the_contract_and_its_exit_code_is_the_runs(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a CUSTOM job whose script exits 3 (hyperparameters are the script's own: not checked by us)
    spec = _custom_spec(tmp_path, {"exit_code": "3", "my_own_knob": "x"})

    # When the trainer runs it
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)

    # Then the script saw the run spec (secrets included) and its hyperparameters as arguments
    seen = json.loads((tmp_path / "model" / "seen.json").read_text())
    assert seen == {"argv": ["--exit_code", "3", "--my_own_knob", "x"], "job_id": "job-1", "token": "hf_for_the_script"}
    # and the run ends with the script's exit code
    assert outcome.code == 3 and outcome.done.data["exit_code"] == 3


def test_a_missing_custom_script_is_a_user_error(tmp_path: Path, monkeypatch, capsys) -> None:
    spec = make_spec(tmp_path, framework={"type": "CUSTOM", "custom_script_path": str(tmp_path / "nope.py")})
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)
    assert outcome.code == ExitCode.USER_ERROR
    assert outcome.failure_text().startswith("UserError: framework.custom_script_path not found")


def test_sigterm_is_forwarded_to_the_custom_script(tmp_path: Path) -> None:
    # Given a CUSTOM script that checkpoints on SIGTERM and exits 75
    proc = start_subprocess(tmp_path, _custom_spec(tmp_path, {"wait_for_sigterm": "120", "exit_code": "0"}))
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        for line in proc.stdout:
            if line.strip() == "ready":
                break
            assert time.monotonic() < deadline
        # When the trainer gets SIGTERM
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()

    # Then the script got it, and its "stopped with checkpoint" is the run's
    assert proc.returncode == ExitCode.STOPPED_WITH_CHECKPOINT, err
    assert (tmp_path / "model" / "seen.json.stopped").read_text() == "yes"
    done = [e for line in out.splitlines() if (e := TrainerEvent.from_line(line)) and e.kind == TrainerEventKind.DONE]
    assert done[-1].data["stopped"] is True


@pytest.mark.parametrize("own_group", [False, True])
def test_a_stop_the_launcher_sent_to_the_whole_process_group_is_forwarded_only_where_it_missed(tmp_path: Path, own_group: bool) -> None:
    # Given a CUSTOM script that listens 3 s for SIGTERM, under a launcher whose stops signal the trainer's
    # whole process group (the LocalLauncher: TRAINPLANE_STOP_SIGNALS_GROUP); the script in that group, or in its own
    hyperparameters = {"wait_for_sigterm": "3", "exit_code": "0"} | ({"own_group": "1"} if own_group else {})
    proc = start_subprocess(tmp_path, _custom_spec(tmp_path, hyperparameters), extra_env={"TRAINPLANE_STOP_SIGNALS_GROUP": "1"})
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "ready":
                break
        # When the trainer gets a SIGTERM (here: the trainer alone, so that only a forward can reach the script)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # Then a script in the group got no forward: it has the group's SIGTERM, and a second one would run its
    # handler again inside the first (two reports on one line, one checkpoint saved twice at once);
    # a script that left the group missed the group's signal, so it gets the forward and stops with a checkpoint
    assert (tmp_path / "model" / "seen.json.stopped").exists() is own_group, err
    assert proc.returncode == (ExitCode.STOPPED_WITH_CHECKPOINT if own_group else 0)


def test_an_ome_command_and_args_run_as_given(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a CUSTOM job written as OME's trainer: command ["python", "<script>"] and args
    script = tmp_path / "user" / "train.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(SCRIPT)
    framework = {"type": "CUSTOM", "command": ["python", str(script)], "args": ["--model", "llama-7b", "--exit_code", "0"]}
    spec = make_spec(tmp_path, hyperparameters={"max_steps": "3"}, framework=framework, output_config={"hub_token": "t"})
    # When the trainer runs it
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)
    # Then the command got exactly its args (not the hyperparameters), and the run spec
    seen = json.loads((tmp_path / "model" / "seen.json").read_text())
    assert seen["argv"] == ["--model", "llama-7b", "--exit_code", "0"] and seen["job_id"] == "job-1"
    assert outcome.code == 0


def test_a_command_that_cannot_start_is_a_user_error(tmp_path: Path, monkeypatch, capsys) -> None:
    spec = make_spec(tmp_path, framework={"type": "CUSTOM", "command": [str(tmp_path / "no-such-binary")]})
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)
    assert outcome.code == ExitCode.USER_ERROR
    assert "framework.command cannot be run" in outcome.failure_text()
