"""Copies of records (fault_responder.core.copying): a Value is shared because nothing in it can change; a Record's
copy equals it and shares none of its lists and dicts, so changing one never changes the other."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import pkgutil
import random
import types
import typing
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

import pytest

import fault_responder
from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core.copying import Record, Value
from fault_responder.core.domain import InstanceRef
from fault_responder.incidents import lifecycle
from fault_responder.incidents.record import (
    ActionFact,
    Backoff,
    Delivery,
    HealthFact,
    InstanceRecord,
    KnownIncident,
    Lease,
    NoticeFact,
    Pending,
    QuarantineFact,
    StatusFact,
    TaskStopFact,
)
from fault_responder.noise.fleet import group_arn
from fault_responder.notification.delivery import Courier
from fault_responder.routing.router import Router, load_routing
from tests.fakes import FakeWorld
from tests.lifecycles import delivered, fleet
from tests.unit.test_fleet import GROUP, START, World, instance_arn, storm

AT = datetime(2026, 11, 1, 12, tzinfo=UTC)
_IMMUTABLE = (str, int, float, bool, type(None), datetime)


def _every_subclass(base: type) -> list[type]:
    for module in pkgutil.walk_packages(fault_responder.__path__, "fault_responder."):
        if not module.name.endswith(".__main__"):
            importlib.import_module(module.name)
    found, stack = [], [base]
    while stack:
        for subclass in stack.pop().__subclasses__():
            found.append(subclass)
            stack.append(subclass)
    return found


VALUES = _every_subclass(Value)
RECORDS = _every_subclass(Record)


def _immutable(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin is None:
        return hint in _IMMUTABLE or (isinstance(hint, type) and issubclass(hint, Enum | Value))
    if origin is tuple:
        return all(_immutable(arg) for arg in typing.get_args(hint) if arg is not Ellipsis)
    if origin in (typing.Union, types.UnionType):
        return all(_immutable(arg) for arg in typing.get_args(hint))
    return origin is typing.Literal


def test_the_records_and_values_are_found() -> None:
    assert {HealthFact, StatusFact, TaskStopFact, ActionFact, NoticeFact, Lease, Backoff, Pending} <= set(VALUES)
    assert {InstanceRecord, KnownIncident, Delivery} <= set(RECORDS)


@pytest.mark.parametrize("value", VALUES, ids=[value.__qualname__ for value in VALUES])
def test_a_value_is_a_frozen_dataclass_whose_fields_cannot_change(value: type) -> None:
    assert dataclasses.is_dataclass(value) and value.__dataclass_params__.frozen  # type: ignore[attr-defined]
    hints = typing.get_type_hints(value)
    fields = [field.name for field in dataclasses.fields(value)]
    changeable = {name: hints[name] for name in fields if not _immutable(hints[name])}
    assert not changeable, f"{value.__qualname__} holds what can change, so a copy may not share it: {changeable}"


@pytest.mark.parametrize("record", RECORDS, ids=[record.__qualname__ for record in RECORDS])
def test_a_record_is_a_dataclass_that_is_not_frozen(record: type) -> None:
    assert dataclasses.is_dataclass(record) and not record.__dataclass_params__.frozen  # type: ignore[attr-defined]


def _shared_containers(original: Any, twin: Any, path: str = "") -> list[str]:
    """Where the copy holds the very list, dict or set (or Record) the original holds."""
    if isinstance(original, list | dict | set | Record) and original is twin:
        return [path or "."]
    found: list[str] = []
    if isinstance(original, Record):
        for field in dataclasses.fields(original):  # type: ignore[arg-type]
            name = field.name
            found += _shared_containers(getattr(original, name), getattr(twin, name), f"{path}.{name}")
    elif isinstance(original, list | tuple):
        for index, (item, copied) in enumerate(zip(original, twin, strict=True)):
            found += _shared_containers(item, copied, f"{path}[{index}]")
    elif isinstance(original, dict):
        for key, item in original.items():
            found += _shared_containers(item, twin[key], f"{path}[{key!r}]")
    return found


def _checked_copy(record: Record) -> Record:
    twin = copy.deepcopy(record)
    assert type(twin) is type(record)
    assert twin == record
    assert _shared_containers(record, twin) == []
    return twin


def full_record() -> InstanceRecord:
    """An instance's record with something in every field."""
    instance = InstanceRef("us-west-2", "123456789012", "arn:cluster", "arn:instance", "i-1", "gpu", False)
    delivery = Delivery(
        "gpu-oncall", "fp@1", "C1", "1.1", [Pending("m", AT, "w1")], "d", ["step-1"], "trigger", "fp@1", AT
    )
    return InstanceRecord(
        "arn:instance",
        instance,
        health={"ACCELERATED_COMPUTE": [HealthFact("ACCELERATED_COMPUTE", "IMPAIRED", AT, "e1", "XID_79")]},
        statuses=[StatusFact("DRAINING", AT, "e2", 3)],
        tasks=[TaskStopFact("arn:task", AT, "e3", "train", "drained")],
        quarantine=QuarantineFact(AT, "xid"),
        notices=[NoticeFact("n1", "ACCELERATED_COMPUTE", AT, AT, "title")],
        actions=[ActionFact("a1", "fp@1", "acknowledge", "slack", "Jane", AT)],
        incidents={"ACCELERATED_COMPUTE": [KnownIncident("fp@1", "ACCELERATED_COMPUTE", AT, ["gpu-oncall"])]},
        deliveries={("gpu-oncall", "fp@1"): delivery},
        leases={"gpu-oncall": Lease("gpu-oncall", "w1", 1.0)},
        backoff={"slack": Backoff("slack", 1, 1.0, 2.0)},
        version=4,
    )


