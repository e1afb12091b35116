"""The shape every one-partition adapter of the jobs table shares (teams, budgets, forecast records): the
table, the DynamoDB client, and an item's key (`pk` = the adapter's partition, `sk` = its prefix + a name)."""

from __future__ import annotations

from typing import Any

from functions import constants
from functions.adapters.aws import AwsClients


class PartitionTable:
    PK = ""  # the partition every item of the adapter lives in
    PREFIX = ""  # what its sort keys start with

    def __init__(self, clients: AwsClients, table: str) -> None:
        self._clients = clients
        self.table = table

    @property
    def _ddb(self) -> Any:
        return self._clients.client("dynamodb")

    def _key(self, name: str) -> dict[str, Any]:
        return {constants.PK: {"S": self.PK}, constants.SK: {"S": self.PREFIX + name}}
