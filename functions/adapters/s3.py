"""The ArtifactStore port on S3: the artifacts bucket, one prefix per job (constants.job_prefix)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from functions import constants
from functions.adapters.aws import AwsClients
from schemas.checkpoint import CHECKPOINT_PREFIX, MANIFEST_NAME, CheckpointManifest

logger = logging.getLogger(__name__)

_DELETE_BATCH = 1000  # DeleteObjects takes at most 1000 keys per call


class S3ArtifactStore:
    def __init__(self, clients: AwsClients, bucket: str = constants.ARTIFACTS_BUCKET) -> None:
        self._clients = clients
        self.bucket = bucket

    @property
    def _s3(self) -> Any:
        return self._clients.s3()

    def list_keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
        return sorted(keys)

    def first_keys(self, prefix: str, limit: int) -> list[str]:
        page = self._s3.list_objects_v2(Bucket=self.bucket, Prefix=prefix, MaxKeys=max(1, min(limit, 1000)))
        return sorted(obj["Key"] for obj in page.get("Contents", []))

    def delete_prefix(self, prefix: str) -> int:
        if not prefix or not prefix.endswith("/"):
            # A prefix without its slash would also match jobs/<id>0..., another job's objects.
            raise ValueError(f"refusing to delete {prefix!r}: a prefix must end with '/'")
        keys = self.list_keys(prefix)
        for i in range(0, len(keys), _DELETE_BATCH):
            batch = [{"Key": k} for k in keys[i : i + _DELETE_BATCH]]
            response = self._s3.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
            errors = response.get("Errors") or []
            if errors:
                raise RuntimeError(f"could not delete {len(errors)} objects under s3://{self.bucket}/{prefix}: {errors[0]}")
        return len(keys)

    def list_manifests(self, job_id: str) -> list[CheckpointManifest]:
        # A checkpoint exists once its manifest does (written last); half-written ones are skipped.
        keys = [k for k in self.list_keys(constants.checkpoints_prefix(job_id)) if k.endswith("/" + MANIFEST_NAME)]
        manifests = []
        for key in keys:
            body = self._read(key)
            if body is None:
                continue
            try:
                manifests.append(CheckpointManifest.model_validate_json(body))
            except ValueError:
                logger.warning("unreadable checkpoint manifest s3://%s/%s skipped", self.bucket, key)
        return sorted(manifests, key=lambda m: m.step)

    def checkpoint_uri(self, job_id: str, checkpoint_id: str) -> str:
        return f"s3://{self.bucket}/{constants.JOBS_PREFIX}/{job_id}/{CHECKPOINT_PREFIX}/{checkpoint_id}"

    def put_json(self, key: str, document: Mapping[str, Any]) -> str:
        body = json.dumps(document, separators=(",", ":"), default=str).encode()
        self._s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="application/json")
        return f"s3://{self.bucket}/{key}"

    def read_lines(self, key: str) -> Iterator[str]:
        body = self._read(key)
        if body is None:
            return iter(())
        return iter(body.decode("utf-8", errors="replace").splitlines())

    def _read(self, key: str) -> bytes | None:
        try:
            return bytes(self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except self._s3.exceptions.NoSuchKey:
            return None