def test_a_copy_of_a_full_record_equals_it_shares_its_facts_and_none_of_its_lists_and_dicts() -> None:
    record = full_record()
    twin = _checked_copy(record)
    assert twin.statuses[0] is record.statuses[0]
    # Changing the copy's lists and dicts, at every depth, leaves the original as it was
    twin.incidents["ACCELERATED_COMPUTE"][0].receivers.append("another")
    twin.incidents["ACCELERATED_COMPUTE"][0].status = "CLOSED"
    twin.deliveries[("gpu-oncall", "fp@1")].steps.append("step-2")
    twin.deliveries[("gpu-oncall", "fp@1")].pending.clear()
    twin.health["ACCELERATED_COMPUTE"].append(HealthFact("ACCELERATED_COMPUTE", "OK", AT, "e4"))
    twin.leases.clear()
    assert record == full_record()


def test_what_a_record_holds_that_is_neither_value_nor_container_is_copied_deeply() -> None:
    @dataclasses.dataclass(slots=True)
    class Odd(Record):
        found: set[str]
        nested: tuple[list[str], ...]

    odd = Odd({"a"}, (["b"],))
    twin = copy.deepcopy(odd)
    assert twin == odd and twin.found is not odd.found and twin.nested[0] is not odd.nested[0]


@pytest.mark.parametrize("seed", range(6))
def test_the_records_of_any_lifecycles_copy_to_equal_records_sharing_no_list_or_dict(seed: int) -> None:
    # Given the records of generated lifecycles, delivered with duplicates in a shuffled order
    lifecycles, events = fleet(seed, 4)
    store = MemoryInstanceStore()
    service = AlertService(
        StorePorts(store, store, store),
        Router(load_routing("default.yaml")),
        Courier(FakeWorld(), clock=lambda: AT),
        lifecycle.Settings(),
    )
    for event in delivered(events, random.Random(seed)):
        service.handle(event)
    records = [record for item in lifecycles if (record := store.load(item.container_instance_arn))]
    assert len(records) == len(lifecycles) and any(record.deliveries for record in records)
    # Then each copies to an equal record, sharing none of its lists and dicts
    for record in records:
        _checked_copy(record)


def test_the_records_of_a_fleet_storm_copy_to_equal_records_sharing_no_list_or_dict() -> None:
    # Given a storm of eight instances that opened a fleet incident
    world = World()
    world.clock.now = START + timedelta(minutes=3)
    for event in storm(8, reports=2):
        world.service.handle(event)
    group = world.store.load_group(group_arn(GROUP))
    assert group is not None and group.incidents and group.deliveries
    members = [record for n in range(8) if (record := world.store.load(instance_arn(n)))]
    assert len(members) == 8
    # Then the group's record and its members' copy to equal records, sharing none of their lists and dicts
    for record in [group, *members]:
        _checked_copy(record)
