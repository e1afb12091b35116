"""Path confinement shared by the control plane and the trainer (docs/SECURITY.md).

The control plane decides, at submit, which paths a job may read and write; it writes that decision
into the run spec as an `AccessSet`, and the trainer refuses any path outside it before reading or
writing (the second enforcement). Both sides normalise paths the same way, with the helpers below:

- `s3://bucket/key`: the key must not hold `.`/`..` segments or empty segments (some S3 front ends
  and emulators normalise them, which would let a key escape its prefix);
- local paths: `file://` stripped, then made absolute and resolved (`os.path.realpath`: `..` and
  symlinks), so a path is checked where it really points.

A grant is a prefix: `s3://bucket` (the whole bucket), `s3://bucket/prefix/`, or an absolute local
directory. A URI is under a grant when it equals it or continues it after a `/`.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

S3_SCHEME = "s3://"
FILE_SCHEME = "file://"
ANY_PRINCIPAL = "*"
# A Secrets Manager secret's ARN (the name may end in Secrets Manager's 6-character suffix, or not: a partial
# ARN). Which secrets a principal may name: `secret_allowed` with the prefixes the control plane grants.
SECRET_ARN = r"^arn:aws[a-z\-]*:secretsmanager:[a-z0-9\-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@\-]{1,512}$"  # noqa: S105 - a pattern
SECRET_ROOT = "trainplane/"  # noqa: S105 - a name prefix; every secret a job may name is under it (the trainer role's IAM scope)
# Written at the root of every export (trainer_image/trainer/export.py): whose export this is, so that
# no job of another principal overwrites it, and submit can tell an earlier export from foreign data.
EXPORT_MARKER = ".trainplane-export.json"


class PathError(ValueError):
    """A path that cannot be checked (bad scheme, relative, odd segments); the message says why."""


def is_s3(uri: str) -> bool:
    return uri.startswith(S3_SCHEME)


def is_local(uri: str) -> bool:
    """Anything without a scheme, or file://: a file of the machine the trainer runs on."""
    return uri.startswith(FILE_SCHEME) or "://" not in uri


def normalize_s3(uri: str) -> str:
    """`s3://bucket/key` checked for segments that could escape a prefix; a trailing `/` kept."""
    rest = uri[len(S3_SCHEME) :]
    bucket, _, key = rest.partition("/")
    if not bucket or not all(c.isalnum() or c in ".-_" for c in bucket):
        raise PathError(f"{uri!r} names no valid bucket")
    if key:
        segments = key.rstrip("/").split("/")
        if any(s in ("", ".", "..") for s in segments):
            raise PathError(f"{uri!r} has an empty, '.' or '..' segment in its key")
        if any(ord(c) < 0x20 or c == "\\" for c in key):
            raise PathError(f"{uri!r} has a control character or a backslash in its key")
    return f"{S3_SCHEME}{bucket}/{key}" if key else f"{S3_SCHEME}{bucket}"


def normalize_local(path: str) -> str:
    """An absolute local path with `..` and symlinks resolved; relative paths are refused (they would be
    relative to a working directory the caller does not know: the trainer's is inside the state dir)."""
    raw = path[len(FILE_SCHEME) :] if path.startswith(FILE_SCHEME) else path
    if "\x00" in raw:
        raise PathError("a local path cannot hold a NUL character")
    if not os.path.isabs(raw):
        raise PathError(f"{path!r} is a relative local path; give an absolute path (or file:///...)")
    return os.path.realpath(raw)


def normalize(uri: str) -> str:
    """s3:// or local, normalised as above; any other scheme is refused."""
    if is_s3(uri):
        return normalize_s3(uri)
    if is_local(uri):
        return normalize_local(uri)
    raise PathError(f"{uri!r}: only s3:// URIs and local paths (absolute, or file://) are accepted")


def under(uri: str, grant: str) -> bool:
    """`uri` (normalised) equals `grant` (normalised) or lies below it."""
    if grant == "/":
        return uri.startswith("/")
    base = grant.rstrip("/")
    target = uri.rstrip("/") or uri
    return target == base or target.startswith(base + "/")


class BucketGrant(BaseModel):
    """A deployment setting (Settings.bucket_grants, CDK context `bucket_grants`): a bucket or a prefix
    outside the artifacts bucket that principals may use."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    uri: str = Field(description="s3://bucket or s3://bucket/prefix/")
    access: Literal["read", "read-write"] = "read"
    principals: tuple[str, ...] = Field(default=(ANY_PRINCIPAL,), description="Caller ARNs, or '*' for every principal.")

    @field_validator("uri")
    @classmethod
    def _s3_prefix(cls, value: str) -> str:
        if not is_s3(value):
            raise ValueError(f"bucket grants name s3:// locations, got {value!r}")
        try:
            return normalize_s3(value)
        except PathError as exc:
            raise ValueError(str(exc)) from exc

    def applies_to(self, arn: str, role_arn: str) -> bool:
        return ANY_PRINCIPAL in self.principals or arn in self.principals or role_arn in self.principals


def secret_parts(arn: str) -> tuple[str, str, str]:
    """(region, account, name) of a Secrets Manager secret ARN (SECRET_ARN); ValueError otherwise."""
    parts = arn.split(":", 6)
    if len(parts) != 7 or parts[2] != "secretsmanager" or parts[5] != "secret" or not parts[6]:
        raise ValueError(f"{arn!r} is not a Secrets Manager secret ARN")
    return parts[3], parts[4], parts[6]


def secret_allowed(arn: str, prefixes: list[str] | tuple[str, ...]) -> bool:
    """The secret's name starts with one of `prefixes` (each ends in '/': trainplane/<principal key>/)."""
    try:
        _, _, name = secret_parts(arn)
    except ValueError:
        return False
    return any(p.endswith("/") and name.startswith(p) for p in prefixes)


class AccessSet(BaseModel):
    """What one job may read and write, written by the control plane into the run spec.

    `read` and `write` are grants (prefixes); `deny` wins over both (local mode's state directory).
    `read_any_s3` is set for jobs of admins, who may name any S3 location.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    owner: str = Field(description="The job owner's ARN; an export marker of another owner is never overwritten.")
    read: list[str] = Field(default_factory=list)
    write: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)
    read_any_s3: bool = False
    secrets: list[str] = Field(
        default_factory=list, description="Secret name prefixes the job may read (trainplane/<principal key>/; admins trainplane/)."
    )

    def can_read_secret(self, arn: str) -> bool:
        return secret_allowed(arn, self.secrets)

    def _denied(self, normal: str) -> bool:
        return any(under(normal, d) for d in self.deny)

    def can_read(self, uri: str) -> bool:
        """True when `uri` (any form normalize() accepts) may be read; False also for unreadable forms."""
        try:
            normal = normalize(uri)
        except PathError:
            return False
        if self._denied(normal):
            return False
        if self.read_any_s3 and is_s3(normal):
            return True
        return any(under(normal, g) for g in [*self.read, *self.write])

    def can_write(self, uri: str) -> bool:
        try:
            normal = normalize(uri)
        except PathError:
            return False
        return not self._denied(normal) and any(under(normal, g) for g in self.write)
