"""world_size > 1: which setup is chosen and refused, and a real 2-process run (gloo on the CPU) that
matches a single-process run of the same global batch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from trainer import distributed
from trainer.contract import ContainerPaths
from trainer.failures import UserError

from schemas.trainer import ExitCode, RunSpec, TrainerEventKind
from tests.trainer.runs import child_env, make_spec, metrics_points, parse_events, run_in_process, start_subprocess


def _spec(
    tmp_path: Path, *, framework: str = "HF_TRAINER", world: int = 2, nodes: int = 1, gpus: int = 0, training_type: str = "SFT"
) -> RunSpec:
    data = make_spec(
        tmp_path,
        training_type,
        framework={"type": framework, "distributed": {"world_size": world}},
        resource_config={"gpu_count": gpus, "node_count": nodes},
    )
    return RunSpec.model_validate(data)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"framework": "DEEPSPEED", "training_type": "QLORA", "gpus": 2}, "QLORA with DEEPSPEED"),
        ({"world": 3, "nodes": 2}, "not a multiple of resource_config.node_count=2"),
        ({"world": 8, "gpus": 4}, "needs 8 GPUs per node; resource_config.gpu_count=4"),
        ({"framework": "FSDP", "training_type": "QLORA", "gpus": 2}, "QLORA with FSDP"),
    ],
)
def test_impossible_setups_are_refused(kwargs, message, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=message):
        distributed.validate_framework(_spec(tmp_path, **kwargs), cuda_available=False, device_count=0)


def test_more_workers_than_visible_gpus_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="has 2 CUDA device"):
        distributed.validate_framework(_spec(tmp_path, world=4, gpus=4), cuda_available=True, device_count=2)
    distributed.validate_framework(_spec(tmp_path, world=2, gpus=2), cuda_available=True, device_count=2)


def test_the_launch_plan_follows_sagemakers_host_list(tmp_path: Path) -> None:
    # Given the second of two SageMaker hosts, world_size 4
    config = tmp_path / "config"
    config.mkdir()
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}))
    paths = ContainerPaths.from_env({"SM_INPUT_CONFIG_DIR": str(config)})

    # When the entry point plans its workers
    plan = distributed.plan_launch(_spec(tmp_path, world=4, nodes=2, gpus=2), paths, env={})

    # Then this node runs ranks 2 and 3, and rank 0 lives on algo-1
    assert plan == distributed.LaunchPlan(world_size=4, nnodes=2, node_rank=1, nproc_per_node=2, master_addr="algo-1", master_port=29500)
    single_node = distributed.plan_launch(
        _spec(tmp_path, world=2), ContainerPaths.from_env({"SM_INPUT_CONFIG_DIR": str(tmp_path / "x")}), env={}
    )
    assert single_node is not None and single_node.master_addr == "127.0.0.1" and single_node.master_port > 0
    assert [plan.worker_env(i)["RANK"] for i in range(2)] == ["2", "3"]
    assert plan.worker_env(1)["LOCAL_RANK"] == "1" and plan.worker_env(0)["WORLD_SIZE"] == "4"
    # and a node count that disagrees with SageMaker's is refused
    with pytest.raises(UserError, match="started 2 host"):
        distributed.plan_launch(_spec(tmp_path, world=3, nodes=3), paths, env={})


def test_already_a_worker_or_single_process_means_no_spawning(tmp_path: Path) -> None:
    paths = ContainerPaths.from_env({"SM_INPUT_CONFIG_DIR": str(tmp_path / "none")})
    assert distributed.plan_launch(_spec(tmp_path, world=1), paths, env={}) is None
    torchrun_env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"}
    assert distributed.plan_launch(_spec(tmp_path), paths, env=torchrun_env) is None
    worker = distributed.WorkerEnv.from_env(torchrun_env)
    assert worker == distributed.WorkerEnv(
        rank=1, world_size=2, local_rank=1, local_world_size=2, master_addr="10.0.0.1", master_port=29400
    )
    # EC2 multi-node without SageMaker's host list needs the launcher's NODE_RANK and MASTER_ADDR
    with pytest.raises(UserError, match="NODE_RANK and MASTER_ADDR"):
        distributed.plan_launch(_spec(tmp_path, world=4, nodes=2, gpus=2), paths, env={})
    plan = distributed.plan_launch(_spec(tmp_path, world=4, nodes=2, gpus=2), paths, env={"NODE_RANK": "1", "MASTER_ADDR": "10.0.0.5"})
    assert plan is not None and (plan.node_rank, plan.master_addr) == (1, "10.0.0.5")


@pytest.mark.parametrize(
    ("codes", "combined"),
    [([0, 0], 0), ([75, 0], 75), ([0, 65], 65), ([75, 71], 71), ([-9, 0], 70), ([1, 70], 1)],
)
def test_worker_exit_codes_combine(codes: list[int], combined: int) -> None:
    assert distributed.combine_exit_codes(codes) == combined


def _losses(root: Path) -> dict[int, float]:
    return {p.step: p.loss for p in metrics_points(root) if p.loss is not None}


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["HF_TRAINER", "FSDP"])
def test_two_cpu_workers_train_like_one_process_with_the_same_global_batch(framework: str, tmp_path: Path, monkeypatch, capsys) -> None:
    # Given packed pretraining data (every example the same length, so per-rank and global token
    # normalisation agree) and batch 8 in one process vs 2 workers x batch 4
    hyper = {"max_steps": "3", "learning_rate": "3e-3"}
    single_root, multi_root = tmp_path / "single", tmp_path / "multi"
    single = make_spec(single_root, "CONTINUED_PRETRAIN", hyperparameters=hyper, records=48, data_config={"batch_size": 8})
    multi = make_spec(
        multi_root,
        "CONTINUED_PRETRAIN",
        hyperparameters=hyper,
        records=48,
        data_config={"batch_size": 4},
        framework={"type": framework, "distributed": {"world_size": 2, "backend": "nccl"}},
    )

    # When one runs in one process and the other as two gloo workers spawned by the entry point
    reference = run_in_process(single_root, single, monkeypatch, capsys)
    assert reference.code == ExitCode.COMPLETED
    proc = start_subprocess(multi_root, multi)  # the supervisor picks a free MASTER_PORT
    out, err = proc.communicate(timeout=300)

    # Then both workers finished, rank 0 reported once, and the losses match the single process
    assert proc.returncode == ExitCode.COMPLETED, err[-4000:]
    assert "using gloo on this CPU-only host" in err
    done = [e for e in parse_events(out) if e.kind == TrainerEventKind.DONE]
    assert len(done) == 1 and done[0].data["exit_code"] == 0
    assert sorted(_losses(multi_root)) == [1, 2, 3]
    for step, loss in _losses(single_root).items():
        assert _losses(multi_root)[step] == pytest.approx(loss, rel=1e-4), step
    # and the checkpoint and the export hold the full (gathered) weights
    manifest = json.loads((multi_root / "checkpoints" / "step-000003" / "manifest.json").read_text())
    assert manifest["step"] == 3 and not manifest["is_adapter"]
    assert (multi_root / "model" / "model.safetensors").exists()


def test_several_workers_get_one_openmp_thread_each_unless_told_otherwise() -> None:
    assert distributed.worker_threads({"PATH": "/bin"}, 2) == {"PATH": "/bin", "OMP_NUM_THREADS": "1"}
    assert distributed.worker_threads({"OMP_NUM_THREADS": "4"}, 2)["OMP_NUM_THREADS"] == "4"
    assert "OMP_NUM_THREADS" not in distributed.worker_threads({}, 1)


# What the entry point does before it spawns the workers of a CPU job, in a fresh interpreter.
_SUPERVISOR_OF_A_CPU_JOB = """
import sys
from trainer.__main__ import _cuda_devices
from trainer import distributed
from trainer.contract import ContainerPaths
from schemas.trainer import RunSpec
spec = RunSpec.model_validate_json(sys.stdin.read())
devices = _cuda_devices(spec)
distributed.validate_framework(spec, cuda_available=devices > 0, device_count=devices)
plan = distributed.plan_launch(spec, ContainerPaths.from_env({}), env={})
print("workers:", plan.nproc_per_node, "cuda devices:", devices, "torch imported:", "torch" in sys.modules)
"""


def test_the_supervisor_of_a_cpu_job_starts_its_workers_without_importing_torch(tmp_path: Path) -> None:
    # Given a 2-worker CPU job: torch's import (seconds) is the workers' to pay, not the supervisor's too
    spec = _spec(tmp_path, world=2, gpus=0)
    done = subprocess.run(
        [sys.executable, "-c", _SUPERVISOR_OF_A_CPU_JOB],
        input=spec.model_dump_json(),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "workers: 2 cuda devices: 0 torch imported: False" in done.stdout
