"""A dashboard user's Cognito user-pool groups (the UserGroups port), looked up in the pool, cached briefly.

API Gateway names a signed-in person by the user pool and their `sub`; group membership is by user name, so
a lookup is two reads: ListUsers filtered on the sub (sub is one of the attributes ListUsers may filter on),
then AdminListGroupsForUser. Both are read-only calls the API role may make on the dashboard's pool alone
(infra/constructs/api.py). Cognito's quotas on them are low (ListUsers: 30 requests per second per account,
AdminListGroupsForUser: 50 shared with the other admin reads), so an answer is kept for `ttl_seconds`: a
group change reaches team membership within that time. When the pool does not answer (throttled, down,
unreachable), the last answer is used however old; with none, GroupsUnavailable (a 503 with Retry-After).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from functions.adapters.aws import AwsClients
from functions.errors import GroupsUnavailable
from functions.service.feature_ports import CognitoUser

logger = logging.getLogger(__name__)

DEFAULT_TTL_SECONDS = 60.0
_MAX_ENTRIES = 4096  # people cached per process; the oldest looked-up go first
_GROUPS_PAGE = 60  # AdminListGroupsForUser's largest page
# What a caller refused for want of an answer is told to wait: botocore already retried each call (its
# standard mode backs off on throttling), so the pool is down or throttled for longer than a request.
RETRY_AFTER_SECONDS = 5


class CognitoUserGroups:
    def __init__(self, clients: AwsClients, ttl_seconds: float = DEFAULT_TTL_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._clients = clients
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._cache: OrderedDict[CognitoUser, tuple[float, frozenset[str]]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def _idp(self) -> Any:
        return self._clients.client("cognito-idp")

    def groups_of(self, user: CognitoUser) -> frozenset[str]:
        now = self._clock()
        with self._lock:
            cached = self._cache.get(user)
            if cached is not None and now - cached[0] < self.ttl_seconds:
                return cached[1]
        try:
            groups = self._look_up(user)
        except Exception as exc:
            # Throttled or unreachable: an answer older than the TTL beats none. With none, the person's
            # team cannot be decided: a botocore error is the pool not answering (503, retry later);
            # anything else is a fault of ours and stays a logged 500.
            if cached is None:
                if isinstance(exc, (ClientError, BotoCoreError)):
                    logger.warning("Cognito did not answer for %s and no groups of theirs are kept", user.sub, exc_info=True)
                    raise GroupsUnavailable(
                        f"the user pool that decides your team did not answer ({_reason(exc)}); retry in a few seconds",
                        retry_after_seconds=RETRY_AFTER_SECONDS,
                    ) from exc
                raise
            logger.warning("Cognito did not answer for %s; using the groups read %.0f s ago", user.sub, now - cached[0], exc_info=True)
            return cached[1]
        with self._lock:
            self._cache[user] = (now, groups)
            self._cache.move_to_end(user)
            while len(self._cache) > _MAX_ENTRIES:
                self._cache.popitem(last=False)
        return groups

    def _look_up(self, user: CognitoUser) -> frozenset[str]:
        # The sub is a UUID Cognito made; quoting it in the filter cannot be escaped out of, but refuse
        # anything else rather than build a filter from it.
        if not _is_sub(user.sub):
            return frozenset()
        found = self._idp.list_users(UserPoolId=user.user_pool_id, Filter=f'sub = "{user.sub}"', Limit=1).get("Users", [])
        if not found:
            return frozenset()  # deleted from the pool since signing in: in no group
        username = found[0]["Username"]
        groups: set[str] = set()
        kwargs: dict[str, Any] = {"UserPoolId": user.user_pool_id, "Username": username, "Limit": _GROUPS_PAGE}
        while True:
            page = self._idp.admin_list_groups_for_user(**kwargs)
            groups.update(g["GroupName"] for g in page.get("Groups", []))
            if not page.get("NextToken"):
                return frozenset(groups)
            kwargs["NextToken"] = page["NextToken"]


def _reason(exc: ClientError | BotoCoreError) -> str:
    """The AWS error code (ClientError) or botocore's error class: what went wrong, without internals."""
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code") or "an AWS error")
    return type(exc).__name__


def _is_sub(value: str) -> bool:
    return 0 < len(value) <= 128 and all(c.isalnum() or c == "-" for c in value)
