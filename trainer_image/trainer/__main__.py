"""The trainer's one entry point: `python -m trainer`, the `trainplane-trainer` console script, and the
image's ENTRYPOINT (SageMaker runs the image as `<entrypoint> train`).

PREPARING (run spec, hyperparameters, data, model) -> TRAINING <-> CHECKPOINTING -> EVALUATING ->
EXPORTING -> exit 0. SIGTERM or max_runtime_seconds: checkpoint, exit 75. Every failure: a classified
/opt/ml/output/failure, a FAILURE event, a DONE event, and the matching exit code (schemas/trainer.py).
"""

from __future__ import annotations

import gc
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schemas.configs import FrameworkType, TrainingType
from schemas.trainer import ENV_RUN_SPEC, ENV_STOP_SIGNALS_GROUP, ExitCode, FailureReason, RunSpec, TrainerPhase
from trainer import access, storage, telemetry
from trainer.contract import ContainerPaths, load_run_spec
from trainer.events import Events, log
from trainer.failures import UserError, classify, write_failure
from trainer.hyper import Hyper
from trainer.run_layout import RunLayout
from trainer.signals import StopRequest
from trainer.tracking import Tracker

if TYPE_CHECKING:
    from trainer.checkpoint import CheckpointManager
    from trainer.metrics import MetricsLog

    # One training run (the loop's, RLHF's), given the run layout, the job's checkpoints and its metrics.jsonl
    Train = Callable[[RunLayout | None, CheckpointManager, MetricsLog], int]


def main(argv: list[str] | None = None) -> int:
    """Run one attempt; returns the exit code (the console script exits with it)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "train":
        args = args[1:]  # SageMaker appends "train" to the ENTRYPOINT
    paths = ContainerPaths.from_env()
    # A worker of a multi-process run (RANK set by torchrun or our supervisor) stays quiet but for rank 0.
    events = Events(enabled=os.environ.get("RANK", "0") == "0")
    stop = StopRequest()
    stop.install()
    try:
        events.set_phase(TrainerPhase.PREPARING)
        spec = load_run_spec(paths)
        events.bind(spec.job_id, spec.attempt)
        access.enforce(spec)  # every path inside what the control plane allowed, before any is touched
        stop.max_runtime_seconds = spec.max_runtime_seconds
        os.environ.update(spec.training_config.environment)
        if spec.training_config.framework.type == FrameworkType.CUSTOM:
            return _finish(events, run_custom_script(spec, paths, stop, args), None)
        return _train(spec, paths, events, stop, args)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            exc = UserError("interrupted")
        classified = classify(exc)
        if classified.reason == FailureReason.INTERNAL:
            import traceback

            traceback.print_exc()
        log(classified.failure_text())
        # SageMaker reads one failure file per host: rank 0 writes it, another worker only if rank 0 did not.
        if events.enabled or not paths.failure_file.exists():
            write_failure(paths.failure_file, classified)
        events.failure(classified.reason.value, classified.message)
        return _finish(events, int(classified.exit_code), None)
    finally:
        stop.uninstall()


def _finish(events: Events, code: int, checkpoint_uri: str | None) -> int:
    events.done(code, stopped=code == ExitCode.STOPPED_WITH_CHECKPOINT, checkpoint_uri=checkpoint_uri)
    return code


def _cuda_devices(spec: RunSpec) -> int:
    """How many CUDA devices this job trains on: 0 for a CPU job (gpu_count 0) without importing torch, so
    that the supervisor of a multi-worker CPU run starts its workers without paying torch's import."""
    if spec.resource_config.gpu_count == 0:
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _device(spec: RunSpec, cuda_devices: int) -> Any:
    import torch

    if cuda_devices > 0:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        return torch.device("cuda", local_rank)
    if spec.resource_config.gpu_count > 0:
        log(f"resource_config.gpu_count={spec.resource_config.gpu_count} but no CUDA device is visible: training on the CPU")
    return torch.device("cpu")


