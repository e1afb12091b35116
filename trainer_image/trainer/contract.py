"""The SageMaker container contract, with an environment override for every path.

A bare SageMaker training container (no sagemaker-training toolkit in our image) gets:
  /opt/ml/input/config/hyperparameters.json   string -> string, from CreateTrainingJob HyperParameters
  /opt/ml/input/config/inputdataconfig.json   the channels, whose files sit in /opt/ml/input/data/<name>
  /opt/ml/input/config/resourceconfig.json    {"current_host": "algo-1", "hosts": [...]} (multi-node)
  /opt/ml/model                               uploaded as model.tar.gz when the job ends
  /opt/ml/checkpoints                         CheckpointConfig.LocalPath (synced with S3 by SageMaker)
  /opt/ml/output/failure                      its first 1024 characters become FailureReason
The toolkit's SM_CHANNEL_<NAME> variables are honoured too (the LocalLauncher sets them), and
schemas/trainer.py names the variables that move every path for local runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from schemas.trainer import (
    DEFAULT_STOP_GRACE_SECONDS,
    ENV_ATTEMPT,
    ENV_CHANNEL_PREFIX,
    ENV_CHECKPOINT_DIR,
    ENV_FAILURE_FILE,
    ENV_GRACE_SECONDS,
    ENV_INPUT_CONFIG_DIR,
    ENV_JOB_ID,
    ENV_MODEL_DIR,
    ENV_OUTPUT_DATA_DIR,
    ENV_RUN_SPEC,
    ENV_SM_HYPERPARAMETERS,
    RunSpec,
)
from trainer import storage
from trainer.failures import UserError

OPT_ML = Path("/opt/ml")
RUN_SPEC_HYPERPARAMETER = "run_spec"  # hyperparameters.json key holding the run spec's URI
# SageMaker adds its own keys (sagemaker_program, sagemaker_region...); they are not ours to parse.
_SAGEMAKER_RESERVED_PREFIX = "sagemaker_"


@dataclass(frozen=True)
class Hosts:
    current: str
    hosts: list[str]

    @property
    def node_rank(self) -> int:
        return self.hosts.index(self.current)

    @property
    def master(self) -> str:
        return self.hosts[0]


@dataclass(frozen=True)
class ContainerPaths:
    input_config_dir: Path
    hyperparameters_file: Path
    input_data_dir: Path
    model_dir: Path
    checkpoint_dir: Path
    output_data_dir: Path
    failure_file: Path
    env: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> ContainerPaths:
        env = dict(os.environ if env is None else env)
        config_dir = Path(env.get(ENV_INPUT_CONFIG_DIR, str(OPT_ML / "input" / "config")))
        return cls(
            input_config_dir=config_dir,
            hyperparameters_file=Path(env.get(ENV_SM_HYPERPARAMETERS, str(config_dir / "hyperparameters.json"))),
            input_data_dir=Path(env.get("SM_INPUT_DATA_DIR", str(OPT_ML / "input" / "data"))),
            model_dir=Path(env.get(ENV_MODEL_DIR, str(OPT_ML / "model"))),
            checkpoint_dir=Path(env.get(ENV_CHECKPOINT_DIR, str(OPT_ML / "checkpoints"))),
            output_data_dir=Path(env.get(ENV_OUTPUT_DATA_DIR, str(OPT_ML / "output" / "data"))),
            failure_file=Path(env.get(ENV_FAILURE_FILE, str(OPT_ML / "output" / "failure"))),
            env=env,
        )

    def hyperparameters(self) -> dict[str, str]:
        """hyperparameters.json as strings ({} when absent, as outside SageMaker)."""
        if not self.hyperparameters_file.is_file():
            return {}
        try:
            raw = json.loads(self.hyperparameters_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise UserError(f"{self.hyperparameters_file}: not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise UserError(f"{self.hyperparameters_file}: expected a JSON object")
        # SageMaker passes strings; the SDK sometimes JSON-encodes them once more ("\"3\"").
        return {str(k): _unquote(v) for k, v in raw.items()}

    def channels(self) -> dict[str, Path]:
        """Data channels by lower-case name: SM_CHANNEL_<NAME> first, then inputdataconfig.json."""
        found: dict[str, Path] = {}
        config = self.input_config_dir / "inputdataconfig.json"
        if config.is_file():
            for name in json.loads(config.read_text(encoding="utf-8")):
                found[name.lower()] = self.input_data_dir / name
        for key, value in self.env.items():
            if key.startswith(ENV_CHANNEL_PREFIX) and value:
                found[key[len(ENV_CHANNEL_PREFIX) :].lower()] = Path(value)
        return found

    def hosts(self) -> Hosts | None:
        """SageMaker's host list for multi-node runs; None outside SageMaker (torchrun env rules then)."""
        config = self.input_config_dir / "resourceconfig.json"
        if not config.is_file():
            return None
        data = json.loads(config.read_text(encoding="utf-8"))
        hosts = sorted(data.get("hosts") or [])  # sorted: every node must agree on who is rank 0
        current = data.get("current_host")
        if not hosts or current not in hosts:
            raise UserError(f"{config}: current_host {current!r} is not in hosts {hosts!r}")
        return Hosts(current=current, hosts=hosts)

    def stop_grace_seconds(self) -> int:
        return int(self.env.get(ENV_GRACE_SECONDS, DEFAULT_STOP_GRACE_SECONDS))


