"""Failing fast and failing clearly: /opt/ml/output/failure, the FAILURE and DONE events, the exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from trainer import loop
from trainer.failures import DataError, OutOfMemory, UserError, classify, is_out_of_memory, write_failure

from schemas.trainer import ExitCode, FailureReason, TrainerEventKind
from tests.trainer.runs import make_spec, run_in_process


def _missing_data(spec: dict, root: Path) -> dict:
    """Point the job at data that does not exist: a failure about anything else proves the data was never read."""
    spec["data_config"]["sources"] = [{"path": str(root / "nowhere" / "train.jsonl")}]
    return spec


def _assert_failed(outcome, code: ExitCode, reason: FailureReason, *needles: str) -> None:
    assert outcome.code == code, outcome.stdout[-2000:]
    text = outcome.failure_text()
    assert text.startswith(f"{reason.value}: ")
    for needle in needles:
        assert needle in text
    failures = outcome.of_kind(TrainerEventKind.FAILURE)
    assert len(failures) == 1 and failures[0].data["reason"] == reason.value
    assert outcome.done.data["exit_code"] == code and outcome.done.data["stopped"] is False


@pytest.mark.parametrize(
    ("hyperparameters", "needles"),
    [
        # The run spec's own check (schemas/hyperparameters.py, which submit applies too) names the key
        ({"learning_rat": "1e-3"}, ["training_config.hyperparameters.learning_rat: unknown hyperparameter"]),
        ({"max_steps": "ten"}, ["max_steps", "integer"]),
        ({"lr_scheduler_type": "exponential"}, ["lr_scheduler_type"]),
        ({"packing": "maybe"}, ["packing", "true or false"]),
    ],
)
def test_bad_hyperparameters_fail_before_any_work(hyperparameters, needles, tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a job with a bad hyperparameter (and data that does not exist)
    spec = _missing_data(make_spec(tmp_path, hyperparameters=hyperparameters), tmp_path)

    # When the trainer starts
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)

    # Then it fails as a user error naming the key, before it looked at the data
    _assert_failed(outcome, ExitCode.USER_ERROR, FailureReason.USER_ERROR, *needles)
    assert not outcome.of_kind(TrainerEventKind.PROGRESS)


def test_qlora_is_refused_on_a_cpu_host_before_any_work(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a QLoRA job on this CPU-only host (its data does not even exist)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = _missing_data(make_spec(tmp_path, "QLORA", resource_config={"gpu_count": 1}), tmp_path)

    # When the trainer starts
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)

    # Then it is refused with the reason, and nothing was loaded
    _assert_failed(outcome, ExitCode.USER_ERROR, FailureReason.USER_ERROR, "QLORA needs a CUDA GPU")
    assert not (tmp_path / "checkpoints").exists()


def test_bad_data_fails_with_the_file_and_line(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a data file whose third line is not JSON
    data = tmp_path / "data" / "train.jsonl"
    data.parent.mkdir(parents=True)
    data.write_text('{"text": "one"}\n{"text": "two"}\n{"text": oops\n')
    spec = make_spec(tmp_path)

    # When the trainer runs
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)

    # Then it is a data error (exit 65) naming the file and the line
    _assert_failed(outcome, ExitCode.DATA_ERROR, FailureReason.DATA_ERROR, str(data), ":3")


def test_a_qlora_deepspeed_job_is_refused_with_a_clear_message(tmp_path: Path, monkeypatch, capsys) -> None:
    spec = _missing_data(make_spec(tmp_path, "QLORA", framework={"type": "DEEPSPEED", "distributed": {"world_size": 2}}), tmp_path)
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)
    _assert_failed(outcome, ExitCode.USER_ERROR, FailureReason.USER_ERROR, "QLORA with DEEPSPEED", "use HF_TRAINER")


def test_a_missing_run_spec_is_a_user_error(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("TRAINPLANE_RUN_SPEC", raising=False)
    outcome = run_in_process(tmp_path, None, monkeypatch, capsys)
    _assert_failed(outcome, ExitCode.USER_ERROR, FailureReason.USER_ERROR, "no run spec", "TRAINPLANE_RUN_SPEC")


def test_an_invalid_run_spec_names_the_field(tmp_path: Path, monkeypatch, capsys) -> None:
    spec = make_spec(tmp_path)
    spec["data_config"]["batch_size"] = 0
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)
    _assert_failed(outcome, ExitCode.USER_ERROR, FailureReason.USER_ERROR, "data_config.batch_size")


def test_out_of_memory_during_training_is_classified(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a step that runs out of accelerator memory
    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(loop, "loss_sum", oom)

    # When the trainer runs
    outcome = run_in_process(tmp_path, make_spec(tmp_path), monkeypatch, capsys)

    # Then the failure says OutOfMemory (a retry with other resources may help) and exits 71
    _assert_failed(outcome, ExitCode.OUT_OF_MEMORY, FailureReason.OUT_OF_MEMORY, "Tried to allocate")


def test_an_unexpected_error_is_an_internal_error(tmp_path: Path, monkeypatch, capsys) -> None:
    def boom(*args, **kwargs):
        raise ValueError("something nobody expected")

    monkeypatch.setattr(loop, "loss_sum", boom)
    outcome = run_in_process(tmp_path, make_spec(tmp_path), monkeypatch, capsys)
    _assert_failed(outcome, ExitCode.INTERNAL_ERROR, FailureReason.INTERNAL, "ValueError: something nobody expected")


@pytest.mark.parametrize(
    ("exc", "reason", "code"),
    [
        (UserError("bad option"), FailureReason.USER_ERROR, ExitCode.USER_ERROR),
        (DataError("/data/a.jsonl", 7, "missing column 'text'"), FailureReason.DATA_ERROR, ExitCode.DATA_ERROR),
        (DataError("/data/empty.jsonl", 0, "empty file"), FailureReason.DATA_ERROR, ExitCode.DATA_ERROR),
        (OutOfMemory("too big"), FailureReason.OUT_OF_MEMORY, ExitCode.OUT_OF_MEMORY),
        (MemoryError(), FailureReason.OUT_OF_MEMORY, ExitCode.OUT_OF_MEMORY),
        (
            RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"),
            FailureReason.OUT_OF_MEMORY,
            ExitCode.OUT_OF_MEMORY,
        ),
        (KeyError("x"), FailureReason.INTERNAL, ExitCode.INTERNAL_ERROR),
    ],
)
def test_classification(exc: BaseException, reason: FailureReason, code: ExitCode) -> None:
    classified = classify(exc)
    assert (classified.reason, classified.exit_code) == (reason, code)
    assert classified.failure_text().startswith(f"{reason.value}: ")


def test_data_error_text_names_file_and_line() -> None:
    assert str(DataError("/data/a.jsonl", 7, "missing column 'text'")) == "/data/a.jsonl:7: missing column 'text'"
    assert str(DataError("/data/empty.jsonl", 0, "empty file")) == "/data/empty.jsonl: empty file"
    assert is_out_of_memory(torch.OutOfMemoryError("x"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))


def test_failure_file_is_written_whole_and_capped(tmp_path: Path) -> None:
    # SageMaker keeps 1024 characters of FailureReason
    target = write_failure(tmp_path / "out" / "failure", classify(UserError("x" * 5000)))
    text = target.read_text()
    assert text.startswith("UserError: xxx") and len(text.rstrip("\n")) == 1024
    assert not list((tmp_path / "out").glob("*.tmp"))
    assert json.dumps(text)  # plain text, one line
