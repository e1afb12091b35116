"""RLHF (GRPO on trl, trainer/rlhf.py) under the trainer's contract: the mean reward of a toy reward rises;
SIGTERM leaves a checkpoint and exit 75, and the resumed run matches an uninterrupted one step by step and
continues its one MLflow run / TensorBoard curve;
a reward model directory works as the reward; the reward script's failures are the user's errors."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from trainer import tracking
from trainer.events import Events
from trainer.tokenizer import ByteTokenizer
from trainer.tracking import sink as tracking_sink

from schemas.trainer import ExitCode, FailureReason, TrainerEventKind
from tests.trainer.conftest import TINY_LLAMA, write_jsonl
from tests.trainer.runs import make_spec, metrics_points, run_in_process
from tests.trainer.test_tracking import _history, _runs, _tensorboard

# A dense toy reward a random byte-level model can learn in a few steps: the share of ASCII letters and
# spaces in the completion (about 20 % of random bytes).
REWARD_SCRIPT = """
import string

LETTERS = set(string.ascii_letters + " ")


def letters(prompts, completions, **columns):
    return [sum(ch in LETTERS for ch in text) / max(1, len(text)) for text in completions]


def broken(prompts, completions, **columns):
    raise RuntimeError("no score for you")
"""
ONE_LAYER = {**TINY_LLAMA, "num_hidden_layers": 1}


def rlhf_spec(root: Path, *, steps: int, rlhf: dict[str, Any] | None = None, chat: bool = False, **fields: Any) -> dict[str, Any]:
    prompts: list[Any] = [f"write some words, {i}:" for i in range(8)]
    if chat:  # trl's conversational prompts, rendered with the tokenizer's chat template
        prompts = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}] for text in prompts]
    write_jsonl(root / "data" / "train.jsonl", [{"prompt": prompt, "topic": f"t{i % 3}"} for i, prompt in enumerate(prompts)])
    script = root / "rewards.py"
    script.write_text(REWARD_SCRIPT, encoding="utf-8")
    hyperparameters = {"max_steps": str(steps), "learning_rate": "3e-2", "lr_scheduler_type": "constant", "logging_steps": "1"}
    spec = make_spec(
        root,
        "RLHF",
        hyperparameters={**hyperparameters, **fields.pop("hyperparameters", {})},
        data_config={"batch_size": 8, "max_seq_length": 64, **fields.pop("data_config", {})},
        model_kwargs=ONE_LAYER,
        **fields,
    )
    block = {"reward_script_path": str(script), "reward_functions": ["letters"], "num_generations": 4, "max_completion_length": 8}
    spec["training_config"]["rlhf"] = {**block, **(rlhf or {})}
    return spec


def rewards(root: Path, attempt: int | None = None) -> dict[int, float]:
    return {p.step: float((p.model_extra or {})["reward"]) for p in metrics_points(root) if attempt is None or p.attempt == attempt}


def test_rlhf_trains_and_its_mean_reward_rises(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given an RLHF job whose reward is a function from the user's file
    spec = rlhf_spec(tmp_path, steps=10)

    # When it runs
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)

    # Then it completed, exported the policy, and the mean reward of the last steps beats the first steps'
    assert outcome.code == ExitCode.COMPLETED, outcome.stderr[-3000:]
    by_step = rewards(tmp_path)
    assert sorted(by_step) == list(range(1, 11))
    first, last = sum(by_step[s] for s in (1, 2, 3)) / 3, sum(by_step[s] for s in (8, 9, 10)) / 3
    assert last > first + 0.05, by_step
    # and each step reported reward, its spread, loss and throughput like every other type
    point = metrics_points(tmp_path)[-1]
    extra = point.model_extra or {}
    assert point.loss is not None and point.tokens_per_second and "reward_std" in extra and "rewards/letters/mean" not in extra
    assert "reward=" in outcome.stdout and "reward_std=" in outcome.stdout  # the SageMaker metric lines
    assert [m.step for m in outcome.checkpoints()] == [10] and outcome.checkpoints()[0].training_type == "RLHF"
    assert (tmp_path / "model" / "model.safetensors").is_file() and (tmp_path / "model" / "trainplane_export.json").is_file()


def _sigterm_at_step(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """A real SIGTERM to this process when the trainer reports `step` (through the real handler)."""
    original = Events.emit

    def emit(self: Events, kind: TrainerEventKind, data: dict[str, Any] | None = None) -> Any:
        event = original(self, kind, data)
        if kind == TrainerEventKind.PROGRESS and data and data["step"] == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return event

    monkeypatch.setattr(Events, "emit", emit)


def _tracked_before_each_checkpoint(monkeypatch: pytest.MonkeyPatch, store: Path, seen: list[tuple[int, list[int]]]) -> None:
    """When each checkpoint is reported (it exists), the steps of `reward` its MLflow run already holds. Only the
    flushes that wait (before a checkpoint, at the end) send: the background ones never get through here. (The
    pre-checkpoint wait is long here: a file store is never that slow, a loaded CI host may be.)"""
    flush = tracking.Tracker.flush
    monkeypatch.setattr(tracking.Tracker, "flush", lambda self, wait_seconds=60.0: flush(self, wait_seconds) if wait_seconds > 0 else False)
    original = Events.emit
    run: dict[str, str] = {}

    def emit(self: Events, kind: TrainerEventKind, data: dict[str, Any] | None = None) -> Any:
        if kind == TrainerEventKind.TRACKING and data:
            run["id"] = data["mlflow_run_id"]
        if kind == TrainerEventKind.CHECKPOINT and data:
            seen.append((data["step"], [s for s, _ in _history(store, run["id"], "reward")]))
        return original(self, kind, data)

    monkeypatch.setattr(Events, "emit", emit)


def _restart_markers(directory: Path) -> list[int]:
    """The steps of TensorBoard's restart markers (SessionLog.START) in the event files, oldest file first."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    files = sorted(directory.glob("events.out.tfevents.*"), key=lambda f: f.stat().st_mtime)
    events = [e for f in files for e in EventFileLoader(str(f)).Load()]
    return [e.step for e in events if e.HasField("session_log") and e.session_log.status == e.session_log.START]


