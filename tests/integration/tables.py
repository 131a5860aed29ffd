"""The incidents table as template.yaml defines it, created in moto: tests cannot drift from what is deployed."""

from __future__ import annotations

from typing import Any

from sandbox.template import load_template
from tests.conftest import ROOT, incidents_table


def create_incidents_table(dynamodb: Any, name: str) -> None:
    properties = load_template(ROOT / "template.yaml").resources["IncidentsTable"]["Properties"]
    dynamodb.create_table(TableName=name, **incidents_table())
    ttl = properties["TimeToLiveSpecification"]
    dynamodb.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": ttl["Enabled"], "AttributeName": ttl["AttributeName"]}
    )
