"""A deployed stack as a command-line user reaches it: clients for their account (or a moto server), the stack that
holds the responder (the stack itself, or the nested stack of a quick-start deploy), and the physical id of one of
its resources."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

QUICKSTART_NESTED_STACK = "Responder"
"""The logical id under which quickstart.yaml deploys template.yaml as a nested stack."""


def aws_client(
    service: str, *, region: str | None = None, endpoint_url: str | None = None, config: Config | None = None
) -> Any:
    """A client with the user's usual credentials; `endpoint_url` points it elsewhere (a moto server, say); `config`
    sets its timeouts and retries."""
    session = boto3.session.Session(region_name=region)
    # The stubs only type literal service names; this takes any.
    return session.client(service, endpoint_url=endpoint_url, config=config)  # type: ignore[call-overload]


def responder_stack(cloudformation: Any, stack_name: str) -> str:
    """The stack holding the responder's resources and parameters: `stack_name` deployed from template.yaml, or the
    nested stack of one deployed from quickstart.yaml (its id). A stack that does not exist is returned as it is, for
    the next call to say so."""
    try:
        response = cloudformation.describe_stack_resource(
            StackName=stack_name, LogicalResourceId=QUICKSTART_NESTED_STACK
        )
    except ClientError:
        return stack_name
    detail = response["StackResourceDetail"]
    if detail.get("ResourceType") != "AWS::CloudFormation::Stack":
        return stack_name
    return str(detail["PhysicalResourceId"])


def stack_resource(cloudformation: Any, stack_name: str, logical_id: str) -> str:
    """The physical id (for a table, its name) of the responder's resource `logical_id` in the stack `stack_name`
    (CloudFormation DescribeStackResource, through a quick start's nested stack)."""
    response = cloudformation.describe_stack_resource(
        StackName=responder_stack(cloudformation, stack_name), LogicalResourceId=logical_id
    )
    return str(response["StackResourceDetail"]["PhysicalResourceId"])
