"""Amazon ECS for the reconciliation sweep: the watched clusters' container instances and their health.

Separate from adapters/ecs.py, which speaks the training auto-resume workflow's types: this one answers
fault_responder.operations.reconcile's Inventory. ListClusters and ListContainerInstances are read page by page
(nextToken, at most 100 a page); DescribeContainerInstances takes at most 100 instances a call and reports their health
only when asked (include=CONTAINER_INSTANCE_HEALTH). Throttling is retried by botocore (standard mode).

ECS's answer is read strictly: an instance whose description does not have the documented shape is reported
unreadable (with the reason) and nothing is decided about it; a failure other than MISSING is unreadable too,
never taken to mean the instance is gone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Annotated, Any, cast

from botocore.client import BaseClient
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from fault_responder.events.ecs import Count
from fault_responder.events.envelope import EARLIEST
from fault_responder.operations.reconcile import DESCRIBE_BATCH, Described, ObservedCheck, ObservedInstance, Unreadable

HEALTH = "CONTAINER_INSTANCE_HEALTH"
PAGE_SIZE = 100
_MAX_REASON = 300


def _aware(moment: datetime) -> datetime | None:
    if moment.tzinfo is None:
        raise ValueError("a timestamp without a time zone")
    # Go's zero time (or anything before any time an event may carry) is no time at all: read as absent, as an
    # event's is (docs/reliability.md), so that it never reaches the arithmetic of a window.
    return moment if moment >= EARLIEST else None


Moment = Annotated[datetime, AfterValidator(_aware)]
Text = Annotated[str, Field(min_length=1, max_length=2048)]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class _Check(_Answer):
    type: Text
    status: Text
    last_status_change: Moment | None = Field(default=None, alias="lastStatusChange")
    last_updated: Moment | None = Field(default=None, alias="lastUpdated")
    status_reason: str | None = Field(default=None, alias="statusReason")


class _Health(_Answer):
    overall_status: Text | None = Field(default=None, alias="overallStatus")
    details: list[_Check] = []


class _Instance(_Answer):
    container_instance_arn: Text = Field(alias="containerInstanceArn")
    status: Text
    ec2_instance_id: str | None = Field(default=None, alias="ec2InstanceId")
    capacity_provider_name: str | None = Field(default=None, alias="capacityProviderName")
    version: Count | None = None
    health_status: _Health | None = Field(default=None, alias="healthStatus")


class EcsHealthInventory:
    """fault_responder.operations.reconcile.Inventory over boto3's ECS client."""

    def __init__(self, ecs: BaseClient, *, page_size: int = PAGE_SIZE) -> None:
        self._ecs = cast(Any, ecs)
        self._page = {"PageSize": page_size}

    def clusters(self) -> Iterator[str]:
        for page in self._ecs.get_paginator("list_clusters").paginate(PaginationConfig=self._page):
            yield from page.get("clusterArns", [])

    def instance_pages(self, cluster: str) -> Iterator[list[str]]:
        paginator = self._ecs.get_paginator("list_container_instances")
        for page in paginator.paginate(cluster=cluster, PaginationConfig=self._page):
            yield list(page.get("containerInstanceArns", []))

    def describe(self, cluster: str, arns: Sequence[str]) -> Described:
        if len(arns) > DESCRIBE_BATCH:
            raise ValueError(f"DescribeContainerInstances takes at most {DESCRIBE_BATCH} instances, not {len(arns)}")
        if not arns:
            return Described()
        answer = self._ecs.describe_container_instances(
            cluster=cluster, containerInstances=list(arns), include=[HEALTH]
        )
        described = read_described(cluster, answer)
        # A failure may name the instance in another ARN format than the one asked about (with or without the
        # cluster's name): the sweep knows it by the ARN it asked with.
        asked = {arn.rsplit("/", 1)[-1]: arn for arn in arns}
        described.missing = [asked.get(arn.rsplit("/", 1)[-1], arn) for arn in described.missing]
        return described


def read_described(cluster: str, answer: Any) -> Described:
    """A DescribeContainerInstances answer as the sweep's types; what cannot be read is named, not guessed at."""
    described = Described()
    if not isinstance(answer, dict):
        described.unreadable.append(Unreadable(cluster, f"the answer is not an object: {type(answer).__name__}"))
        return described
    for raw in _list(answer, "containerInstances", described, cluster):
        try:
            parsed = _Instance.model_validate(raw)
        except ValidationError as error:
            arn = raw.get("containerInstanceArn") if isinstance(raw, dict) else None
            described.unreadable.append(Unreadable(str(arn or cluster)[:2048], _reason(error)))
            continue
        described.instances.append(_observed(cluster, parsed))
    for failure in _list(answer, "failures", described, cluster):
        arn = failure.get("arn") if isinstance(failure, dict) else None
        reason = failure.get("reason") if isinstance(failure, dict) else None
        if isinstance(arn, str) and arn and reason == "MISSING":
            described.missing.append(arn)
        else:
            described.unreadable.append(Unreadable(str(arn or cluster)[:2048], f"ECS failure: {str(reason)[:200]}"))
    return described


def _observed(cluster: str, parsed: _Instance) -> ObservedInstance:
    health = parsed.health_status
    return ObservedInstance(
        cluster_arn=cluster,
        container_instance_arn=parsed.container_instance_arn,
        status=parsed.status,
        ec2_instance_id=parsed.ec2_instance_id or None,
        capacity_provider=parsed.capacity_provider_name or None,
        version=parsed.version,
        overall_status=health.overall_status if health else None,
        checks=tuple(
            ObservedCheck(
                type=check.type,
                status=check.status,
                last_status_change=check.last_status_change,
                last_updated=check.last_updated,
                reason=check.status_reason or None,
            )
            for check in (health.details if health else [])
        ),
    )


def _list(answer: dict[str, Any], key: str, described: Described, cluster: str) -> list[Any]:
    value = answer.get(key) or []
    if not isinstance(value, list):
        described.unreadable.append(Unreadable(cluster, f"{key} is not a list: {type(value).__name__}"))
        return []
    return value


def _reason(error: ValidationError) -> str:
    problems = [f"{'.'.join(str(p) for p in e['loc'])[:100]}: {e['msg'][:100]}" for e in error.errors()[:3]]
    return ("; ".join(problems))[:_MAX_REASON]
