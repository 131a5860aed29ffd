"""A deployed stack as a command-line user reaches it: clients for their account (or a moto server), and the
physical id of one of the stack's resources."""

from __future__ import annotations

from typing import Any

import boto3


def aws_client(service: str, *, region: str | None = None, endpoint_url: str | None = None) -> Any:
    """A client with the user's usual credentials; `endpoint_url` points it elsewhere (a moto server, say)."""
    session = boto3.session.Session(region_name=region)
    # The stubs only type literal service names; this takes any.
    return session.client(service, endpoint_url=endpoint_url)  # type: ignore[call-overload]


def stack_resource(cloudformation: Any, stack_name: str, logical_id: str) -> str:
    """The physical id (for a table, its name) of the stack's resource `logical_id` (CloudFormation
    DescribeStackResource)."""
    response = cloudformation.describe_stack_resource(StackName=stack_name, LogicalResourceId=logical_id)
    return str(response["StackResourceDetail"]["PhysicalResourceId"])
