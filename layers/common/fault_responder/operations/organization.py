"""The reconciliation across the organization (docs/organization.md, "Acting where it happened"): every enrolled account
and Region, each through its own clients, a few at a time, none able to hold up or fail the others.

Which (account, Region) pairs: `acting_places`. EnrolledAccounts x EnrolledRegions when both are listed; a dimension
that is not listed is the accounts (or Regions) whose events have been seen (the router notes each pair at most once
a minute: fault_responder.adapters.places_store), and the stack's own account and Region always. An account is acted
on in every one of those Regions; the stack's own account in another Region only when it is among those accounts
(listed, or seen: it goes through the member role there). At most MAX_PLACES a run, the stack's own first, then in
order; the rest are named as left out.

A run (`OrganizationReconciler`) gives each place its reconciliation (the wiring's `run_place`: the alarms there, then
the instances, with that place's clients) in a thread of a bounded pool (`max_concurrency`), each within a time box
of its own inside the run's budget: a place whose role cannot be assumed fails at once, a throttled one spends its box
and not the others'. Each failure is reported for its account (`report`: a metric per account, its kind and detail in
the log) and never stops the others; a place whose clusters ECS refused to list or describe for want of access, or
throttled, is a failure of its place too (a cluster deleted meanwhile is not; nor is an alarm that could not be read:
the alarms' reconciliation counts and logs those itself, and pages an alarm whose contributors it cannot read as a
whole). What no thread started before the
run's end is deferred to the next run, and what is still running then is left to end within its own box, its result
not counted.

The open records are read once per run and each place is given its own (a record's ARN names its account and
Region), so that a place never decides about another's records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from fault_responder.core.places import MemberAccessError, Place
from fault_responder.operations.reconcile import MARGIN_SECONDS

log = logging.getLogger(__name__)

MAX_PLACES = 500
"""Accounts and Regions one run reconciles at most."""
DEFAULT_CONCURRENCY = 8
"""Places reconciled at once."""
MIN_PLACE_SECONDS = 20.0
"""The shortest time box a place is given (when many places share a short budget, fewer start)."""
MAX_SHOWN = 20
"""Places a log line names at most (the count says how many more)."""
PLACE_FAILURES = frozenset({"role_not_assumable", "access_denied", "throttled"})
"""The kinds of a cluster's failure that are its place's: the role, not the cluster."""

RunPlace = Callable[[Place, float, Sequence[str]], "PlaceResult"]
"""run_place(place, seconds, its open records) -> what it did. Raises when the place could not be acted in at all."""
Classify = Callable[[Exception, Place], MemberAccessError]


@dataclass(frozen=True)
class PlaceResult:
    """What one place's reconciliation did: its tally, and the failures it met and went on from (a cluster ECS would
    not list or describe, an alarm that could not be read)."""

    tally: Mapping[str, int]
    failures: Sequence[Exception] = ()


def acting_places(
    home: Place,
    accounts: Iterable[str],
    regions: Iterable[str],
    seen: Iterable[Place],
    limit: int = MAX_PLACES,
) -> tuple[list[Place], list[Place]]:
    """(the places to reconcile, the stack's own first; those left out beyond `limit`)."""
    listed_accounts, listed_regions = sorted(set(accounts)), sorted(set(regions))
    noticed = set(seen)
    chosen_accounts = listed_accounts or sorted({place.account for place in noticed})
    chosen_regions = sorted({*(listed_regions or {place.region for place in noticed}), home.region})
    places = {home} | {Place(account, region) for account in chosen_accounts for region in chosen_regions}
    if home.account not in chosen_accounts:
        places = {place for place in places if place.account != home.account} | {home}
    ordered = [home, *sorted(places - {home})]
    return ordered[:limit], ordered[limit:]


def records_by_place(arns: Iterable[str]) -> dict[Place, list[str]]:
    """Open records by the account and Region their ARN names (an instance's, an alarm's); others are left out."""
    grouped: dict[Place, list[str]] = {}
    for arn in arns:
        place = Place.of_arn(arn)
        if place is not None:
            grouped.setdefault(place, []).append(arn)
    return grouped


@dataclass
class OrganizationReconciler:
    """One run over the places, bounded by the time left."""

    places: Sequence[Place]
    run_place: RunPlace
    classify: Classify
    open_records: Callable[[], Iterable[str]]
    report: Callable[[Place, MemberAccessError], None] = lambda place, failure: None
    """Told of each place that failed (the metric per account)."""
    epoch: Callable[[], float] = lambda: 0.0
    max_concurrency: int = DEFAULT_CONCURRENCY
    left_out: Sequence[Place] = ()
    """Places beyond MAX_PLACES: reported as deferred."""
    margin_seconds: float = MARGIN_SECONDS
    """A place is not started with less time than this left."""
    min_place_seconds: float = MIN_PLACE_SECONDS

    def run(self, *, seconds_left: float) -> dict[str, int]:
        ends = self.epoch() + seconds_left
        records = records_by_place(self.open_records())
        tally: dict[str, int] = {"places": 0, "places_failed": 0, "places_deferred": len(self.left_out)}
        tally["places_unfinished"] = 0
        failed: list[tuple[Place, MemberAccessError]] = []
        deferred: list[Place] = list(self.left_out)
        if not self.places:
            return tally
        workers = max(1, min(self.max_concurrency, len(self.places)))
        waves = -(-len(self.places) // workers)
        box = max(self.min_place_seconds, (seconds_left - self.margin_seconds) / waves)
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reconcile")
        futures: dict[Future[PlaceResult | None], Place] = {}
        try:
            for place in self.places:
                futures[pool.submit(self._one, place, box, ends, records.get(place, []))] = place
            pending = set(futures)
            while pending:
                left = ends - self.epoch()
                done, pending = wait(pending, timeout=max(0.0, left), return_when=FIRST_COMPLETED)
                if not done:
                    break
                for future in done:
                    self._count(futures[future], future, tally, failed, deferred)
            for future in pending:
                if not future.cancel():
                    tally["places_unfinished"] += 1
                    log.warning("reconciliation: %s still running at the end of the run", futures[future])
                else:
                    deferred.append(futures[future])
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        tally["places_deferred"] = len(deferred)
        if deferred:
            shown = ", ".join(str(place) for place in deferred[:MAX_SHOWN])
            more = f" and {len(deferred) - MAX_SHOWN} more" if len(deferred) > MAX_SHOWN else ""
            log.warning("reconciliation: %d places wait for the next run: %s%s", len(deferred), shown, more)
        return tally

    def _one(self, place: Place, box: float, ends: float, records: Sequence[str]) -> PlaceResult | None:
        """One place within its box (None: the run's time was up before it could start)."""
        seconds = min(box, ends - self.epoch())
        if seconds < self.margin_seconds:
            return None
        return self.run_place(place, seconds, records)

    def _count(
        self,
        place: Place,
        future: Future[PlaceResult | None],
        tally: dict[str, int],
        failed: list[tuple[Place, MemberAccessError]],
        deferred: list[Place],
    ) -> None:
        error = future.exception()
        result = None if error is not None else future.result()
        if error is None and result is None:
            deferred.append(place)
            return
        tally["places"] += 1
        failure: MemberAccessError | None = None
        if error is not None:
            failure = self.classify(error if isinstance(error, Exception) else RuntimeError(str(error)), place)
        elif result is not None:
            for name, value in result.tally.items():
                tally[name] = tally.get(name, 0) + value
            failure = self._place_failure(place, result.failures)
        if failure is None:
            return
        tally["places_failed"] += 1
        failed.append((place, failure))
        log.warning(
            "reconciliation: could not act in account %s %s (%s)",
            place.account,
            place.region,
            failure.kind,
            extra={"account": place.account, "region": place.region, "kind": failure.kind, "detail": failure.detail},
        )
        self.report(place, failure)

    def _place_failure(self, place: Place, failures: Sequence[Exception]) -> MemberAccessError | None:
        """The first failure met in the place that is the place's (its role's access, its quota), if any."""
        for error in failures:
            classified = self.classify(error, place)
            if classified.kind in PLACE_FAILURES:
                return classified
        return None
