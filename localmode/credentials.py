"""The local principals: IAM-user-like identities whose keys sign requests to the front door.

They are generated once per state directory and persisted there (0600), so a client configured from
endpoint.json keeps working across restarts, and a job's owner ARN stays the same principal.

A principal may also stand for a person signed in to the cloud dashboard (`new_dashboard_user`): keys of
the Cognito identity pool's role, whose session name is the same for everyone (CognitoIdentityCredentials),
and the person's identity id, which the front door reports as API Gateway does (requestContext.identity
cognitoIdentityId), so local mode serves what the cloud serves to two dashboard users of one role.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import string
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from functions import constants

CREDENTIALS_FILE = "credentials.json"
DEFAULT_PRINCIPALS = ("admin", "alice")
ADMIN = "admin"

_UPPER_DIGITS = string.ascii_uppercase + string.digits
_SECRET_ALPHABET = string.ascii_letters + string.digits + "+/"


@dataclass(frozen=True)
class Principal:
    name: str
    access_key_id: str
    secret_access_key: str
    arn: str
    # IAM's unique id of the user (AIDA...): API Gateway reports it as identity.user and identity.caller.
    user_id: str
    # Set for a dashboard user: the Cognito identity pool's id of the person (region:uuid).
    cognito_identity_id: str | None = None

    def public(self) -> dict[str, str]:
        """The endpoint.json entry (docs/CONTRACTS.md): name, keys and ARN, nothing else."""
        return {"name": self.name, "access_key_id": self.access_key_id, "secret_access_key": self.secret_access_key, "arn": self.arn}


def new_principal(name: str, account_id: str = constants.LOCAL_ACCOUNT_ID) -> Principal:
    # Same shapes as IAM's: AKIA + 16, 40-character secret, AIDA + 17.
    return Principal(
        name=name,
        access_key_id="AKIA" + "".join(secrets.choice(_UPPER_DIGITS) for _ in range(16)),
        secret_access_key="".join(secrets.choice(_SECRET_ALPHABET) for _ in range(40)),
        arn=f"arn:aws:iam::{account_id}:user/{name}",
        user_id="AIDA" + "".join(secrets.choice(_UPPER_DIGITS) for _ in range(17)),
    )


DASHBOARD_ROLE = "trainplane-local-dashboard-users"
COGNITO_SESSION = "CognitoIdentityCredentials"  # the identity pool's session name, the same for every person


def new_dashboard_user(name: str, account_id: str = constants.LOCAL_ACCOUNT_ID, region: str = constants.LOCAL_REGION) -> Principal:
    """A person signed in through the dashboard's identity pool: the pool role's one session, their own id."""
    return Principal(
        name=name,
        access_key_id="ASIA" + "".join(secrets.choice(_UPPER_DIGITS) for _ in range(16)),
        secret_access_key="".join(secrets.choice(_SECRET_ALPHABET) for _ in range(40)),
        arn=f"arn:aws:sts::{account_id}:assumed-role/{DASHBOARD_ROLE}/{COGNITO_SESSION}",
        user_id="AROA" + "".join(secrets.choice(_UPPER_DIGITS) for _ in range(17)) + ":" + COGNITO_SESSION,
        cognito_identity_id=f"{region}:{uuid.uuid4()}",
    )


# IAM's user-name rule: the name becomes the principal's ARN (arn:aws:iam::ACCOUNT:user/NAME).
_PRINCIPAL_NAME = re.compile(r"[A-Za-z0-9+=,.@_-]{1,64}")


def principal_names(extra: Sequence[str]) -> tuple[str, ...]:
    """admin and alice, then `trainplane up --principal NAME`'s (repeatable); ValueError naming a bad one."""
    for name in extra:
        if not _PRINCIPAL_NAME.fullmatch(name):
            raise ValueError(f"--principal: {name!r} is not an IAM user name (1-64 of letters, digits and +=,.@_-)")
    return tuple(dict.fromkeys([*DEFAULT_PRINCIPALS, *extra]))


# A Cognito group name (schemas/teams.py CognitoGroup, without the letters of other scripts a shell rarely types).
_GROUP_NAME = re.compile(r"[\w+=,.@:/!#$%&*?^~|'`\"()\[\]{}<>;-]{1,128}")


def dashboard_user_specs(specs: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """`trainplane up --dashboard-user NAME[:GROUP,GROUP...]` (repeatable) -> each person's user-pool groups.

    A person signed in to the dashboard (new_dashboard_user), in local mode's emulated user pool, a member of
    those groups (team membership by members.cognito_groups). ValueError naming a bad one.
    """
    users: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        name, _, groups = spec.partition(":")
        if not _PRINCIPAL_NAME.fullmatch(name) or name in DEFAULT_PRINCIPALS:
            raise ValueError(f"--dashboard-user: {name!r} is not a new user name (1-64 of letters, digits and +=,.@_-; not admin or alice)")
        named = tuple(dict.fromkeys(g.strip() for g in groups.split(",") if g.strip()))
        bad = [g for g in named if not _GROUP_NAME.fullmatch(g) or g.startswith("arn:")]
        if bad:
            raise ValueError(f"--dashboard-user {name}: {bad[0]!r} is not a Cognito group name")
        users[name] = tuple(dict.fromkeys([*users.get(name, ()), *named]))
    return users


def load_or_create(state_dir: Path, names: tuple[str, ...] = DEFAULT_PRINCIPALS, dashboard: Sequence[str] = ()) -> list[Principal]:
    """The principals stored in the state dir, creating (and persisting) any of `names` that is missing, and of
    `dashboard` as dashboard users; ValueError if a name is one kind and asked for as the other."""
    path = state_dir / CREDENTIALS_FILE
    principals: list[Principal] = []
    if path.exists():
        try:
            raw = json.loads(path.read_text())
            principals = [Principal(**entry) for entry in raw["principals"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise RuntimeError(f"{path} is not a valid credentials file ({exc}); fix or delete it") from exc
    known = {p.name: p for p in principals}
    clash = [n for n in dashboard if n in names or (n in known and known[n].cognito_identity_id is None)]
    clash += [n for n in names if n in known and known[n].cognito_identity_id is not None]
    if clash:
        raise ValueError(f"{clash[0]!r} cannot be both an IAM principal and a dashboard user (in {path})")
    missing = [new_principal(n) for n in names if n not in known] + [new_dashboard_user(n) for n in dashboard if n not in known]
    if missing:
        principals += missing
        _write_private(path, json.dumps({"principals": [asdict(p) for p in principals]}, indent=2))
    return principals


def _write_private(path: Path, text: str) -> None:
    # Secrets: owner-only from the first byte (no window where the file is world-readable), then rename.
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
