"""Checkpoints: save (optionally in the background), manifest written last, upload, retention, resume.

A checkpoint directory `step-NNNNNN/` holds
  model.safetensors | adapter_model.safetensors   the weights (only the adapter for LoRA/QLoRA)
  optimizer.pt, scheduler.pt, rng.pt               torch.save'd state (loaded back with weights_only=True)
  trainer_state.json                               step, epoch, data position, Hyper, best-metric bookkeeping
  manifest.json                                    schemas/checkpoint.py CheckpointManifest, WRITTEN LAST
Uploads follow the same order (manifest last), and deletions the reverse (manifest first), so a
directory without a manifest is an incomplete checkpoint at every moment, and readers skip it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from schemas.checkpoint import MANIFEST_NAME, CheckpointManifest, ManifestFile, best_checkpoint, checkpoint_id_for, retained, step_of
from schemas.configs import CheckpointConfig
from trainer import storage
from trainer.events import log

MODEL_FILE = "model.safetensors"
ADAPTER_FILE = "adapter_model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"
RNG_FILE = "rng.pt"
STATE_FILE = "trainer_state.json"


@dataclass
class Snapshot:
    """Everything a checkpoint holds, already copied off the training tensors (safe to write later)."""

    step: int
    epoch: float
    model_tensors: dict[str, torch.Tensor]
    is_adapter: bool
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: dict[str, Any]
    trainer_state: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)
    extra_files: dict[str, bytes] = field(default_factory=dict)  # e.g. config.json / adapter_config.json


@dataclass
class Loaded:
    checkpoint_id: str
    uri: str
    local_dir: Path
    manifest: CheckpointManifest

    def model_tensors(self) -> dict[str, torch.Tensor]:
        name = ADAPTER_FILE if self.manifest.is_adapter else MODEL_FILE
        return load_file(str(self.local_dir / name))

    def torch_file(self, name: str) -> Any:
        return torch.load(self.local_dir / name, map_location="cpu", weights_only=True)

    def trainer_state(self) -> dict[str, Any]:
        return json.loads((self.local_dir / STATE_FILE).read_text(encoding="utf-8"))


def to_cpu(obj: Any) -> Any:
    """Deep copy with every tensor cloned onto the CPU: training goes on mutating the originals."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True).contiguous()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_cpu(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(to_cpu(v) for v in obj)
    return obj


