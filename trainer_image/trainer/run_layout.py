"""seeds/004's run layout (output_config.layout 'deepfinery'), kept by the trainer beside our own checkpoints.

    <root>/                       = <checkpoint_base_uri>/<run_id>/framework=<f> (RunSpec.layout_uri)
      checkpoints/step-000004/    our checkpoint (files, manifest.json last): checkpoint_uri is here
      checkpoints/step-000004.json  its entry: {step, checkpoint_id, uri, job_id, attempt, metrics, ...}
      logs/.keep, logs/metrics.jsonl
      config/run.json             the run spec this attempt ran with
      model/                      the exported model

An entry is written after its checkpoint's manifest, and entries whose checkpoint retention deleted
are removed, so every entry names a checkpoint that exists. Resuming from "the highest step found
there" is the trainer's own resume from the newest checkpoint under checkpoint_uri (verified against
its manifest); a run that was not asked to resume refuses to start over checkpoints already there.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

from schemas.checkpoint import MANIFEST_NAME, CheckpointManifest
from schemas.trainer import RunSpec
from trainer import storage
from trainer.access import claim_export
from trainer.events import log
from trainer.failures import UserError

ENTRY = re.compile(r"^step-(\d{6,})\.json$")


class RunLayout:
    def __init__(self, spec: RunSpec) -> None:
        assert spec.layout_uri is not None
        self.spec = spec
        self.root = spec.layout_uri.rstrip("/")
        self.checkpoints = spec.checkpoint_uri.rstrip("/")

    @classmethod
    def of(cls, spec: RunSpec) -> RunLayout | None:
        return cls(spec) if spec.layout_uri else None

    def prepare(self) -> None:
        """Before training: claim the run's root for the job's owner (the export marker: never another
        principal's run, and the owner's next run of it passes the submit check), refuse to overwrite an
        earlier run's checkpoints unasked, then write config/ and logs/."""
        claim_export(self.root, self.spec)
        existing = self.saved_steps()
        if existing and not self.spec.resume_latest:
            raise UserError(
                f"{self.checkpoints} already holds checkpoints up to step {max(existing)} of an earlier run; "
                "resume them (resume_from_checkpoint: true) or use a new run_id"
            )
        storage.write_text(f"{self.root}/config/run.json", self.spec.model_dump_json(indent=1))
        storage.write_bytes(f"{self.root}/logs/.keep", b"")
        if existing:
            log(f"run layout {self.root}: resuming from the highest of {len(existing)} checkpoint(s), step {max(existing)}")

    def saved_steps(self) -> list[int]:
        """Steps of the checkpoints under checkpoints/ that have a manifest."""
        steps = []
        for name in storage.list_children(self.checkpoints):
            if name.startswith("step-") and storage.exists(f"{self.checkpoints}/{name}/{MANIFEST_NAME}"):
                steps.append(int(name.removeprefix("step-")))
        return sorted(steps)

    def on_saved(self, manifest: CheckpointManifest, uri: str) -> None:
        """A checkpoint's manifest is written: its entry beside it, and entries of deleted ones go."""
        entry = {
            "step": manifest.step,
            "checkpoint_id": manifest.checkpoint_id,
            "uri": uri,
            "job_id": manifest.job_id,
            "attempt": manifest.attempt,
            "epoch": manifest.epoch,
            "metrics": manifest.metrics,
            "framework": self.root.rsplit("framework=", 1)[-1] if "framework=" in self.root else None,
            "created_at": (manifest.created_at or datetime.now(UTC)).isoformat(),
        }
        storage.write_text(f"{self.checkpoints}/{manifest.checkpoint_id}.json", json.dumps(entry, indent=1, sort_keys=True))
        self.prune_entries()

    def prune_entries(self) -> None:
        saved = set(self.saved_steps())
        for name in storage.list_files(self.checkpoints):
            match = ENTRY.match(name)
            if match and "/" not in name and int(match.group(1)) not in saved:
                storage.delete_file(f"{self.checkpoints}/{name}")

    def finish(self, metrics_file: Path | None) -> None:
        """At the end of an attempt: entries match the checkpoints retention kept; the metrics go to logs/."""
        self.prune_entries()
        if metrics_file is not None and metrics_file.is_file():
            storage.upload_file(metrics_file, f"{self.root}/logs/metrics.jsonl")
