"""Who is calling: the IAM principal from API Gateway's request context, and whether it is an admin.

A non-admin sees only its own jobs; another principal's job is "not found" (404), never 403, so job
ids cannot be probed for existence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from functions.service.feature_ports import CognitoUser
from schemas.job import Job


def role_arn_of(arn: str) -> str:
    """An assumed-role session ARN as its role's ARN; any other ARN unchanged.

    arn:aws:sts::123:assumed-role/Admin/alice-session -> arn:aws:iam::123:role/Admin, so that admins can
    be listed by role (sessions get new names every time).
    """
    parts = arn.split(":", 5)
    if len(parts) == 6 and parts[2] == "sts" and parts[5].startswith("assumed-role/"):
        role = parts[5].split("/")[1]
        return f"arn:{parts[1]}:iam::{parts[4]}:role/{role}"
    return arn


def cognito_user_of(provider: str | None) -> CognitoUser | None:
    """The user pool and sub in API Gateway's `cognitoAuthenticationProvider`, None if it names none.

    API Gateway takes the string from the identity pool credentials that signed the request, never from the
    client: `cognito-idp.REGION.amazonaws.com/POOL,cognito-idp.REGION.amazonaws.com/POOL:CognitoSignIn:SUB`.
    """
    for part in (provider or "").split(","):
        issuer, marker, sub = part.strip().partition(":CognitoSignIn:")
        host, slash, pool = issuer.partition("/")
        if marker and slash and sub and pool and host.startswith("cognito-idp."):
            return CognitoUser(user_pool_id=pool, sub=sub)
    return None


def cognito_identity_of(arn: str) -> str | None:
    """The identity id in a dashboard user's principal ARN (caller_arn's), None for any other ARN.

    An IAM role session name never holds ':' (it is [\\w+=,.@-]), an identity id always does (region:uuid).
    """
    parts = arn.split(":", 5)
    if len(parts) == 6 and parts[2] == "sts" and parts[5].startswith("assumed-role/"):
        session = parts[5].split("/", 2)[-1]
        if ":" in session:
            return session
    return None


def caller_arn(user_arn: str | None, cognito_identity_id: str | None = None, cognito_authentication_type: str | None = None) -> str | None:
    """The caller's principal ARN from API Gateway's request context.

    Credentials from a Cognito identity pool (the web dashboard's sign-in) are sessions of one role with
    the same session name (CognitoIdentityCredentials) for every user: the user's identity id, which API
    Gateway takes from the credentials (never from the client), replaces the session name, so each signed-in
    person is a principal of their own. Any other caller is its userArn unchanged.
    """
    if user_arn and cognito_identity_id and cognito_authentication_type == "authenticated" and ":assumed-role/" in user_arn:
        return f"{user_arn.rpartition('/')[0]}/{cognito_identity_id}"
    return user_arn


@dataclass(frozen=True)
class Principal:
    arn: str
    is_admin: bool = False
    # A dashboard user's user-pool identity (from the request context; None for IAM callers and for a
    # principal rebuilt from a stored owner ARN): what their Cognito groups are looked up by.
    cognito: CognitoUser | None = None

    @classmethod
    def from_arn(cls, arn: str, admin_arns: Iterable[str] = (), cognito: CognitoUser | None = None) -> Principal:
        admins = set(admin_arns)
        return cls(arn=arn, is_admin=arn in admins or role_arn_of(arn) in admins, cognito=cognito)

    @property
    def owner_scope(self) -> str | None:
        """The owner a listing is limited to; None for admins (every owner)."""
        return None if self.is_admin else self.arn

    def can_see(self, job: Job) -> bool:
        return self.is_admin or job.owner == self.arn