def _train(spec: RunSpec, paths: ContainerPaths, events: Events, stop: StopRequest, argv: list[str]) -> int:
    tc = spec.training_config
    hyper = Hyper.from_strings(tc.hyperparameters, tc.training_type)  # bad hyperparameters fail first
    from trainer import distributed

    cuda_devices = _cuda_devices(spec)
    distributed.validate_framework(spec, cuda_available=cuda_devices > 0, device_count=cuda_devices)
    if tc.training_type == TrainingType.QLORA and cuda_devices == 0:
        # Decided before reading data or building the model: QLoRA's 4-bit kernels exist only for CUDA.
        raise UserError("QLORA needs a CUDA GPU (bitsandbytes 4-bit kernels); this host has none (device cpu). Use LORA on a CPU.")
    plan = distributed.plan_launch(spec, paths)
    if plan is not None and plan.nproc_per_node == 1:
        # One worker on this node (a multi-node job with one process per node): this process is that
        # worker, rather than a supervisor paying a second interpreter and torch import for one child.
        os.environ.update(plan.worker_env(0))
        plan = None
    if plan is not None:
        events.enabled = False  # the workers report; this supervisor only returns their exit code
        return distributed.spawn_workers(plan, argv, grace_seconds=paths.stop_grace_seconds())

    runtime = distributed.make_runtime(spec, _device(spec, cuda_devices))
    events.enabled = runtime.is_main
    try:
        with telemetry.monitored(
            events,
            metrics_uri=spec.metrics_uri,
            staging_dir=paths.output_data_dir / "system",
            job_id=spec.job_id,
            attempt=spec.attempt,
            node=int(os.environ.get("GROUP_RANK", "0")),
            local_rank=runtime.local_rank,
            is_main=runtime.is_main,
        ):
            return _train_worker(spec, hyper, paths, events, stop, runtime)
    finally:
        runtime.close()


def _seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _train_worker(spec: RunSpec, hyper: Hyper, paths: ContainerPaths, events: Events, stop: StopRequest, runtime: Any) -> int:
    from trainer import data, models
    from trainer.loop import TrainInputs

    tc, dc = spec.training_config, spec.data_config
    seed = hyper.seed if hyper.seed is not None else dc.seed
    _seed_everything(seed)
    train_records, validation_records = data.load_splits(dc, paths.channels(), tc.training_type)
    if stop.requested:
        return _finish(events, ExitCode.STOPPED_WITH_CHECKPOINT, None)
    if tc.training_type == TrainingType.RLHF and validation_records:
        raise UserError("RLHF has no evaluation pass: remove the validation sources and validation_split")
    loaded = models.load_model_and_tokenizer(tc, hyper, runtime.device, seed=seed)
    if tc.training_type == TrainingType.RLHF:
        if stop.requested:
            return _finish(events, ExitCode.STOPPED_WITH_CHECKPOINT, None)
        train_rlhf = partial(_train_rlhf, spec, hyper, paths, events, stop, runtime, loaded, train_records, seed)
        return _train_tracked(spec, hyper, paths, events, runtime, train_rlhf)
    train_examples = data.build_examples(train_records, loaded.tokenizer, tc.training_type, dc, hyper)
    validation_examples = (
        data.build_examples(validation_records, loaded.tokenizer, tc.training_type, dc, hyper) if validation_records else []
    )
    if stop.requested:
        return _finish(events, ExitCode.STOPPED_WITH_CHECKPOINT, None)
    pad_id = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else loaded.tokenizer.eos_token_id
    max_length = dc.max_seq_length if dc.preprocess.padding == "max_length" else None
    inputs = TrainInputs(
        model=loaded.model,
        is_adapter=loaded.is_adapter,
        train=train_examples,
        validation=validation_examples,
        collate=partial(data.collate, pad_id=pad_id, max_length=max_length),
        reference_model=loaded.reference_model,
        extra_files=_config_files(loaded.model, loaded.is_adapter),
    )
    train_loop = partial(_train_loop, spec, hyper, paths, events, stop, runtime, loaded, inputs)
    return _train_tracked(spec, hyper, paths, events, runtime, train_loop)


