"""Bounds every request shares: how many keys a free-form map may hold, and which environment variables a
job may not set. Low (imports nothing of ours): the request models, the submit checks and the trainer
read the same tables.

Free-form maps (hyperparameters, environment, labels, model_kwargs, framework config, extra_args...)
are counted BEFORE any per-key work: a body of 400,000 keys is one short 422 naming the field, not
400,000 validations and 400,000 errors (one such request held the API for 19 s and answered 513 MB).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

# SageMaker's own limits on a training job's HyperParameters and Environment (100 entries each).
MAX_HYPERPARAMETERS = 100
MAX_ENVIRONMENT = 100
MAX_TRAIN_ENV = MAX_ENVIRONMENT - 3  # /train adds FRAMEWORK, RUN_ID and CHECKPOINT_PREFIX to its env
# Maps whose keys the trainer or the framework reads one by one: a few dozen are a lot.
MAX_MODEL_KWARGS = 64
MAX_FRAMEWORK_CONFIG = 64
MAX_DATA_FILTERS = 64
MAX_EXTRA_ARGS = 256
MAX_ANNOTATIONS = 64
MAX_RESOURCE_KEYS = 16  # OME's resourcesPerNode requests / limits (cpu, memory, nvidia.com/gpu...)
MAX_LABELS = 32  # a job's labels (the policy's own labels included)
# A team's name (schemas/teams.py), also the /teams/{team} path parameter's pattern (read at the API's import).
TEAM_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
# GET /jobs/{id}/metrics/system: samples per device in one answer (a day at 10 s is 8640; a chart wants about two per pixel).
DEFAULT_MAX_SAMPLES = 2000


def key_count(limit: int) -> BeforeValidator:
    """A validator for a map field that refuses more than `limit` keys before looking at any key.

    Put it in the field's Annotated metadata with `Field(max_length=limit)` (the latter documents it as
    maxProperties in openapi.json and stays a second net).
    """

    def _check(value: Any) -> Any:
        if isinstance(value, dict) and len(value) > limit:
            raise PydanticCustomError("too_many_keys", "at most {limit} keys, not {count}", {"limit": limit, "count": len(value)})
        return value

    return BeforeValidator(_check)


def node_count(limit: int) -> BeforeValidator:
    """A validator for a free-form nested document (an EventBridge pattern): at most `limit` keys and list
    items at all depths, counted before any is validated (the count stops at limit + 1: bounded work)."""

    def _check(value: Any) -> Any:
        stack, seen = [value], 0
        while stack:
            node = stack.pop()
            if not isinstance(node, dict | list):
                continue
            seen += len(node)  # len() first: a node's children are listed only once they fit the limit
            if seen > limit:
                raise PydanticCustomError("too_many_keys", "at most {limit} keys and list items in all", {"limit": limit})
            stack.extend(node.values() if isinstance(node, dict) else node)
        return value

    return BeforeValidator(_check)


MAX_PATTERN_NODES = 256  # an EventBridge pattern's keys and values, all depths


# --- environment variables a job may not set ------------------------------------------------------
#
# A deny-list, complete for the variables that move where the trainer, Python and its libraries read or
# write files, or what code they load: set by a job, one could point a cache or config directory into
# another principal's data or local mode's state directory (XDG_CONFIG_HOME once made the trainer write
# there). Submit refuses them (422, functions/service/paths.py) and the trainer refuses a run spec that
# holds one (trainer/access.py), so a job stored before a name was added cannot use it either.
# docs/SECURITY.md lists them.

# Any name starting with one of these.
DENIED_ENV_PREFIXES = (
    "TRAINPLANE_",  # the control plane's own contract (run spec, job id, attempt, endpoints)
    "SM_",  # SageMaker's container contract (/opt/ml paths)
    "AWS_",  # credentials, endpoints, config and credential files
    "XDG_",  # XDG_CONFIG_HOME, XDG_CACHE_HOME, XDG_DATA_HOME, XDG_RUNTIME_DIR...
    "LD_",  # LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT...
    "DYLD_",
    "PYTHON",  # PYTHONPATH, PYTHONHOME, PYTHONSTARTUP, PYTHONUSERBASE, PYTHONPYCACHEPREFIX...
    "MLFLOW_",  # output_config.tracking owns MLflow (MLFLOW_TRACKING_URI could name a file store anywhere)
    "WANDB_",  # output_config.tracking owns W&B (WANDB_DIR, WANDB_CACHE_DIR, WANDB_CONFIG_DIR...)
    "HF_",  # HF_HOME, HF_HUB_CACHE, HF_DATASETS_CACHE, HF_TOKEN_PATH... (HF_TOKEN and the switches below are allowed)
    "HUGGINGFACE_",  # HUGGINGFACE_HUB_CACHE, HUGGINGFACE_ASSETS_CACHE
    "TORCH",  # TORCH_HOME, TORCH_EXTENSIONS_DIR, TORCHINDUCTOR_CACHE_DIR, TORCHELASTIC_*...
    "TRANSFORMERS_",  # TRANSFORMERS_CACHE
    "PYTORCH_",  # PYTORCH_TRANSFORMERS_CACHE, PYTORCH_PRETRAINED_BERT_CACHE, PYTORCH_KERNEL_CACHE_PATH
    "TRITON_",  # TRITON_CACHE_DIR, TRITON_HOME
    "NUMBA_",  # NUMBA_CACHE_DIR
    "GIT_",  # GIT_DIR, GIT_CONFIG_*, GIT_SSH_COMMAND (the Hub client may run git)
    "SSL_",  # SSL_CERT_FILE, SSL_CERT_DIR
)
# Exactly these names.
DENIED_ENV_NAMES = frozenset(
    {
        "HOME",
        "PATH",
        "PWD",
        "TMPDIR",
        "TMP",
        "TEMP",
        "SHELL",
        "ENV",
        "BASH_ENV",
        "MPLCONFIGDIR",
        "CUDA_CACHE_PATH",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NLTK_DATA",
        "DS_BUILD_OPS",
    }
)
# Any name ending with one of these names a location, whatever library reads it.
DENIED_ENV_SUFFIXES = ("_HOME", "_DIR", "_DIRS", "_CACHE", "_PATH", "_ROOT", "_CONFIG_FILE")
# Allowed although a prefix above matches: switches and secrets that move nothing.
ALLOWED_ENV_NAMES = frozenset(
    {
        "HF_TOKEN",
        "HF_ENDPOINT",  # where the Hub is (a network address, no file location)
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "HF_HUB_DISABLE_TELEMETRY",
        "HF_HUB_DISABLE_PROGRESS_BARS",
        "HF_HUB_ENABLE_HF_TRANSFER",
        "HF_HUB_DOWNLOAD_TIMEOUT",
        "HF_HUB_ETAG_TIMEOUT",
        "TORCH_DISTRIBUTED_DEBUG",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_NCCL_BLOCKING_WAIT",
        "TORCH_SHOW_CPP_STACKTRACES",
        "TORCH_CPP_LOG_LEVEL",
        "PYTORCH_CUDA_ALLOC_CONF",
    }
)


def env_problem(name: str) -> str | None:
    """Why a job may not set the environment variable `name` (None: it may). Case-insensitive."""
    upper = name.upper()
    if upper in ALLOWED_ENV_NAMES:
        return None
    if upper in DENIED_ENV_NAMES or upper.startswith(DENIED_ENV_PREFIXES) or upper.endswith(DENIED_ENV_SUFFIXES):
        return "reserved: it moves where the trainer or its libraries read or write files, or what code they load (docs/SECURITY.md)"
    return None


def denied_env(environment: Iterable[str]) -> tuple[str, str] | None:
    """(field, why) for the first variable of a job's environment it may not set, located as a 422 names it."""
    for name in environment:
        problem = env_problem(name)
        if problem:
            return f"training_config.environment.{name}", problem
    return None
