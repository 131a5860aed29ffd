"""The reconciliation across the organization (fault_responder.operations.organization): which accounts and Regions,
each reconciled in a bounded pool of threads (as ReconcileFunction runs it) within a time box of its own, so that one
account's broken role or throttling is counted for that account and never delays or fails the others."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from botocore.exceptions import ClientError

from fault_responder.adapters.member_session import classify
from fault_responder.core.places import MemberAccessError, Place, RoleNotAssumable
from fault_responder.operations.organization import (
    OrganizationReconciler,
    PlaceResult,
    acting_places,
    records_by_place,
)

HOME = Place("111111111111", "us-east-1")


def member(number: int, region: str = "us-west-2") -> Place:
    return Place(f"{number:012d}", region)


def error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "ListContainerInstances")


# --- Which places --------------------------------------------------------------------------------------------------


def test_listed_accounts_and_regions_are_every_pair_with_the_stacks_own_first() -> None:
    places, left_out = acting_places(HOME, ["000000000002", "000000000003"], ["us-west-2"], seen=[member(9)])

    assert places == [
        HOME,
        Place("000000000002", "us-east-1"),
        Place("000000000002", "us-west-2"),
        Place("000000000003", "us-east-1"),
        Place("000000000003", "us-west-2"),
    ]
    assert left_out == []


def test_what_is_not_listed_is_what_was_seen_and_the_stacks_own_account_elsewhere_only_when_among_them() -> None:
    seen = [member(2, "eu-west-1"), member(3, "us-west-2")]

    places, _ = acting_places(HOME, [], [], seen)
    assert places == [
        HOME,
        *sorted(Place(a, r) for a in ("000000000002", "000000000003") for r in ("eu-west-1", "us-east-1", "us-west-2")),
    ]

    with_home = acting_places(HOME, [], [], [*seen, Place(HOME.account, "eu-west-1")])[0]
    assert Place(HOME.account, "eu-west-1") in with_home
    listed_regions = acting_places(HOME, [], ["ap-south-1"], seen)[0]
    assert {place.region for place in listed_regions} == {"ap-south-1", "us-east-1"}


def test_at_most_the_bound_with_the_rest_named_as_left_out() -> None:
    accounts = [f"{number:012d}" for number in range(2, 12)]

    places, left_out = acting_places(HOME, accounts, ["us-west-2"], [], limit=5)

    assert places[0] == HOME and len(places) == 5
    assert len(left_out) == 21 - 5
    assert not set(places) & set(left_out)


def test_open_records_are_grouped_by_the_account_and_region_their_arn_names() -> None:
    grouped = records_by_place(
        [
            "arn:aws:ecs:us-west-2:000000000002:container-instance/training/abc",
            "arn:aws:cloudwatch:us-east-1:111111111111:alarm:gpu-fault-responder.router-errors",
            "arn:aws:cloudwatch:us-west-2:000000000002:alarm:x.gpu-temperature#contributor/1a2b",
            "group#training/gpu/ACCELERATED_COMPUTE",
        ]
    )

    assert grouped == {
        member(2): [
            "arn:aws:ecs:us-west-2:000000000002:container-instance/training/abc",
            "arn:aws:cloudwatch:us-west-2:000000000002:alarm:x.gpu-temperature#contributor/1a2b",
        ],
        HOME: ["arn:aws:cloudwatch:us-east-1:111111111111:alarm:gpu-fault-responder.router-errors"],
    }


# --- A run ---------------------------------------------------------------------------------------------------------


class Places:
    """run_place for the fan-out: what each place does, with the places running at once counted."""

    def __init__(self, behaviours: dict[Place, str] | None = None, seconds: float = 0.0, together: int = 0) -> None:
        self.behaviours = behaviours or {}
        self.seconds = seconds
        self.together = threading.Barrier(together) if together else None
        """The first places wait for each other: they must run at once (a barrier broken fails them)."""
        self.calls = 0
        self.running = 0
        self.peak = 0
        self.given: dict[Place, tuple[float, list[str]]] = {}
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, place: Place, seconds: float, records: Sequence[str]) -> PlaceResult:
        with self._lock:
            self.running += 1
            self.calls += 1
            first = self.calls <= (self.together.parties if self.together else 0)
            self.peak = max(self.peak, self.running)
            self.given[place] = (seconds, list(records))
        try:
            if first and self.together is not None:
                self.together.wait(timeout=5)
            behaviour = self.behaviours.get(place, "ok")
            if behaviour == "role":
                raise RoleNotAssumable(place, "AssumeRole refused")
            if behaviour == "hangs":  # throttled on every call: the SDK's retries, then the next call's
                self.release.wait(30)
                return PlaceResult({"described": 0})
            time.sleep(self.seconds)
            failures: tuple[Exception, ...] = ()
            if behaviour in ("denied", "gone cluster"):
                code = "AccessDeniedException" if behaviour == "denied" else "ClusterNotFoundException"
                failures = (error(code),)
            return PlaceResult({"described": 2, "missed_fault": 1 if place.account.endswith("7") else 0}, failures)
        finally:
            with self._lock:
                self.running -= 1


def fan_out(
    places: Places,
    every: Sequence[Place],
    *,
    seconds: float = 5.0,
    max_concurrency: int = 8,
    left_out: Sequence[Place] = (),
) -> tuple[dict[str, int], list[str]]:
    reported: list[str] = []

    def report(place: Place, failure: MemberAccessError) -> None:
        reported.append(f"{place.account} {failure.kind}")

    run = OrganizationReconciler(
        places=every,
        run_place=places,
        classify=classify,
        open_records=lambda: ["arn:aws:ecs:us-west-2:000000000007:container-instance/training/abc"],
        report=report,
        epoch=time.monotonic,
        margin_seconds=0.05,
        min_place_seconds=0.1,
        max_concurrency=max_concurrency,
        left_out=left_out,
    )
    return run.run(seconds_left=seconds), reported


def test_every_place_is_reconciled_a_bounded_few_at_a_time_with_its_own_records() -> None:
    every = [HOME, *(member(number) for number in range(2, 14))]
    places = Places(seconds=0.05, together=3)

    tally, reported = fan_out(places, every, max_concurrency=3)

    # Three at once (the first three met at a barrier), never more
    assert tally["places"] == 13 and tally["places_failed"] == 0 and tally["places_deferred"] == 0
    assert tally["described"] == 26 and tally["missed_fault"] == 1
    assert places.peak == 3
    assert places.given[member(7)][1] == ["arn:aws:ecs:us-west-2:000000000007:container-instance/training/abc"]
    assert places.given[member(2)][1] == []
    assert reported == []


def test_a_broken_role_and_a_throttled_account_are_counted_for_their_accounts_and_the_others_reconciled() -> None:
    every = [HOME, *(member(number) for number in range(2, 22))]
    broken, throttled = member(5), member(9)
    places = Places({broken: "role", throttled: "hangs"})

    started = time.monotonic()
    try:
        tally, reported = fan_out(places, every, max_concurrency=4, seconds=1.5)
    finally:
        places.release.set()

    # The run ended on its budget, not on the throttled account (which would hold it 30 s); the 19 others were
    # reconciled
    assert time.monotonic() - started < 15.0
    assert tally["places"] == 20  # 19 reconciled, the broken one counted as failed
    assert tally["places_failed"] == 1
    assert tally["places_unfinished"] == 1
    assert tally["described"] == 2 * 19
    assert reported == [f"{broken.account} role_not_assumable"]


def test_a_place_whose_clusters_were_refused_fails_for_its_account_and_a_cluster_gone_meanwhile_does_not() -> None:
    every = [HOME, member(2), member(3)]
    places = Places({member(2): "denied", member(3): "gone cluster"})

    tally, reported = fan_out(places, every)

    assert tally["places"] == 3 and tally["places_failed"] == 1
    assert reported == [f"{member(2).account} access_denied"]


def test_what_the_budget_leaves_no_time_for_waits_for_the_next_run_and_is_counted() -> None:
    every = [HOME, *(member(number) for number in range(2, 12))]
    places = Places(seconds=0.2)

    tally, _ = fan_out(places, every, max_concurrency=1, seconds=1.0, left_out=[member(40), member(41)])

    assert 0 < tally["places"] < 11
    assert tally["places"] + tally["places_deferred"] + tally["places_unfinished"] == 11 + 2
    assert tally["places_deferred"] >= 2


def test_a_place_the_run_fails_in_raises_nothing_out_of_the_run() -> None:
    def explode(place: Place, seconds: float, records: Sequence[str]) -> PlaceResult:
        raise error("ThrottlingException") if place != HOME else RuntimeError("a bug")

    reported: list[str] = []
    run = OrganizationReconciler(
        places=[HOME, member(2)],
        run_place=explode,
        classify=classify,
        open_records=list,
        report=lambda place, failure: reported.append(f"{place.account} {failure.kind}"),
        epoch=time.monotonic,
    )

    tally = run.run(seconds_left=30)

    assert tally["places_failed"] == 2
    assert sorted(reported) == sorted([f"{HOME.account} failed", f"{member(2).account} throttled"])


def test_no_places_is_an_empty_run() -> None:
    run = OrganizationReconciler(places=[], run_place=Places(), classify=classify, open_records=list)
    assert run.run(seconds_left=10)["places"] == 0