def _train_tracked(spec: RunSpec, hyper: Hyper, paths: ContainerPaths, events: Events, runtime: Any, train: Train) -> int:
    """Every training type's run (the loop's, RLHF's) inside the same frame: the run layout prepared, one
    CheckpointManager whose saves are reported (event, layout, trackers), metrics.jsonl, and the experiment
    trackers (rank 0) opened before and closed after: KILLED when stopped (the next attempt continues the
    run), FINISHED, or FAILED."""
    from trainer.loop import emit_checkpoint_event
    from trainer.metrics import MetricsLog

    layout = RunLayout.of(spec)
    if layout is not None and runtime.is_main:
        layout.prepare()
    on_saved = emit_checkpoint_event(events)
    if layout is not None:
        on_saved = _both(on_saved, layout.on_saved)
    tracker = Tracker.open(spec, _tracked_params(spec, hyper), paths.output_data_dir / "tensorboard", events) if runtime.is_main else None
    if tracker is not None:
        on_saved = _both(on_saved, lambda manifest, uri: tracker.checkpoint(manifest.step, uri))
    try:
        checkpoints = _checkpoint_manager(spec, hyper, paths, on_saved)
        metrics = MetricsLog(paths.output_data_dir / "metrics.jsonl", spec.metrics_uri, attempt=spec.attempt, enabled=runtime.is_main)
        metrics.tracker = tracker
        code = train(layout, checkpoints, metrics)
    except BaseException:
        if tracker is not None:
            tracker.close("FAILED")
        raise
    if tracker is not None:
        tracker.close("KILLED" if code == ExitCode.STOPPED_WITH_CHECKPOINT else "FINISHED")
    return code


def _tracked_params(spec: RunSpec, hyper: Hyper) -> dict[str, str]:
    """The hyperparameters as parsed, plus RLHF's block (rewards, weights, sampling, beta) as `rlhf.<field>`:
    the run's params in every tracker."""
    params = hyper.to_strings()
    rlhf = spec.training_config.rlhf
    if rlhf is not None:
        for key, value in rlhf.model_dump(mode="json", exclude_none=True).items():
            params[f"rlhf.{key}"] = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return params


def _checkpoint_manager(spec: RunSpec, hyper: Hyper, paths: ContainerPaths, on_saved: Callable[[Any, str], None]) -> CheckpointManager:
    """The job's checkpoints (manifests, async writes, retention), the same for every training type."""
    from trainer.checkpoint import CheckpointManager

    return CheckpointManager(
        spec.checkpoint_uri,
        paths.checkpoint_dir,
        spec.output_config.checkpoint,
        job_id=spec.job_id,
        attempt=spec.attempt,
        training_type=spec.training_config.training_type.value,
        on_saved=on_saved,
        asynchronous=hyper.async_checkpoint,
    )


def _train_loop(
    spec: RunSpec,
    hyper: Hyper,
    paths: ContainerPaths,
    events: Events,
    stop: StopRequest,
    runtime: Any,
    loaded: Any,
    inputs: Any,
    layout: RunLayout | None,
    checkpoints: CheckpointManager,
    metrics: MetricsLog,
) -> int:
    from trainer import export, models
    from trainer.loop import TrainingLoop

    oc = spec.output_config
    loop = TrainingLoop(spec, hyper, inputs, runtime=runtime, checkpoints=checkpoints, events=events, metrics=metrics, stop=stop)
    result = loop.run(_resume_uri(spec))
    if layout is not None and runtime.is_main:
        checkpoints.wait()
        layout.finish(paths.output_data_dir / "metrics.jsonl")
    if result.stopped:
        log(f"stopped ({stop.reason}) at step {result.step}/{result.total_steps}; checkpoint {result.checkpoint_uri}")
        return _finish(events, ExitCode.STOPPED_WITH_CHECKPOINT, result.checkpoint_uri)

    events.set_phase(TrainerPhase.EXPORTING)
    model = _exportable_model(loop.final_model, runtime, spec, hyper, loaded, inputs, models)
    if runtime.is_main:
        export.export_model(
            model,
            loaded.tokenizer,
            is_adapter=loaded.is_adapter,
            output=oc,
            model_dir=paths.model_dir,
            output_uri=spec.output_uri,
            claim=partial(access.claim_export, spec=spec),
            info={"job_id": spec.job_id, "attempt": spec.attempt, "step": result.step, "eval": result.eval_metrics},
        )
    runtime.barrier()
    return _finish(events, ExitCode.COMPLETED, result.checkpoint_uri)


