"""IncidentStore on DynamoDB (single table, see template.yaml IncidentsTable).

Keys: pk = INSTANCE#<container instance ARN>, sk = INCIDENT#<check type> | STATE;
the delivery ledger uses pk = DELIVERY#<key>, sk = DELIVERY. Every write is conditional on the
version read, and closed incidents, states and ledger entries expire through TTL (`expires_at`).
"""

from __future__ import annotations

import time
from datetime import timedelta
from decimal import Decimal
from typing import Any

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from fault_responder.domain import Incident, InstanceState
from fault_responder.serialization import incident_from_dict, incident_to_dict, state_from_dict, state_to_dict
from fault_responder.store import ConcurrentUpdateError

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()
DELIVERY_TTL = timedelta(days=14)
STATE_TTL = timedelta(days=30)


class DynamoDBIncidentStore:
    def __init__(self, table_name: str, retention: timedelta, client: Any | None = None) -> None:
        self.table_name = table_name
        self.retention = retention
        self._client = client or boto3.client("dynamodb")

    def load(self, container_instance_arn: str) -> tuple[dict[str, Incident], InstanceState]:
        incidents: dict[str, Incident] = {}
        state = InstanceState(container_instance_arn)
        paginator = self._client.get_paginator("query")
        pages = paginator.paginate(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": _instance_pk(container_instance_arn)}},
            ConsistentRead=True,
        )
        for page in pages:
            for raw in page.get("Items", []):
                item = _plain(raw)
                if item["sk"] == "STATE":
                    state = state_from_dict(item)
                elif item["sk"].startswith("INCIDENT#"):
                    incident = incident_from_dict(item)
                    incidents[incident.check_type] = incident
        return incidents, state

    def save_incident(self, incident: Incident) -> None:
        data = incident_to_dict(incident)
        data["severity"] = incident.classification.severity.value
        if not incident.is_open:
            data["expires_at"] = int(time.time() + self.retention.total_seconds())
        sk = f"INCIDENT#{incident.check_type}"
        self._put(_instance_pk(incident.instance.container_instance_arn), sk, data, incident.version)
        incident.version += 1

    def save_instance_state(self, state: InstanceState) -> None:
        data = state_to_dict(state)
        data["expires_at"] = int(time.time() + STATE_TTL.total_seconds())
        self._put(_instance_pk(state.container_instance_arn), "STATE", data, state.version)
        state.version += 1

    def delivered(self, key: str) -> bool:
        response = self._client.get_item(
            TableName=self.table_name,
            Key={"pk": {"S": f"DELIVERY#{key}"}, "sk": {"S": "DELIVERY"}},
            ConsistentRead=True,
        )
        return "Item" in response

    def mark_delivered(self, key: str) -> None:
        item = {
            "pk": f"DELIVERY#{key}",
            "sk": "DELIVERY",
            "expires_at": int(time.time() + DELIVERY_TTL.total_seconds()),
        }
        self._client.put_item(TableName=self.table_name, Item=_typed(item))

    def _put(self, pk: str, sk: str, data: dict[str, Any], expected_version: int) -> None:
        item = {**data, "pk": pk, "sk": sk, "version": expected_version + 1}
        condition: dict[str, Any] = (
            {"ConditionExpression": "attribute_not_exists(pk)"}
            if expected_version == 0
            else {
                "ConditionExpression": "version = :expected",
                "ExpressionAttributeValues": {":expected": {"N": str(expected_version)}},
            }
        )
        try:
            self._client.put_item(TableName=self.table_name, Item=_typed(item), **condition)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                raise ConcurrentUpdateError(f"{pk} {sk} changed since version {expected_version}") from error
            raise


def _instance_pk(container_instance_arn: str) -> str:
    return f"INSTANCE#{container_instance_arn}"


def _typed(item: dict[str, Any]) -> dict[str, Any]:
    return {key: _serializer.serialize(value) for key, value in item.items()}


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    return {key: _undecimal(_deserializer.deserialize(value)) for key, value in item.items()}


def _undecimal(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list):
        return [_undecimal(item) for item in value]
    if isinstance(value, dict):
        return {key: _undecimal(item) for key, item in value.items()}
    return value