class HostCopier:
    """Copies nested state (dicts, lists, tensors) to host memory for a background write.

    CUDA tensors go into pinned buffers kept from one checkpoint to the next (a pinned copy runs at
    PCIe speed, a pageable one at a fraction of it), all queued without blocking and waited for once:
    that copy is the whole training stall of an asynchronous checkpoint. A buffer is reused only after
    the previous checkpoint's write has finished (CheckpointManager.wait before the next snapshot).
    CPU tensors are cloned: training goes on changing the originals in place.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}
        self._pending_cuda = False

    def __call__(self, obj: Any, key: str = "") -> Any:
        if isinstance(obj, torch.Tensor):
            tensor = obj.detach()
            if tensor.device.type == "cuda":
                buffer = self._buffers.get(key)
                if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
                    buffer = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
                    self._buffers[key] = buffer
                buffer.copy_(tensor, non_blocking=True)
                self._pending_cuda = True
                return buffer
            return tensor.to("cpu", copy=True).contiguous()
        if isinstance(obj, dict):
            return {k: self(v, f"{key}/{k}") for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            copied = [self(v, f"{key}/{i}") for i, v in enumerate(obj)]
            return copied if isinstance(obj, list) else tuple(copied)
        return obj

    def finish(self) -> None:
        """Wait for the queued device-to-host copies (before training changes the sources)."""
        if self._pending_cuda:
            torch.cuda.synchronize()
            self._pending_cuda = False


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


class CheckpointManager:
    """Writes this run's checkpoints under `checkpoint_uri` and finds the one to resume from."""

    def __init__(
        self,
        checkpoint_uri: str,
        staging_dir: Path,
        config: CheckpointConfig,
        *,
        job_id: str | None,
        attempt: int,
        training_type: str,
        on_saved: Callable[[CheckpointManifest, str], None] | None = None,
        asynchronous: bool = True,
    ) -> None:
        self.checkpoint_uri = checkpoint_uri.rstrip("/")
        # A local checkpoint_uri is written in place; an s3:// one is staged on local disk first.
        self.remote = storage.is_s3(self.checkpoint_uri)
        self.staging_dir = staging_dir if self.remote else storage.local_path(self.checkpoint_uri)
        self.config = config
        self.job_id = job_id
        self.attempt = attempt
        self.training_type = training_type
        self.on_saved = on_saved
        self.asynchronous = asynchronous
        self.resumed_from: str | None = None  # a checkpoint id under checkpoint_uri that retention must keep
        self.last_saved: CheckpointManifest | None = None
        self.last_saved_uri: str | None = None
        self.last_save_seconds = 0.0  # wall time of the last write+upload, to budget a stop
        self.last_stall_seconds = 0.0  # time the training loop waited for the last save
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # --- save -------------------------------------------------------------------------------
    def save(self, snapshot: Snapshot, *, wait: bool = False) -> None:
        """Write a snapshot; in the background unless asynchronous is off or `wait` is set."""
        start = time.perf_counter()
        self.wait()  # one write at a time: the next snapshot may reuse pinned buffers, retention reads manifests
        if self.asynchronous and not wait:
            self._thread = threading.Thread(target=self._write_guarded, args=(snapshot,), name=f"checkpoint-{snapshot.step}", daemon=True)
            self._thread.start()
        else:
            self._write(snapshot)
        self.last_stall_seconds = time.perf_counter() - start

    def wait(self) -> None:
        """Block until the background write (if any) is done; re-raise its error here, in the loop."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _write_guarded(self, snapshot: Snapshot) -> None:
        try:
            self._write(snapshot)
        except BaseException as exc:
            self._error = exc

    def _write(self, snapshot: Snapshot) -> None:
        started = time.perf_counter()
        checkpoint_id = checkpoint_id_for(snapshot.step)
        local = self.staging_dir / checkpoint_id
        if local.exists():
            shutil.rmtree(local)  # a half-written leftover of a run that died mid-save
        local.mkdir(parents=True)
        save_file(snapshot.model_tensors, str(local / (ADAPTER_FILE if snapshot.is_adapter else MODEL_FILE)))
        torch.save(snapshot.optimizer, local / OPTIMIZER_FILE)
        torch.save(snapshot.scheduler, local / SCHEDULER_FILE)
        torch.save(snapshot.rng, local / RNG_FILE)
        (local / STATE_FILE).write_text(json.dumps(snapshot.trainer_state, indent=1, sort_keys=True), encoding="utf-8")
        for name, data in snapshot.extra_files.items():
            (local / name).write_bytes(data)
        files = [
            ManifestFile(path=path.relative_to(local).as_posix(), size=path.stat().st_size, sha256=sha256_of(path))
            for path in sorted(local.rglob("*"))
            if path.is_file()
        ]
        manifest = CheckpointManifest(
            checkpoint_id=checkpoint_id,
            job_id=self.job_id,
            attempt=self.attempt,
            step=snapshot.step,
            epoch=round(snapshot.epoch, 6),
            metrics=snapshot.metrics,
            files=files,
            training_type=self.training_type,
            is_adapter=snapshot.is_adapter,
            resumed_from=self.resumed_from,
            created_at=datetime.now(UTC),
        )
        (local / MANIFEST_NAME).write_text(manifest.model_dump_json(indent=1), encoding="utf-8")
        uri = storage.join(self.checkpoint_uri, checkpoint_id)
        if self.remote:
            storage.upload_dir(local, uri, last=MANIFEST_NAME)
        self.last_saved, self.last_saved_uri = manifest, uri
        self.last_save_seconds = time.perf_counter() - started
        if self.on_saved is not None:
            self.on_saved(manifest, uri)
        self.apply_retention()

    # --- listing, retention ----------------------------------------------------------------
    def manifests(self, prefix_uri: str | None = None) -> list[tuple[CheckpointManifest, str]]:
        """(manifest, uri) of every checkpoint under a prefix that has a readable manifest, by step."""
        prefix = (prefix_uri or self.checkpoint_uri).rstrip("/")
        found: list[tuple[CheckpointManifest, str]] = []
        for name in storage.list_children(prefix):
            try:
                step_of(name)
            except ValueError:
                continue
            uri = storage.join(prefix, name)
            manifest = read_manifest(uri)
            if manifest is not None:
                found.append((manifest, uri))
        return sorted(found, key=lambda item: item[0].step)

    def best(self, manifests: list[tuple[CheckpointManifest, str]]) -> tuple[CheckpointManifest, str] | None:
        chosen = best_checkpoint([m for m, _ in manifests], self.config.metric_for_best_model, self.config.greater_is_better)
        return next((item for item in manifests if item[0] is chosen), None) if chosen is not None else None

    def apply_retention(self) -> list[str]:
        """Delete all but the newest save_total_limit checkpoints, never the best or the resumed-from one."""
        limit = self.config.save_total_limit
        if limit is None:
            return []
        manifests = self.manifests()
        keep = retained(
            [m for m, _ in manifests],
            save_total_limit=limit,
            metric=self.config.metric_for_best_model,
            greater_is_better=self.config.greater_is_better,
            resumed_from=self.resumed_from,
        )
        deleted = []
        for manifest, uri in manifests:
            if manifest.checkpoint_id in keep:
                continue
            storage.delete_prefix(uri, first=MANIFEST_NAME)
            if self.remote:
                shutil.rmtree(self.staging_dir / manifest.checkpoint_id, ignore_errors=True)
            deleted.append(manifest.checkpoint_id)
        if deleted:
            log(f"retention (save_total_limit={limit}): deleted {', '.join(deleted)}")
        return deleted

    # --- resume ------------------------------------------------------------------------------
    def find_resume(self, resume_from: str | None) -> Loaded | None:
        """The checkpoint to resume from, verified; bad ones are skipped with a warning.

        resume_from: a checkpoint directory URI (possibly another job's, for a retry), or None for the
        latest (or, with resume_from_best, the best) under this run's checkpoint_uri. When the named one
        is bad, the previous good one beside it is used.
        """
        if resume_from:
            resume_from = resume_from.rstrip("/")
            parent, _, name = resume_from.rpartition("/")
            try:
                wanted = step_of(name)
            except ValueError:
                wanted = None
            candidates = [(m, uri) for m, uri in self.manifests(parent) if wanted is None or m.step <= wanted] if parent else []
            candidates.sort(key=lambda item: (item[1] == resume_from, item[0].step), reverse=True)
            if not any(uri == resume_from for _, uri in candidates):
                log(f"WARNING: checkpoint {resume_from} has no readable manifest; looking for an earlier good one")
        else:
            candidates = list(reversed(self.manifests()))
            best = self.best(candidates) if self.config.resume_from_best else None
            if best is not None:
                candidates.remove(best)
                candidates.insert(0, best)
        for manifest, uri in candidates:
            loaded = self._verify(manifest, uri)
            if loaded is not None:
                if storage.join(self.checkpoint_uri, loaded.checkpoint_id) == uri:
                    self.resumed_from = loaded.checkpoint_id
                return loaded
        return None

    def _verify(self, manifest: CheckpointManifest, uri: str) -> Loaded | None:
        local = self.staging_dir / manifest.checkpoint_id if storage.is_s3(uri) else storage.local_path(uri)
        for entry in manifest.files:
            path = local / entry.path
            if storage.is_s3(uri) and not (path.is_file() and path.stat().st_size == entry.size and sha256_of(path) == entry.sha256):
                try:
                    storage.download_file(storage.join(uri, entry.path), path)
                except Exception as exc:
                    log(f"WARNING: skipping checkpoint {uri}: {entry.path} not downloadable ({type(exc).__name__}: {exc})")
                    return None
            if not path.is_file():
                log(f"WARNING: skipping checkpoint {uri}: {entry.path} is missing")
                return None
            if path.stat().st_size != entry.size or sha256_of(path) != entry.sha256:
                log(f"WARNING: skipping checkpoint {uri}: {entry.path} does not match its manifest sha256/size")
                return None
        return Loaded(checkpoint_id=manifest.checkpoint_id, uri=uri, local_dir=local, manifest=manifest)


def read_manifest(checkpoint_uri: str) -> CheckpointManifest | None:
    manifest_uri = storage.join(checkpoint_uri, MANIFEST_NAME)
    try:
        text = storage.read_text(manifest_uri)
    except Exception:  # FileNotFoundError / NoSuchKey: an incomplete checkpoint
        log(f"WARNING: skipping {checkpoint_uri}: no {MANIFEST_NAME}")
        return None
    try:
        return CheckpointManifest.model_validate_json(text)
    except ValueError as exc:
        log(f"WARNING: skipping {checkpoint_uri}: unreadable {MANIFEST_NAME} ({exc})")
        return None


# --- RNG state: python, numpy, torch, cuda (what dropout and any sampling draw from) -------------
def capture_rng() -> dict[str, Any]:
    import random

    import numpy as np

    version, internal, gauss = random.getstate()
    legacy = np.random.get_state(legacy=True)
    assert isinstance(legacy, tuple)  # legacy=True: (kind, keys, pos, has_gauss, cached)
    kind, keys, pos, has_gauss, cached = legacy
    state: dict[str, Any] = {
        # Plain tensors and numbers only: loaded back with torch.load(weights_only=True).
        "python": {"version": version, "state": torch.tensor(internal, dtype=torch.int64), "gauss": gauss},
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    import random

    import numpy as np

    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["state"].tolist()), py["gauss"]))
    npst = state["numpy"]
    np.random.set_state((npst["kind"], npst["keys"].numpy().astype(np.uint32), npst["pos"], npst["has_gauss"], npst["cached"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])