def _train_rlhf(
    spec: RunSpec,
    hyper: Hyper,
    paths: ContainerPaths,
    events: Events,
    stop: StopRequest,
    runtime: Any,
    loaded: Any,
    records: list[Any],
    seed: int,
    layout: RunLayout | None,
    checkpoints: CheckpointManager,
    metrics: MetricsLog,
) -> int:
    """RLHF (GRPO on trl, trainer/rlhf.py) with the same checkpoints, stop, metrics, trackers and export as the loop."""
    from trainer import export
    from trainer.rlhf import RLHFRun

    oc = spec.output_config
    work = paths.output_data_dir / "rlhf"
    work.mkdir(parents=True, exist_ok=True)
    run = RLHFRun(
        spec,
        hyper,
        model=loaded.model,
        tokenizer=loaded.tokenizer,
        records=records,
        runtime=runtime,
        checkpoints=checkpoints,
        events=events,
        metrics=metrics,
        stop=stop,
        work_dir=work,
        extra_files=_config_files(loaded.model, False),
        seed=seed,
    )
    result = run.run(_resume_uri(spec))
    if layout is not None:
        layout.finish(paths.output_data_dir / "metrics.jsonl")
    if result.stopped:
        log(f"stopped ({stop.reason}) at step {result.step}/{result.total_steps}; checkpoint {result.checkpoint_uri}")
        return _finish(events, ExitCode.STOPPED_WITH_CHECKPOINT, result.checkpoint_uri)
    events.set_phase(TrainerPhase.EXPORTING)
    export.export_model(
        result.model,
        loaded.tokenizer,
        is_adapter=False,
        output=oc,
        model_dir=paths.model_dir,
        output_uri=spec.output_uri,
        claim=partial(access.claim_export, spec=spec),
        info={"job_id": spec.job_id, "attempt": spec.attempt, "step": result.step, "eval": {}},
    )
    return _finish(events, ExitCode.COMPLETED, result.checkpoint_uri)


def _both(first: Callable[[Any, str], None], second: Callable[[Any, str], None]) -> Callable[[Any, str], None]:
    def both(manifest: Any, uri: str) -> None:
        first(manifest, uri)
        second(manifest, uri)

    return both


def _resume_uri(spec: RunSpec) -> str | None:
    if spec.resume_from:
        return spec.resume_from
    if spec.training_config.resume_from_checkpoint:
        # A checkpoint id ("step-000500") names a checkpoint of this job; a URI names any.
        ref = spec.training_config.resume_from_checkpoint
        if ref == "latest":
            return None  # the newest checkpoint under checkpoint_uri, as for an automatic resume
        return ref if "/" in ref else storage.join(spec.checkpoint_uri, ref)
    return None


def _config_files(model: Any, is_adapter: bool) -> dict[str, bytes]:
    """config.json / adapter_config.json in every checkpoint: a checkpoint describes its own weights."""
    files: dict[str, bytes] = {}
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_json_string"):
        files["config.json"] = config.to_json_string().encode("utf-8")
    peft_config = getattr(model, "peft_config", None)
    if is_adapter and peft_config:
        import json

        adapter = next(iter(peft_config.values()))
        files["adapter_config.json"] = json.dumps(adapter.to_dict(), default=str, indent=1).encode("utf-8")
    return files


def _exportable_model(trained: Any, runtime: Any, spec: RunSpec, hyper: Hyper, loaded: Any, inputs: Any, models: Any) -> Any:
    """The trained model as one plain module on rank 0. FSDP and ZeRO-3 shard it: gather the full
    weights into a fresh copy (collective, every rank takes part)."""
    if not runtime.shards_parameters or runtime.world_size == 1:
        return runtime.unwrap(trained)
    import torch

    tensors = runtime.model_state(trained, loaded.is_adapter)
    runtime.after_training()
    if not runtime.is_main:
        return None
    fresh = models.load_model_and_tokenizer(spec.training_config, hyper, torch.device("cpu"), seed=0).model
    if loaded.is_adapter:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(fresh, tensors)
    else:
        fresh.load_state_dict(tensors, strict=True)
    return fresh


