"""Path confinement: every path a job names is one its owner may use (docs/SECURITY.md).

Checked at submit (JobService.submit, hence also retry, retraining policies at create/PATCH/fire),
on resume/retry checkpoints, and again at PREPARING, where the result becomes the run spec's
`AccessSet` that the trainer enforces a second time.

The layout of the artifacts bucket:
- `jobs/<job_id>/...`   the job's own prefix, readable by its owner's jobs; written only by that job;
- `data/<principal-key>/...` the principal's data area (read-write);
- `shared/...`, `datasets/...` readable by everyone (datasets/ is where retraining S3 triggers watch);
- anything else: admins only. Other buckets: Settings.bucket_grants. Local files: local mode only,
  under Settings.local_allowed_dirs, never under the state directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from functions import constants
from functions.catalog.address_guard import url_problem
from functions.catalog.areas import DATA_PREFIX, SHARED_PREFIXES
from functions.errors import InvalidRequest, JobNotFound
from functions.service.ports import ArtifactStore, JobRepository
from functions.service.principal import Principal, role_arn_of
from functions.service.tracker_secrets import check_tracking_secrets
from functions.settings import Settings
from schemas.access import EXPORT_MARKER, AccessSet, BucketGrant, PathError, is_s3, normalize, normalize_local, under
from schemas.bounds import denied_env
from schemas.configs import ModelSource
from schemas.job import Job, SubmitJobRequest

MAX_TREE_ENTRIES = 10_000  # files checked under one local directory (symlinks inside it)
MAX_OUTPUT_PROBE = 1000  # objects looked at under an explicit output_path
LATEST_CHECKPOINT = "latest"  # training_config.resume_from_checkpoint: the newest under the job's own checkpoints
_CHECKPOINT_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def principal_key(arn: str) -> str:
    """The principal's data area name, `data/<key>/`, derived from its ARN (docs/SECURITY.md):

    - IAM user  arn:aws:iam::123456789012:user/path/alice          -> 123456789012/user/alice
    - role session arn:aws:sts::123456789012:assumed-role/R/sess    -> 123456789012/role/R/sess
    - role     arn:aws:iam::123456789012:role/path/R                -> 123456789012/role/R
    - federated arn:aws:sts::123456789012:federated-user/bob        -> 123456789012/federated/bob
    - root     arn:aws:iam::123456789012:root                       -> 123456789012/root

    The same identity as job ownership (a job's owner is the caller's ARN): an assumed-role session
    owns its own jobs and its own data area. IAM names hold no '/', so keys never collide.
    """
    parts = arn.split(":", 5)
    if len(parts) != 6 or not parts[4]:
        raise ValueError(f"not an IAM principal ARN: {arn!r}")
    service, account, resource = parts[2], parts[4], parts[5]
    kind, _, rest = resource.partition("/")
    if service == "iam" and kind == "user" and rest:
        segments = ["user", rest.rsplit("/", 1)[-1]]
    elif service == "sts" and kind == "assumed-role" and rest.count("/") >= 1:
        role, session = rest.split("/", 1)
        segments = ["role", role, session.replace("/", "_")]
    elif service == "iam" and kind == "role" and rest:
        segments = ["role", rest.rsplit("/", 1)[-1]]
    elif service == "sts" and kind == "federated-user" and rest:
        segments = ["federated", rest]
    elif resource == "root":
        segments = ["root"]
    else:
        raise ValueError(f"no data area for the principal {arn!r}")
    safe = [s if s not in (".", "..") else s.replace(".", "%2E") for s in [account, *segments]]
    return "/".join(safe)


def _key_or_none(arn: str) -> str | None:
    try:
        return principal_key(arn)
    except ValueError:
        return None


def data_prefix(arn: str) -> str:
    """`data/<principal-key>/`; for an ARN with no key (not an IAM identity) a prefix no key can match."""
    try:
        return f"{DATA_PREFIX}{principal_key(arn)}/"
    except ValueError:
        return f"{DATA_PREFIX}//none/"


@dataclass(frozen=True)
class NamedPath:
    field: str  # as the API names it: data_config.sources[0].path
    value: str
    write: bool = False
    directory: bool = True  # may name a directory (its files are checked too)
    claim: bool = True  # a write place that must hold nothing but this owner's exports (False: a shared store, an MLflow file store)


def named_paths(request: SubmitJobRequest) -> Iterator[NamedPath]:
    """Every path a submission names, with the field that names it. Hub ids and built-in names are not paths."""
    tc, dc, oc = request.training_config, request.data_config, request.output_config
    for i, source in enumerate(dc.sources):
        yield NamedPath(f"data_config.sources[{i}].path", source.path)
    model = tc.base_model
    if model.resolved_source() in (ModelSource.S3, ModelSource.LOCAL):
        yield NamedPath("training_config.base_model.model_id", model.model_id)
    if model.tokenizer_id is not None and _looks_like_path(model.tokenizer_id):
        yield NamedPath("training_config.base_model.tokenizer_id", model.tokenizer_id)
    if dc.preprocess.tokenizer is not None and _looks_like_path(dc.preprocess.tokenizer):
        yield NamedPath("data_config.preprocess.tokenizer", dc.preprocess.tokenizer)
    if tc.resume_from_checkpoint and _is_uri(tc.resume_from_checkpoint):
        yield NamedPath("training_config.resume_from_checkpoint", tc.resume_from_checkpoint)
    if tc.framework.custom_script_path:
        yield NamedPath("training_config.framework.custom_script_path", tc.framework.custom_script_path, directory=False)
    for i, part in enumerate(tc.framework.command or []):
        if _looks_like_path(part):  # a CUSTOM command's script or binary: confined like custom_script_path
            yield NamedPath(f"training_config.framework.command[{i}]", part, directory=False)
    if tc.rlhf is not None and tc.rlhf.reward_model_source() in (ModelSource.S3, ModelSource.LOCAL):
        yield NamedPath("training_config.rlhf.reward_model", str(tc.rlhf.reward_model))
    if tc.rlhf is not None and tc.rlhf.reward_script_path:
        yield NamedPath("training_config.rlhf.reward_script_path", tc.rlhf.reward_script_path, directory=False)
    if oc.output_path:
        yield NamedPath("output_config.output_path", oc.output_path, write=True)
    mlflow = oc.tracking.mlflow if oc.tracking else None
    if mlflow is not None and mlflow.tracking_uri.startswith("file://"):
        # A local MLflow file store: written by the trainer, so confined like any local output.
        yield NamedPath("output_config.tracking.mlflow.tracking_uri", mlflow.tracking_uri, write=True, claim=False)


def _looks_like_path(value: str) -> bool:
    return "://" in value or value.startswith(("/", "./", "../", "~"))


def _is_uri(ref: str) -> bool:
    """resume_from_checkpoint: a URI or path (the trainer reads any ref with a '/' as one) vs a checkpoint id."""
    return "/" in ref or "://" in ref


class PathRules:
    def __init__(self, settings: Settings, repo: JobRepository, store: ArtifactStore) -> None:
        self.settings = settings
        self.repo = repo
        self.store = store
        self.bucket = settings.artifacts_bucket

    # --- submit ----------------------------------------------------------------------------------

    def check_submission(self, request: SubmitJobRequest, owner: Principal) -> list[str]:
        """InvalidRequest naming the first field whose path `owner` may not use; else the normalised reads."""
        reads: list[str] = []
        denied = denied_env(request.training_config.environment)  # the one list (schemas/bounds.py) the trainer reads too
        if denied:
            raise InvalidRequest(*denied)
        ref = request.training_config.resume_from_checkpoint
        if ref and not _is_uri(ref) and not valid_checkpoint_id(ref):
            raise InvalidRequest("training_config.resume_from_checkpoint", f"{ref!r} is neither a checkpoint id (step-000500) nor a URI")
        if ref and not _is_uri(ref) and ref != LATEST_CHECKPOINT:
            # A bare id names a checkpoint of the job itself, and a job being submitted has none: it used to fail
            # at PREPARING. Which of the caller's jobs would it be? The URI says, and is checked as a read below.
            raise InvalidRequest(
                "training_config.resume_from_checkpoint",
                f"{ref!r} is a checkpoint id, and a new job has no checkpoints of its own: give the checkpoint's URI "
                f"(s3://.../jobs/<job_id>/checkpoints/{ref}, as GET /jobs/<job_id>/checkpoints lists it), or retry or resume that job",
            )
        for hub_field, hub_id in self._hub_ids(request):
            if ".." in hub_id.split("/") or hub_id.startswith("~") or "\\" in hub_id:
                raise InvalidRequest(hub_field, f"{hub_id!r} is not a Hugging Face Hub id; a local path must be absolute")
        for named in named_paths(request):
            if named.write:
                self.check_output(named, owner)
            else:
                reads.extend(self.check_read(named, owner))
        check_tracking_secrets(request, owner, _key_or_none(owner.arn), self.settings)
        self._check_tracker_addresses(request)
        return reads

    def _check_tracker_addresses(self, request: SubmitJobRequest) -> None:
        """A tracker server's host is public (loopback and private in local mode): functions/catalog/address_guard.py."""
        tracking = request.output_config.tracking
        if tracking is None:
            return
        servers = []
        if tracking.mlflow is not None and tracking.mlflow.tracking_uri.startswith(("http://", "https://")):
            servers.append(("output_config.tracking.mlflow.tracking_uri", tracking.mlflow.tracking_uri))
        if tracking.wandb is not None and tracking.wandb.base_url:
            servers.append(("output_config.tracking.wandb.base_url", tracking.wandb.base_url))
        for field, url in servers:
            problem = url_problem(url, local_mode=self.settings.local_mode)
            if problem:
                raise InvalidRequest(field, problem)

    @staticmethod
    def _hub_ids(request: SubmitJobRequest) -> Iterator[tuple[str, str]]:
        model = request.training_config.base_model
        if model.resolved_source() == ModelSource.HUB:
            yield "training_config.base_model.model_id", model.model_id
        if model.tokenizer_id is not None and not _looks_like_path(model.tokenizer_id):
            yield "training_config.base_model.tokenizer_id", model.tokenizer_id
        rlhf = request.training_config.rlhf
        if rlhf is not None and rlhf.reward_model is not None and rlhf.reward_model_source() == ModelSource.HUB:
            yield "training_config.rlhf.reward_model", rlhf.reward_model

    def check_read(self, named: NamedPath, owner: Principal) -> list[str]:
        """The normalised path(s) `owner` may read, or InvalidRequest naming the field."""
        normal = self._normalised(named)
        if is_s3(normal):
            self._check_s3_read(named.field, normal, owner)
            return [normal]
        return self._check_local(named, normal, write=False)

    def check_output(self, named: NamedPath, owner: Principal) -> str:
        """An explicit output_path: writable by `owner`, outside every job's prefix, and empty or holding
        an earlier export of a job `owner` owns (never another job's export or another's data)."""
        normal = self._normalised(named)
        if is_s3(normal):
            self._check_s3_write(named.field, normal, owner)
        else:
            self._check_local(named, normal, write=True)
            if named.claim:
                self._check_local_claim(named.field, normal, owner)
        return normal

    def check_checkpoint_uri(self, field: str, uri: str, owner: Principal) -> None:
        """A checkpoint a resume or retry starts from (a URI a trainer reported) must be readable by the owner."""
        self.check_read(NamedPath(field, uri), owner)

    def _normalised(self, named: NamedPath) -> str:
        try:
            return normalize(named.value)
        except PathError as exc:
            raise InvalidRequest(named.field, str(exc)) from exc

    # --- S3 --------------------------------------------------------------------------------------

    def _check_s3_read(self, field: str, uri: str, owner: Principal) -> None:
        if owner.is_admin:
            return
        bucket, key = _split(uri)
        if bucket == self.bucket:
            if key.startswith(f"{constants.JOBS_PREFIX}/"):
                self._owned_job(field, uri, key, owner)
                return
            if _key_under(key, data_prefix(owner.arn)) or any(_key_under(key, p) for p in SHARED_PREFIXES):
                return
            raise InvalidRequest(
                field,
                f"{uri} is outside what you may read in the artifacts bucket: your jobs' prefixes (jobs/<job_id>/), "
                f"your data area s3://{self.bucket}/{data_prefix(owner.arn)} and the shared areas ({', '.join(SHARED_PREFIXES)})",
            )
        if any(under(uri, g.uri) for g in self._grants(owner)):
            return
        raise InvalidRequest(field, f"the bucket or prefix of {uri} is not one this deployment allows you to use (bucket_grants)")

    def _check_s3_write(self, field: str, uri: str, owner: Principal) -> None:
        bucket, key = _split(uri)
        if bucket == self.bucket:
            if not key or _key_under(key, f"{constants.JOBS_PREFIX}/"):
                raise InvalidRequest(
                    field,
                    f"{uri} is inside the jobs/ prefixes, which only their own jobs write; leave output_path unset "
                    "to export into this job's own prefix, or name a place in your data area",
                )
            if not owner.is_admin and not _key_under(key, data_prefix(owner.arn)):
                raise InvalidRequest(
                    field, f"{uri} is not writable by you: exports go to your data area s3://{self.bucket}/{data_prefix(owner.arn)}"
                )
            self._check_s3_claim(field, key, owner)
            return
        if owner.is_admin:
            return  # the trainer still refuses to overwrite another principal's export (marker)
        if any(g.access == "read-write" and under(uri, g.uri) for g in self._grants(owner)):
            return
        raise InvalidRequest(field, f"{uri} is not in a bucket or prefix this deployment lets you write (bucket_grants, read-write)")

    def _check_s3_claim(self, field: str, key: str, owner: Principal) -> None:
        """The artifacts bucket: no export of another principal above or at output_path, no foreign objects in it."""
        prefix = key.rstrip("/") + "/"
        segments = prefix.rstrip("/").split("/")
        for depth in range(1, len(segments)):
            marker_owner = self._marker_owner("/".join(segments[:depth]) + "/")
            if marker_owner is not None and marker_owner != owner.arn:
                raise InvalidRequest(field, f"s3://{self.bucket}/{key} lies inside another principal's export")
        found = self.store.first_keys(prefix, MAX_OUTPUT_PROBE)
        if found and self._marker_owner(prefix) != owner.arn:
            raise InvalidRequest(
                field, f"s3://{self.bucket}/{key} already holds objects that are not an export of a job of yours; name an empty place"
            )

    def _marker_owner(self, prefix: str) -> str | None:
        text = "\n".join(self.store.read_lines(prefix + EXPORT_MARKER))
        if not text:
            return None
        try:
            return str(json.loads(text).get("owner"))
        except (ValueError, AttributeError):
            return "?"  # unreadable: not provably ours

    def _owned_job(self, field: str, uri: str, key: str, owner: Principal) -> None:
        job_id = key.split("/", 2)[1] if key.count("/") >= 1 else ""
        try:
            job = self.repo.get(job_id) if job_id else None
        except JobNotFound:
            job = None
        if job is None or not owner.can_see(job):
            raise InvalidRequest(field, f"{uri} is not under a job of yours (jobs/<job_id>/ belongs to that job's owner)")

    def _grants(self, owner: Principal) -> list[BucketGrant]:
        role = role_arn_of(owner.arn)
        return [g for g in self.settings.bucket_grants if g.applies_to(owner.arn, role)]

    # --- local files -----------------------------------------------------------------------------

    def _check_local(self, named: NamedPath, normal: str, *, write: bool) -> list[str]:
        if not self.settings.local_mode:
            raise InvalidRequest(named.field, "local files can only be named in local mode; use an s3:// URI")
        self._check_local_one(named.field, named.value, normal)
        checked = [normal]
        if not write and named.directory and os.path.isdir(normal):
            for n, path in enumerate(_walk(normal)):
                if n >= MAX_TREE_ENTRIES:
                    raise InvalidRequest(named.field, f"{named.value} holds more than {MAX_TREE_ENTRIES} entries")
                real = os.path.realpath(path)
                if real != path:
                    self._check_local_one(named.field, f"{path} (a link to {real})", real)
        return checked

    def _check_local_one(self, field: str, shown: str, real: str) -> None:
        state = self.state_dir()
        if state is not None and under(real, state):
            raise InvalidRequest(field, f"{shown} is inside local mode's state directory, which no job may name")
        allowed = self.allowed_dirs()
        if not any(under(real, d) for d in allowed):
            where = ", ".join(allowed) or "none: start local mode with `trainplane up --allow-dir DIR`"
            raise InvalidRequest(field, f"{shown} resolves to {real}, outside the directories local mode allows (allowed: {where})")

    def _check_local_claim(self, field: str, real: str, owner: Principal) -> None:
        path = Path(real)
        for ancestor in path.parents:
            marker = _local_marker_owner(ancestor)
            if marker is not None and marker != owner.arn:
                raise InvalidRequest(field, f"{real} lies inside another principal's export")
        if path.is_file():
            raise InvalidRequest(field, f"{real} is a file; output_path names a directory")
        if path.is_dir() and any(path.iterdir()) and _local_marker_owner(path) != owner.arn:
            raise InvalidRequest(field, f"{real} already holds files that are not an export of a job of yours; name an empty directory")

    def state_dir(self) -> str | None:
        return os.path.realpath(self.settings.local_state_dir) if self.settings.local_state_dir else None

    def allowed_dirs(self) -> list[str]:
        dirs = []
        for d in self.settings.local_allowed_dirs:
            try:
                dirs.append(normalize_local(d))
            except PathError:
                continue  # a relative --allow-dir is made absolute by `trainplane up`; skip any other
        return dirs

    # --- the run spec's access set ---------------------------------------------------------------

    def access_for(self, job: Job, extra_reads: Sequence[tuple[str, str]] = ()) -> AccessSet:
        """The AccessSet written into the run spec: the job's paths checked again (as its owner, now),
        plus the owner's standing areas. InvalidRequest when a path is no longer allowed."""
        owner = Principal.from_arn(job.owner, self.settings.admin_arns)
        own = f"s3://{self.bucket}/{constants.job_prefix(job.job_id)}"
        reads = [own]
        writes = [own]
        request = job.submit_request()
        for named in named_paths(request):
            if named.write:
                normal = self._normalised(named)
                if is_s3(normal):
                    self._check_s3_write_area(named.field, normal, owner)
                else:
                    self._check_local(named, normal, write=True)
                writes.append(normal)
            else:
                reads.extend(self.check_read(named, owner))
        for field, uri in extra_reads:
            reads.extend(self.check_read(NamedPath(field, uri), owner))
        if not owner.is_admin:
            reads.append(f"s3://{self.bucket}/{data_prefix(owner.arn)}")
            reads += [f"s3://{self.bucket}/{p}" for p in SHARED_PREFIXES]
            reads += [g.uri for g in self._grants(owner)]
        if self.settings.local_mode:
            reads += self.allowed_dirs()
        state = self.state_dir()
        return AccessSet(
            owner=job.owner,
            read=list(dict.fromkeys(reads)),
            write=list(dict.fromkeys(writes)),
            deny=[state] if state else [],
            read_any_s3=owner.is_admin,
            secrets=check_tracking_secrets(request, owner, _key_or_none(owner.arn), self.settings),
        )

    def _check_s3_write_area(self, field: str, uri: str, owner: Principal) -> None:
        """The area part of the output rule only: at run time the place holds this job's own export."""
        bucket, key = _split(uri)
        if bucket == self.bucket and (not key or _key_under(key, f"{constants.JOBS_PREFIX}/")):
            raise InvalidRequest(field, f"{uri} is inside the jobs/ prefixes, which only their own jobs write")
        if bucket == self.bucket and not owner.is_admin and not _key_under(key, data_prefix(owner.arn)):
            raise InvalidRequest(field, f"{uri} is not writable by you")
        writable = any(g.access == "read-write" and under(uri, g.uri) for g in self._grants(owner))
        if bucket != self.bucket and not owner.is_admin and not writable:
            raise InvalidRequest(field, f"{uri} is not in a bucket or prefix this deployment lets you write")


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


def _key_under(key: str, prefix: str) -> bool:
    """`key` equals the prefix (without its '/') or lies below it."""
    return key == prefix.rstrip("/") or key.startswith(prefix)


def valid_checkpoint_id(ref: str) -> bool:
    """A checkpoint id is one path segment (step-000500), never '.', '..' or something with a '/'."""
    return bool(ref) and ref not in (".", "..") and all(c in _CHECKPOINT_ID_CHARS for c in ref)


def _walk(root: str) -> Iterator[str]:
    """Every entry under `root`, each yielded before anything under it. A linked directory is yielded (so the
    caller checks where it points, and stops there if that is refused) and then walked too: an allowed
    directory a link reaches may hold a link out. Each real directory is walked once (link cycles end)."""
    seen: set[str] = set()
    pending = [root]
    while pending:
        directory = pending.pop()
        real = os.path.realpath(directory)
        if real in seen:
            continue
        seen.add(real)
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            yield entry.path
            if entry.is_dir(follow_symlinks=True):
                pending.append(entry.path)


def _local_marker_owner(directory: Path) -> str | None:
    marker = directory / EXPORT_MARKER
    try:
        return str(json.loads(marker.read_text()).get("owner"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError):
        return "?"