def _tracked(spec: dict[str, Any], root: Path, store: Path, **plan: Any) -> dict[str, Any]:
    """The job logging to an MLflow file store and to TensorBoard (the run spec's plan, as the control plane makes it)."""
    config = {"mlflow": {"tracking_uri": f"file://{store}", "experiment_name": "tracking-test"}, "tensorboard": {}}
    spec["output_config"]["tracking"] = config
    spec["tracking"] = {"config": config, "job_name": "rlhf-job", "labels": {"team": "rl"}, "tensorboard_uri": str(root / "tb"), **plan}
    return spec


def test_an_rlhf_run_stopped_by_sigterm_and_resumed_matches_an_uninterrupted_run(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given the same job twice, with the KL penalty on (a reference model), gradient accumulation, warmup and
    # a mid-run asynchronous checkpoint; the second logs to MLflow and TensorBoard
    straight, interrupted, store = tmp_path / "straight", tmp_path / "interrupted", tmp_path / "mlruns"
    fields: dict[str, Any] = {
        "rlhf": {"beta": 0.1},
        "hyperparameters": {"warmup_steps": "2", "lr_scheduler_type": "cosine", "learning_rate": "1e-2"},
        "data_config": {"batch_size": 4, "gradient_accumulation_steps": 2},
        "output_config": {"checkpoint": {"save_steps": 2, "save_total_limit": 5}},
    }
    reference = run_in_process(straight, rlhf_spec(straight, steps=5, **fields), monkeypatch, capsys)
    assert reference.code == ExitCode.COMPLETED, reference.stderr[-3000:]

    # When the other gets SIGTERM at step 3: a checkpoint at step 3 and exit 75; then it runs again
    checkpointed: list[tuple[int, list[int]]] = []
    with monkeypatch.context() as patch:
        _sigterm_at_step(patch, 3)
        _tracked_before_each_checkpoint(patch, store, checkpointed)
        first = run_in_process(interrupted, _tracked(rlhf_spec(interrupted, steps=5, **fields), interrupted, store), patch, capsys)
    assert first.code == ExitCode.STOPPED_WITH_CHECKPOINT, first.stderr[-3000:]
    assert first.done.data == {"exit_code": 75, "stopped": True, "checkpoint_uri": str(interrupted / "checkpoints" / "step-000003")}
    assert [m.step for m in first.checkpoints()] == [2, 3]
    assert [e.data["phase"] for e in first.of_kind(TrainerEventKind.PHASE)][-1] == "CHECKPOINTING"  # no TRAINING as it exits
    (reported,) = first.of_kind(TrainerEventKind.TRACKING)
    run_id = reported.data["mlflow_run_id"]
    assert reported.data["tensorboard_uri"] == str(interrupted / "tb") and _runs(store)[0].info.status == "KILLED"
    # (every step up to a checkpoint was in the run before the checkpoint existed: no gap after a kill -9)
    assert checkpointed == [(2, [1, 2]), (3, [1, 2, 3])]
    # (the control plane passes the run the job recorded to the next attempt)
    resumed = _tracked({**rlhf_spec(interrupted, steps=5, **fields), "attempt": 2}, interrupted, store, mlflow_run_id=run_id)
    second = run_in_process(interrupted, resumed, monkeypatch, capsys)
    assert second.code == ExitCode.COMPLETED, second.stderr[-3000:]

    # Then every step's reward, KL and loss, and the final weights, are the uninterrupted run's exactly
    assert sorted(rewards(interrupted, 1)) == [1, 2, 3] and sorted(rewards(interrupted, 2)) == [4, 5]
    assert rewards(interrupted) == rewards(straight)
    kl = {p.step: (p.model_extra or {})["kl"] for p in metrics_points(straight)}
    assert {p.step: (p.model_extra or {})["kl"] for p in metrics_points(interrupted)} == kl and kl[5] > 0
    assert second.losses() == reference.losses()
    final_a = load_file(str(straight / "checkpoints" / "step-000005" / "model.safetensors"))
    final_b = load_file(str(interrupted / "checkpoints" / "step-000005" / "model.safetensors"))
    assert final_a.keys() == final_b.keys() and all(final_a[k].equal(final_b[k]) for k in final_a)
    assert second.checkpoints()[-1].resumed_from == "step-000003"

    # and the job has ONE tracker run, continued by the resumed attempt and FINISHED, whose reward, its spread,
    # KL and loss have every step once, with the uninterrupted run's values
    (run,) = _runs(store)
    assert run.info.run_id == run_id and run.info.status == "FINISHED"
    assert [e.data["mlflow_run_id"] for e in second.of_kind(TrainerEventKind.TRACKING)] == [run_id]
    expected = {p.step: {**(p.model_extra or {}), "loss": p.loss} for p in metrics_points(straight)}
    for key in ("reward", "reward_std", "kl", "loss"):
        assert _history(store, run_id, key) == [(s, pytest.approx(expected[s][key])) for s in range(1, 6)], key
    # with the checkpoints' steps, the rlhf block and hyperparameters as params, and the job's labels
    assert [s for s, _ in _history(store, run_id, tracking_sink.CHECKPOINT_METRIC)] == [2, 3, 4, 5]
    params = run.data.params
    assert params["training_type"] == "RLHF" and params["max_steps"] == "5" and params["rlhf.beta"] == "0.1"
    assert params["rlhf.num_generations"] == "4" and params["rlhf.reward_functions"] == "letters"
    assert run.data.tags["team"] == "rl" and run.data.tags[tracking_sink.JOB_TAG] == "job-1"
    # and TensorBoard reads the two attempts' event files as the same curve (the resumed one marks its restart)
    assert _restart_markers(interrupted / "tb") == [4]
    assert _tensorboard(interrupted / "tb", "reward") == [(s, pytest.approx(v, rel=1e-6)) for s, v in _history(store, run_id, "reward")]


def test_a_reward_model_directory_is_the_reward(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a (tiny, untrained) sequence-classification reward model saved with its tokenizer, no reward function,
    # and chat prompts
    from transformers import LlamaConfig, LlamaForSequenceClassification

    torch.manual_seed(0)
    tokenizer = ByteTokenizer()
    fields = {k: v for k, v in ONE_LAYER.items() if k != "architecture"}
    config = LlamaConfig(**fields, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    config.num_labels = 1
    reward_dir = tmp_path / "reward-model"
    LlamaForSequenceClassification(config).save_pretrained(reward_dir)
    tokenizer.save_pretrained(reward_dir)
    block = {"reward_script_path": None, "reward_functions": None, "reward_model": str(reward_dir)}
    spec = rlhf_spec(tmp_path, steps=2, rlhf=block, chat=True)

    # When it runs
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)

    # Then the model's scores are the reward
    assert outcome.code == ExitCode.COMPLETED, outcome.stderr[-3000:]
    assert sorted(rewards(tmp_path)) == [1, 2] and all(r != 0 for r in rewards(tmp_path).values())


@pytest.mark.parametrize(
    ("rlhf", "message"),
    [
        ({"reward_functions": ["broken"]}, "reward function broken raised RuntimeError: no score for you"),
        ({"reward_functions": ["missing"]}, "training_config.rlhf.reward_functions: .* defines no function 'missing'"),
    ],
)
def test_reward_script_failures_are_the_users(tmp_path: Path, monkeypatch, capsys, rlhf: dict[str, Any], message: str) -> None:
    outcome = run_in_process(tmp_path, rlhf_spec(tmp_path, steps=2, rlhf=rlhf), monkeypatch, capsys)
    assert outcome.code == ExitCode.USER_ERROR
    failure = outcome.failure_text()
    assert failure.startswith(FailureReason.USER_ERROR.value)
    import re

    assert re.search(message, failure), failure


def test_epoch_strategies_count_passes_over_the_prompts(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given 8 prompts and 2 prompts per step (8 completions, 4 per prompt): an epoch is 4 steps
    hyperparameters = {"logging_strategy": "epoch", "save_strategy": "epoch", "logging_steps": "1"}
    spec = rlhf_spec(tmp_path, steps=5, hyperparameters=hyperparameters)
    # When 5 steps run
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)
    # Then the end of the first epoch and the last step are reported, and checkpointed
    assert outcome.code == ExitCode.COMPLETED, outcome.stderr[-3000:]
    assert sorted(rewards(tmp_path)) == [4, 5]
    assert [m.step for m in outcome.checkpoints()] == [4, 5] and outcome.checkpoints()[0].epoch == 1.0


def test_every_metric_rlhf_reports_reaches_the_trackers() -> None:
    # Given each trl log key RLHF turns into a metrics point field: the trackers log it (tracking_sink.point_values)
    from trainer.rlhf import _LOGGED

    from schemas.api import MetricsPoint

    point = MetricsPoint(step=3, **{field: 0.5 for field in _LOGGED.values()}, tokens_seen=10)
    assert set(tracking_sink.point_values(point)) == set(_LOGGED.values())