# --- CUSTOM: the user's script with the same contract ---------------------------------------------


def run_custom_script(spec: RunSpec, paths: ContainerPaths, stop: StopRequest, argv: list[str]) -> int:
    """Run framework.custom_script_path, or framework.command (OME's trainer.command) as given; its exit
    code is ours. A script gets the hyperparameters as `--key value` arguments, as SageMaker script mode
    passes them; a command gets only framework.args. Both get framework.args last and the same
    environment (paths, TRAINPLANE_RUN_SPEC as a local file). SIGTERM reaches the child once: forwarded,
    unless the launcher signalled the whole process group (_stop_reached_child); the child owns its
    graceful stop."""
    framework = spec.training_config.framework
    work = paths.output_data_dir / "custom"
    work.mkdir(parents=True, exist_ok=True)
    spec_file = work / "run.json"
    spec_file.write_text(spec.model_dump_json(context={"reveal_secrets": True}), encoding="utf-8")
    if framework.command:
        command = list(framework.command)
        log(f"CUSTOM: running {' '.join(command)}")
    else:
        script = _custom_script(framework.custom_script_path or "", work)
        command = [sys.executable, str(script)] if script.suffix == ".py" else ["/bin/sh", str(script)]
        for key, value in sorted(spec.training_config.hyperparameters.items()):
            command += [f"--{key}", value]
        log(f"CUSTOM: running {script}")
    command += framework.args
    env = {**os.environ, ENV_RUN_SPEC: str(spec_file)}
    try:
        child = subprocess.Popen([*command, *argv], env=env)
    except OSError as exc:
        raise UserError(f"framework.command cannot be run: {exc}") from exc

    def forward(signum: int, _frame: Any) -> None:
        stop.request(signal.Signals(signum).name)
        if child.poll() is None and not _stop_reached_child(child):
            child.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if code < 0:
        return int(ExitCode.STOPPED_WITH_CHECKPOINT) if stop.requested and code == -signal.SIGTERM else int(ExitCode.INTERNAL_ERROR)
    return code


def _stop_reached_child(child: subprocess.Popen[bytes]) -> bool:
    """Whether the stop signal this trainer got reached its child too: the launcher signals the process
    group (ENV_STOP_SIGNALS_GROUP) and the child is still in it. Then a forward would be its second
    SIGTERM, and a handler run again inside its first run prints its report inside the first one's
    print (two reports on one line) or saves the same checkpoint twice at once."""
    if os.environ.get(ENV_STOP_SIGNALS_GROUP) != "1":
        return False  # SageMaker and `docker stop` signal the container's first process only: forward
    try:
        return os.getpgid(child.pid) == os.getpgrp()
    except ProcessLookupError:
        return True  # gone: nothing to forward to


def _custom_script(script_ref: str, work: Path) -> Path:
    if storage.is_s3(script_ref):
        script = work / Path(storage.split_s3(script_ref)[1]).name
        storage.download_file(script_ref, script)
    else:
        script = storage.local_path(script_ref)
    if not script.is_file():
        raise UserError(f"framework.custom_script_path not found: {script_ref}")
    return script


if __name__ == "__main__":
    exit_code = main()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # a worker of a multi-process run (WorkerEnv)
        # Its reports are flushed, its checkpoint shards written behind the collective barrier, rank 0's
        # trackers closed: nothing is left to run. The interpreter's teardown is skipped, not just made
        # shorter: there, a C++ thread of the process group still joinable at exit aborted a worker of a
        # finished ZeRO-3 run ("terminate called without an active exception"), and the supervisor then
        # reported a crash (exit 70) for a job that had ended.
        import logging

        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_code)
    # Everything the run needed is written and flushed by now (events, checkpoints, trackers closed). Out of
    # the collector's sight, the interpreter's teardown no longer walks every object the imports built
    # (botocore's models, pydantic's schemas; torch and transformers: ~1 s, 0.2 s once frozen), which the
    # control plane waited for before it saw the run end. atexit handlers still run.
    gc.freeze()
    raise SystemExit(exit_code)