def load_run_spec(paths: ContainerPaths) -> RunSpec:
    """TRAINPLANE_RUN_SPEC (a path, an s3:// URI or inline JSON), else hyperparameters.json["run_spec"].

    Every other non-SageMaker key of hyperparameters.json overrides training_config.hyperparameters,
    so a SageMaker launcher may show the hyperparameters in the console and still have one source.
    """
    hps = paths.hyperparameters()
    source = paths.env.get(ENV_RUN_SPEC) or hps.get(RUN_SPEC_HYPERPARAMETER)
    if not source:
        raise UserError(f"no run spec: set {ENV_RUN_SPEC} or the '{RUN_SPEC_HYPERPARAMETER}' hyperparameter")
    text = source if source.lstrip().startswith("{") else _read_spec(source)
    try:
        spec = RunSpec.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        raise UserError(f"invalid run spec: {problems}") from exc
    overrides = {k: v for k, v in hps.items() if k != RUN_SPEC_HYPERPARAMETER and not k.startswith(_SAGEMAKER_RESERVED_PREFIX)}
    updates: dict[str, object] = {}
    if overrides:
        merged = {**spec.training_config.hyperparameters, **overrides}
        updates["training_config"] = spec.training_config.model_copy(update={"hyperparameters": merged})
    if paths.env.get(ENV_ATTEMPT, "").isdigit() and int(paths.env[ENV_ATTEMPT]) != spec.attempt:
        updates["attempt"] = int(paths.env[ENV_ATTEMPT])
    if paths.env.get(ENV_JOB_ID) and paths.env[ENV_JOB_ID] != spec.job_id:
        raise UserError(f"{ENV_JOB_ID}={paths.env[ENV_JOB_ID]!r} does not match the run spec's job_id {spec.job_id!r}")
    return spec.model_copy(update=updates) if updates else spec


def _read_spec(source: str) -> str:
    try:
        return storage.read_text(source)
    except FileNotFoundError as exc:
        raise UserError(f"run spec not found: {source}") from exc
    except Exception as exc:
        if type(exc).__name__ in {"NoSuchKey", "ClientError"}:
            raise UserError(f"run spec not readable: {source}: {exc}") from exc
        raise


def _unquote(value: object) -> str:
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return value
        return decoded if isinstance(decoded, str) else value
    return value if isinstance(value, str) else json.dumps(value)
