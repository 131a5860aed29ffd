"""The alert queue as the endpoints that hear of people's actions (SlackActionsFunction, PagerDutyWebhookFunction)
use it: one SendMessage per action, its envelope (fault_responder.incidents.incident_actions) as the JSON body. The
AlertRouter takes it from there like any other fact."""

from __future__ import annotations

import json
from typing import Any

import boto3

from fault_responder.incidents.incident_actions import IncidentAction


class ActionQueue:
    """`send(action)`: SendMessage of `action.envelope(region, account)` to `queue_url`. The SQS client is created
    on the first send (a refused request never pays for it)."""

    def __init__(self, queue_url: str, region: str, account: str, client: Any | None = None) -> None:
        self.queue_url = queue_url
        self.region = region
        self.account = account
        self._client = client

    def send(self, action: IncidentAction) -> None:
        body = json.dumps(action.envelope(self.region, self.account), separators=(",", ":"))
        self._sqs().send_message(QueueUrl=self.queue_url, MessageBody=body)

    def _sqs(self) -> Any:
        if self._client is None:
            self._client = boto3.client("sqs", region_name=self.region)
        return self._client
