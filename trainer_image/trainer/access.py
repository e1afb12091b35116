"""The trainer's own path check (docs/SECURITY.md): every path of the run spec inside the AccessSet the
control plane wrote into it, before anything is read or written.

This is the second enforcement: it holds even when the control plane's submit check was bypassed or
got something wrong. Local paths are resolved where they really point (`..`, symlinks), and every
entry under a local directory the job reads is checked too, so a link planted in a data or model
directory cannot reach outside. Exports never overwrite another principal's export (EXPORT_MARKER).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from schemas.access import EXPORT_MARKER, AccessSet, PathError, is_local, normalize
from schemas.bounds import denied_env
from schemas.configs import ModelSource
from schemas.trainer import RunSpec
from trainer import storage
from trainer.failures import UserError

MAX_TREE_ENTRIES = 100_000


@dataclass(frozen=True)
class SpecPath:
    field: str
    value: str
    write: bool = False


def spec_paths(spec: RunSpec) -> Iterator[SpecPath]:
    """Every path the run spec makes the trainer read or write, with the field that names it."""
    tc, dc, oc = spec.training_config, spec.data_config, spec.output_config
    for i, source in enumerate(dc.sources):
        yield SpecPath(f"data_config.sources[{i}].path", source.path)
    model = tc.base_model
    model_source = model.resolved_source()
    if model_source in (ModelSource.S3, ModelSource.LOCAL) or (model_source == ModelSource.HUB and _exists_locally(model.model_id)):
        # A hub id that names an existing directory would be loaded from disk by transformers.
        yield SpecPath("training_config.base_model.model_id", _as_local(model.model_id, model_source))
    tokenizer = model.tokenizer_id
    if tokenizer is not None and tokenizer != "byte" and (_path_like(tokenizer) or _exists_locally(tokenizer)):
        yield SpecPath("training_config.base_model.tokenizer_id", _as_local(tokenizer, None))
    if dc.preprocess.tokenizer is not None and (_path_like(dc.preprocess.tokenizer) or _exists_locally(dc.preprocess.tokenizer)):
        yield SpecPath("data_config.preprocess.tokenizer", _as_local(dc.preprocess.tokenizer, None))
    ref = tc.resume_from_checkpoint
    if ref and ref != "latest":  # "latest": the newest under checkpoint_uri, checked below
        yield SpecPath("training_config.resume_from_checkpoint", ref if "/" in ref else storage.join(spec.checkpoint_uri, ref))
    if spec.resume_from:
        yield SpecPath("resume_from", spec.resume_from)
    if tc.framework.custom_script_path:
        yield SpecPath("training_config.framework.custom_script_path", tc.framework.custom_script_path)
    for i, part in enumerate(tc.framework.command or []):
        if _path_like(part):  # a CUSTOM command's script or binary is confined like a custom_script_path
            yield SpecPath(f"training_config.framework.command[{i}]", _as_local(part, None))
    rlhf = tc.rlhf
    if rlhf is not None and rlhf.reward_model is not None:
        reward_source = rlhf.reward_model_source()
        on_disk = reward_source == ModelSource.HUB and _exists_locally(rlhf.reward_model)
        if reward_source in (ModelSource.S3, ModelSource.LOCAL) or on_disk:
            yield SpecPath("training_config.rlhf.reward_model", _as_local(rlhf.reward_model, reward_source))
    if rlhf is not None and rlhf.reward_script_path:
        yield SpecPath("training_config.rlhf.reward_script_path", rlhf.reward_script_path)
    yield SpecPath("checkpoint_uri", spec.checkpoint_uri, write=True)
    if spec.metrics_uri:
        yield SpecPath("metrics_uri", spec.metrics_uri, write=True)
    if oc.output_path:
        yield SpecPath("output_config.output_path", oc.output_path, write=True)
    elif spec.output_uri:
        yield SpecPath("output_uri", spec.output_uri, write=True)
    tracking = spec.tracking
    if tracking is not None:
        mlflow = tracking.config.mlflow
        if mlflow is not None and mlflow.tracking_uri.startswith("file://"):
            yield SpecPath("output_config.tracking.mlflow.tracking_uri", mlflow.tracking_uri, write=True)
        if tracking.tensorboard_uri:
            yield SpecPath("tracking.tensorboard_uri", tracking.tensorboard_uri, write=True)
        if tracking.wandb_uri:
            yield SpecPath("tracking.wandb_uri", tracking.wandb_uri, write=True)


def _path_like(value: str) -> bool:
    return "://" in value or value.startswith(("/", "./", "../", "~"))


def _exists_locally(value: str) -> bool:
    return "://" not in value and os.path.exists(os.path.expanduser(value))


def _as_local(value: str, source: ModelSource | None) -> str:
    """A relative or ~ path as the trainer would open it (from its working directory)."""
    if "://" in value:
        return value
    if source not in (None, ModelSource.LOCAL, ModelSource.HUB):
        return value
    return os.path.abspath(os.path.expanduser(value))


def enforce(spec: RunSpec) -> None:
    """UserError naming the field of the first path outside spec.access; a spec without access (a run
    outside trainplane, by hand) is not confined, but its environment is checked all the same."""
    denied = denied_env(spec.training_config.environment)
    if denied:
        raise UserError(": ".join(denied))
    access = spec.access
    if access is None:
        return
    for path in spec_paths(spec):
        allowed = access.can_write(path.value) if path.write else access.can_read(path.value)
        if not allowed:
            verb = "write" if path.write else "read"
            raise UserError(f"{path.field}: this job may not {verb} {path.value} (outside the paths the control plane allowed it)")
        if is_local(path.value):
            _check_tree(path, access)
    wandb = spec.tracking.config.wandb if spec.tracking is not None else None
    if wandb is not None and wandb.api_key_secret_arn and not access.can_read_secret(wandb.api_key_secret_arn):
        # The same rule as the control plane's (functions/service/tracker_secrets.py): its own secrets only.
        raise UserError(
            f"output_config.tracking.wandb.api_key_secret_arn: this job may not read the secret {wandb.api_key_secret_arn} "
            "(outside the secrets the control plane allowed it)"
        )


def _check_tree(path: SpecPath, access: AccessSet) -> None:
    """Every entry under a local directory the job reads (writes) resolves inside what it may read (write):
    a link planted there, or a denied directory inside it (local mode's state), refuses the run. A link to
    a directory is walked too (once: a link cycle ends), since the job reads or writes through it."""
    allowed = access.can_write if path.write else access.can_read
    verb = "write" if path.write else "read"
    try:
        root = normalize(path.value)
    except PathError as exc:
        raise UserError(f"{path.field}: {exc}") from exc
    pending, walked, directories = [root], set(), 0
    while pending:
        top = pending.pop()
        if top in walked or not os.path.isdir(top):
            continue
        walked.add(top)
        for directory, dirs, files in os.walk(top, followlinks=False):
            directories += 1
            if directories > MAX_TREE_ENTRIES:
                raise UserError(f"{path.field}: {path.value} holds too many directories to check")
            for name in [*dirs, *files]:
                entry = os.path.join(directory, name)
                real = os.path.realpath(entry)
                link = os.path.islink(entry)
                # A link must resolve inside what the job may read (write); a plain entry is checked in a place
                # it reads (a denied directory inside a data dir, local mode's state): in a place it writes, the
                # trainer's own files (checkpoints it wrote, a resumed attempt's) are below the place it may write.
                if (link or not path.write) and not allowed(real):
                    how = f"links to {real}, which" if link else "is a place"
                    raise UserError(f"{path.field}: {entry} {how} this job may not {verb}")
                if link:
                    pending.append(real)


def own_prefix(spec: RunSpec) -> str:
    """The job's own prefix (the parent of its checkpoint_uri): jobs/<job_id>. A deepfinery layout keeps
    its checkpoints in the run's root, so there it is the parent of metrics_uri (jobs/<job_id>/metrics.jsonl)."""
    if spec.layout_uri and spec.metrics_uri:
        return spec.metrics_uri.rstrip("/").rsplit("/", 1)[0]
    return spec.checkpoint_uri.rstrip("/").rsplit("/", 1)[0]


def claim_export(destination: str, spec: RunSpec) -> None:
    """Before an export is copied to `destination`: refuse to overwrite another principal's export or any
    foreign objects (outside the job's own prefix), then write the marker that claims the place: a
    create-only write when there was none, so of two exports racing for an empty place exactly one claims it."""
    access = spec.access
    if access is None:
        return
    if not access.can_write(destination):
        raise UserError(f"output: this job may not write {destination}")
    marker_uri = storage.join(destination, EXPORT_MARKER)
    owner = _marker_owner(marker_uri)
    inside_own = storage.join(destination).startswith(own_prefix(spec) + "/")
    if owner is not None and owner != access.owner:
        raise UserError(f"output: {destination} holds another principal's export; it is not overwritten")
    if owner is None and not inside_own and any(True for _ in storage.list_files(destination)):
        raise UserError(f"output: {destination} already holds objects that are not an export of this principal; name an empty place")
    document = json.dumps({"owner": access.owner, "job_id": spec.job_id, "attempt": spec.attempt, "at": datetime.now(UTC).isoformat()})
    if owner is None and not storage.create_text(marker_uri, document):
        # Another export claimed the place between the check above and this write (the claim is a
        # create-only write, so exactly one of two racing exports gets it): only its owner goes on.
        if _marker_owner(marker_uri) != access.owner:
            raise UserError(f"output: {destination} was just claimed by another principal's export; it is not overwritten")
        storage.write_text(marker_uri, document)
    elif owner is not None:
        storage.write_text(marker_uri, document)  # this principal's own export, claimed before: refreshed


def _marker_owner(uri: str) -> str | None:
    try:
        text = storage.read_text(uri)
    except FileNotFoundError:
        return None
    except Exception as exc:
        if type(exc).__name__ in {"NoSuchKey", "ClientError"}:
            return None
        raise
    try:
        return str(json.loads(text).get("owner"))
    except (ValueError, AttributeError):
        return "?"
