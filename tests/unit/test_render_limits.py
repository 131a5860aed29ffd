"""Property: whatever an incident, a notice or a timeline holds (long, unicode, Slack's control characters, many
entries), every Slack message keeps every Block Kit limit, every PagerDuty event its limits, and nothing handed to a
list is lost in silence: what a message lists plus what its note says it left out is everything it was given."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fault_responder.core.domain import (
    CONTRIBUTOR_MARK,
    Alert,
    Classification,
    ContributorReading,
    DrainAttribution,
    DrainCause,
    EntryKind,
    EventKind,
    FaultClass,
    Incident,
    InstanceRef,
    PersonAction,
    Severity,
    TimelineEntry,
    Where,
)
from fault_responder.incidents.alarms import MAX_ATTRIBUTES
from fault_responder.notification.render.blocks import SlackMessage, escape_mrkdwn
from fault_responder.notification.render.pagerduty import render_alert_trigger, render_trigger
from fault_responder.notification.render.slack import (
    render_alert,
    render_incident_root,
    render_superseded_alert,
    render_timeline_reply,
    render_webhook_step,
)
from fault_responder.routing.runbooks import runbook_for
from sandbox.standins import block_errors, event_errors
from tests.builders import OPENED, RECOVERED, ROUTING_KEY

SHORTENED = "… (shortened)"
MAX_EVENT_BYTES = 512 * 1024
"""PagerDuty's limit on an event, as sent."""
MAX_MESSAGE_TEXT = 10_000
"""Text in all of a message's blocks: Slack refuses `msg_blocks_too_long` from about 12,000 (undocumented)."""
DASHBOARD = "https://us-west-2.console.aws.amazon.com/cloudwatch/home?region=us-west-2#dashboards/dashboard/gfr"

# Any character but a lone surrogate, and more often than chance: Slack's control characters, mrkdwn's markup, a
# newline, a wide and a right-to-left character.
_CHARACTERS = st.characters(blacklist_categories=("Cs",)) | st.sampled_from(list("&<>|*_~`@#!\n🚀\u202e"))


def _text(most_repeats: int) -> st.SearchStrategy[str]:
    """Short text, or a piece repeated into long text (up to thousands of characters)."""
    return st.text(_CHARACTERS, max_size=30) | st.builds(
        lambda piece, times: piece * times, st.text(_CHARACTERS, min_size=1, max_size=30), st.integers(1, most_repeats)
    )


TEXT = _text(400)
NAME = st.text(_CHARACTERS, min_size=1, max_size=12) | _text(40)


def _many(items: st.SearchStrategy[Any], most: int) -> st.SearchStrategy[list[Any]]:
    """Up to `most` items, any count as likely as another (lists alone are mostly short)."""
    return st.integers(0, most).flatmap(lambda count: st.lists(items, min_size=count, max_size=count))


@st.composite
def instances(draw: st.DrawFn) -> InstanceRef:
    cluster = draw(NAME)
    return InstanceRef(
        region="us-west-2",
        account="123456789012",
        cluster_arn=f"arn:aws:ecs:us-west-2:123456789012:cluster/{cluster}",
        container_instance_arn=f"arn:aws:ecs:us-west-2:123456789012:container-instance/{cluster}/{draw(NAME)}",
        ec2_instance_id=draw(st.none() | NAME),
        capacity_provider=draw(st.none() | NAME),
    )


@st.composite
def contributor_instances(draw: st.DrawFn) -> InstanceRef:
    """One contributor of an alarm, with as many attributes, as long, as its record keeps (incidents.alarms)."""
    alarm = f"arn:aws:cloudwatch:us-west-2:123456789012:alarm:{draw(NAME)}"
    contributor = draw(st.from_regex(r"\A[A-Za-z0-9_.:-]{1,16}\Z"))
    attribute = st.tuples(st.text(_CHARACTERS, min_size=1, max_size=64), st.text(_CHARACTERS, max_size=256))
    return InstanceRef(
        region="us-west-2",
        account="123456789012",
        cluster_arn=f"arn:aws:ecs:us-west-2:123456789012:cluster/{draw(NAME)}",
        container_instance_arn=f"{alarm}{CONTRIBUTOR_MARK}{contributor}",
        ec2_instance_id=None,
        capacity_provider=None,
        attributes=tuple(draw(_many(attribute, MAX_ATTRIBUTES))),
    )


def _reading(instance: InstanceRef) -> st.SearchStrategy[ContributorReading | None]:
    if instance.alarm_contributor is None:
        return st.none()
    number = st.none() | st.floats(allow_nan=False, allow_infinity=False)
    return st.builds(
        ContributorReading,
        st.just(instance.alarm_contributor),
        st.just(instance.cluster_name),
        number,
        number,
        st.sampled_from(["", " °C"]),
    )


@st.composite
def steps(draw: st.DrawFn) -> TimelineEntry:
    return TimelineEntry(
        key=draw(NAME),
        at=OPENED + timedelta(seconds=draw(st.integers(0, 10**6))),
        event_id=draw(NAME),
        phase=draw(NAME),
        text=draw(TEXT),
        kind=draw(st.sampled_from(EntryKind)),
        muted=draw(st.none() | NAME),
    )


def _people() -> st.SearchStrategy[PersonAction | None]:
    return st.none() | st.builds(
        PersonAction, by=NAME, at=st.just(OPENED), via=st.sampled_from(["slack", "pagerduty"]), note=st.none() | TEXT
    )


@st.composite
def incidents(draw: st.DrawFn) -> Incident:
    fault_class = draw(st.sampled_from(FaultClass))
    fingerprint = draw(st.text(_CHARACTERS, min_size=1, max_size=255))
    closed = draw(st.booleans())
    instance = draw(instances() | contributor_instances())
    return Incident(
        id=f"{fingerprint}@{OPENED.isoformat()}",
        fingerprint=fingerprint,
        instance=instance,
        reading=draw(_reading(instance)),
        check_type=draw(NAME),
        status="CLOSED" if closed else "OPEN",
        classification=Classification(
            fault_class,
            draw(st.sampled_from(Severity)),
            draw(TEXT),
            xid=draw(st.none() | st.integers(0, 10**6)),
            reason=draw(st.none() | TEXT),
        ),
        opened_at=OPENED,
        phase="RESOLVED" if closed else draw(NAME),
        last_status_change=OPENED,
        closed_at=OPENED + timedelta(minutes=draw(st.integers(0, 10**5))) if closed else None,
        close_reason=draw(st.none() | TEXT) if closed else None,
        drain=draw(st.none() | st.builds(DrainAttribution, st.sampled_from(DrainCause), NAME, st.none() | TEXT)),
        route=draw(st.none() | NAME),
        timeline=draw(_many(steps(), 40)),
        opened_count=draw(st.integers(1, 5)),
        runbook=draw(st.none() | st.just(runbook_for(fault_class))),
        relapses=draw(st.integers(0, 3)),
        resolves_at=draw(st.none() | st.just(OPENED + timedelta(minutes=5))),
        fleet_id=draw(st.none() | NAME),
        found=draw(st.none() | NAME),
        muted=draw(st.dictionaries(NAME, NAME, max_size=14)),
        acknowledged=draw(_people()),
        assigned=draw(_people()),
    )


@st.composite
def alerts(draw: st.DrawFn) -> Alert:
    fault_class = draw(st.sampled_from(FaultClass))
    keys = draw(_many(NAME, 300))
    return Alert(
        key="drain:evt",
        event_id=draw(NAME),
        kind=draw(st.sampled_from(EventKind)),
        instance=draw(instances()),
        severity=draw(st.sampled_from(Severity)),
        title=draw(TEXT),
        text=draw(TEXT),
        at=OPENED,
        fault_class=fault_class,
        drain=draw(st.none() | st.builds(DrainAttribution, st.sampled_from(DrainCause), NAME, st.none() | TEXT)),
        # Numbered so that no two are the same key
        details={f"{n}:{key}": draw(TEXT) for n, key in enumerate(keys)},
        runbook=runbook_for(fault_class),
    )


# --- What each message must keep to ----------------------------------------------------------------------------------


def assert_slack_limits(message: SlackMessage) -> None:
    assert block_errors(message.blocks) == []
    assert len(message.text) <= 40_000
    assert sum(len(text) for text in all_texts(message.blocks)) <= MAX_MESSAGE_TEXT


def all_texts(blocks: list[dict[str, Any]]) -> list[str]:
    """Every text of every text object: headers, sections, fields, context elements, button labels."""
    found = []
    for block in blocks:
        objects = [block["text"]] if isinstance(block.get("text"), dict) else []
        for item in block.get("fields", []) + block.get("elements", []):
            objects.append(item["text"] if isinstance(item.get("text"), dict) else item)
        found += [obj["text"] for obj in objects if isinstance(obj.get("text"), str)]
    return found


def assert_pagerduty_limits(event: dict[str, Any]) -> None:
    assert event_errors(event, frozenset({ROUTING_KEY})) == []
    assert len(json.dumps(event).encode()) <= MAX_EVENT_BYTES
    assert all(len(event["payload"].get(name, "")) <= 255 for name in ("source", "component", "group", "class"))


def whole_or_said_cut(shown: str, whole: str) -> bool:
    """`shown` is `whole`, or the start of it ending with the marker that says it was cut."""
    return shown == whole or (shown.endswith(SHORTENED) and whole.startswith(shown[: -len(SHORTENED)]))


def texts(message: SlackMessage, kind: str) -> list[str]:
    found = []
    for block in message.blocks:
        if block["type"] == kind and isinstance(block.get("text"), dict):
            found.append(block["text"]["text"])
        if block["type"] == kind:
            found += [item["text"] for item in block.get("fields", []) + block.get("elements", []) if "text" in item]
    return found


def stated(pattern: str, text: str) -> int:
    return sum(int(count) for count in re.findall(pattern, text))


def assert_title_whole_or_said_cut(message: SlackMessage, title: str) -> None:
    header = message.blocks[0]["text"]["text"]
    if header.endswith(escape_mrkdwn(title)):
        return
    assert header.endswith("…")
    assert whole_or_said_cut(message.blocks[1]["text"]["text"], f"*Title:* {escape_mrkdwn(title)}")


# --- Properties ------------------------------------------------------------------------------------------------------


def rendered(
    incident: Incident, entry: TimelineEntry, url: str | None
) -> tuple[SlackMessage, SlackMessage, SlackMessage, dict[str, Any]]:
    """Every message about one of its steps: the Slack root, the thread reply, the webhook's message, the page."""
    return (
        render_incident_root(incident, dashboard_url=url),
        render_timeline_reply(incident, entry),
        render_webhook_step(incident, entry, dashboard_url=url),
        render_trigger(incident, ROUTING_KEY),
    )


@settings(max_examples=100, deadline=None)
@given(incident=incidents(), extra=steps(), use_extra=st.booleans(), dashboard=st.booleans())
def test_every_message_of_an_incident_keeps_every_limit_and_loses_nothing_in_silence(
    incident: Incident, extra: TimelineEntry, use_extra: bool, dashboard: bool
) -> None:
    # Given any incident and one of its steps, When each message about it is rendered
    entry = incident.timeline[-1] if incident.timeline and not use_extra else extra
    root, reply, webhook, trigger = rendered(incident, entry, DASHBOARD if dashboard else None)

    # Then each keeps Slack's and PagerDuty's limits
    for message in (root, reply, webhook):
        assert_slack_limits(message)
    assert_pagerduty_limits(trigger)

    # And a title, a reason and a step's text are whole, or say they were cut
    title = incident.classification.title
    assert_title_whole_or_said_cut(root, title)
    assert_title_whole_or_said_cut(webhook, title)
    if incident.classification.reason:
        [reason] = [text for text in texts(root, "section") if text.startswith("*Reason*\n")]
        assert whole_or_said_cut(reason, f"*Reason*\n{escape_mrkdwn(incident.classification.reason)}")
    step = reply.blocks[0]["text"]["text"]
    assert escape_mrkdwn(entry.text) in step or SHORTENED in step

    # And the root's steps shown plus the earlier ones it counts (right under its title) are every step that
    # notified anyone; a step's line starts with a date token, which no escaped text can forge
    told = [step for step in incident.timeline if step.muted is None]
    [latest] = [text for text in texts(root, "section") if text.startswith("*Latest*\n")] or ["*Latest*\n"]
    earlier = stated(r"^…(\d+) earlier steps?: see the thread$", latest.split("\n")[1])
    assert latest.count("• <!date^") + earlier == len(told)

    # And every reason it is quiet is in the root's context, or the context says it was cut
    context = " · ".join(texts(root, "context"))
    assert all(
        f"Quiet: {escape_mrkdwn(reason)}" in context or SHORTENED in context for reason in incident.muted.values()
    )

    # And PagerDuty's steps listed plus those it counts are the whole timeline, the summary's title whole or cut
    details = trigger["payload"]["custom_details"]
    listed = len(details.get("timeline", []))
    assert listed + stated(r"^(\d+) earlier steps?", details.get("timeline_not_listed", "")) == len(incident.timeline)
    assert title in trigger["payload"]["summary"] or SHORTENED in trigger["payload"]["summary"]


@settings(max_examples=60, deadline=None)
@given(alert=alerts(), incident=incidents(), dashboard=st.booleans())
def test_every_message_of_a_notice_keeps_every_limit_and_counts_what_it_leaves_out(
    alert: Alert, incident: Incident, dashboard: bool
) -> None:
    # Given any notice with any number of details, When it is rendered for Slack (also corrected in place) and PD
    url = DASHBOARD if dashboard else None
    notice = render_alert(alert, dashboard_url=url)
    corrected = render_superseded_alert(alert, incident, dashboard_url=url)
    trigger = render_alert_trigger(alert, ROUTING_KEY, "standalone/evt")

    # Then each keeps Slack's and PagerDuty's limits, and its title is whole or says it was cut
    for message in (notice, corrected):
        assert_slack_limits(message)
        assert_title_whole_or_said_cut(message, alert.title)
    assert_pagerduty_limits(trigger)

    # And the fields shown plus those the last one counts are every field it was given: where, when, each detail
    given = 4 + 1 + (0 if alert.drain is None else 1 + bool(alert.drain.reason)) + len(alert.details)
    for message in (notice, corrected):
        fields = [field for block in message.blocks for field in block.get("fields", [])]
        note = [field["text"] for field in fields if field["text"].startswith("*Not shown*\n")]
        assert len(fields) - len(note) + stated(r"^\*Not shown\*\n(\d+) more fields?", "".join(note)) == given

    # And PagerDuty's details listed plus those it counts are every detail
    details = trigger["payload"]["custom_details"]
    listed = len(details.get("details", {}))
    assert listed + stated(r"^(\d+) more details?", details.get("details_not_listed", "")) == len(alert.details)


@settings(max_examples=60, deadline=None)
@given(incident=incidents(), author=st.none() | st.text(_CHARACTERS, max_size=100), dashboard=st.booleans())
def test_every_message_of_a_drill_keeps_every_limit_and_begins_with_drill(
    incident: Incident, author: str | None, dashboard: bool
) -> None:
    # Given any incident reported by a drill, its author any one line a drill event may carry
    drill = dataclasses.replace(
        incident,
        instance=dataclasses.replace(incident.instance, drill=True),
        classification=dataclasses.replace(incident.classification, title=f"DRILL: {incident.classification.title}"),
        started_by=author,
    )
    entry = drill.timeline[-1] if drill.timeline else RECOVERED

    # When each message about it is rendered
    root, reply, webhook, trigger = rendered(drill, entry, DASHBOARD if dashboard else None)

    # Then each keeps Slack's and PagerDuty's limits
    for message in (root, reply, webhook):
        assert_slack_limits(message)
    assert_pagerduty_limits(trigger)

    # And each begins with DRILL: the fallback texts, the headers, the reply, the page's summary and its details
    for message in (root, reply, webhook):
        assert message.text.startswith("DRILL")
    for message in (root, webhook):
        assert message.blocks[0]["text"]["text"].startswith("DRILL · ")
        # right under the header (and the whole title, when the header had to cut it)
        under = message.blocks[2 if message.blocks[1]["text"]["text"].startswith("*Title:* ") else 1]
        assert under["text"]["text"].startswith("*DRILL — no action needed:*")
    assert reply.blocks[0]["text"]["text"].startswith("*DRILL — no action needed* · ")
    assert trigger["payload"]["summary"].startswith("DRILL")
    assert next(iter(trigger["payload"]["custom_details"])) == "drill"
    assert "*What to do:*" not in json.dumps(root.blocks)


# --- An organization's pages: where, beside the cluster --------------------------------------------------------------

WHERES = st.builds(
    Where,
    account=st.from_regex(r"\A[0-9]{12}\Z"),
    region=st.sampled_from(["us-east-1", "eu-west-1", "ap-southeast-2"]),
    # AWS Organizations' names: printable ASCII, up to 50 characters; or none known
    name=st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=50),
)


@settings(max_examples=60, deadline=None)
@given(incident=incidents(), alert=alerts(), where=WHERES, dashboard=st.booleans())
def test_an_organizations_messages_name_the_account_and_region_and_keep_every_limit(
    incident: Incident, alert: Alert, where: Where, dashboard: bool
) -> None:
    # Given any incident and notice of an account of the organization, When every message about them is rendered
    url = DASHBOARD if dashboard else None
    incident, alert = dataclasses.replace(incident, where=where), dataclasses.replace(alert, where=where)
    entry = incident.timeline[-1] if incident.timeline else RECOVERED
    root, reply, webhook, trigger = rendered(incident, entry, url)
    notice, corrected = (
        render_alert(alert, dashboard_url=url),
        render_superseded_alert(alert, incident, dashboard_url=url),
    )
    page = render_alert_trigger(alert, ROUTING_KEY, "standalone/evt")

    # Then each keeps Slack's and PagerDuty's limits, as a single account's do
    for message in (root, reply, webhook, notice, corrected):
        assert_slack_limits(message)
    for event in (trigger, page):
        assert_pagerduty_limits(event)

    # And those that name the cluster name the account (its name, with its id) and the Region too: the fields, the
    # push text, and PagerDuty's summary (whole, or its title cut to keep them) and details
    account = escape_mrkdwn(where.account_text)
    for message in (root, webhook):
        fields = [field["text"] for block in message.blocks for field in block.get("fields", [])]
        assert f"*Account*\n{account}" in fields and f"*Region*\n{where.region}" in fields
        assert message.text.endswith(SHORTENED) or f"{account}, {where.region}" in message.text
    notice_fields = [field["text"] for block in notice.blocks for field in block.get("fields", [])]
    assert f"*Account*\n{account}" in notice_fields
    assert f"{account}, {where.region}) · " in notice.text or notice.text.endswith(SHORTENED)
    for event in (trigger, page):
        summary, details = event["payload"]["summary"], event["payload"]["custom_details"]
        assert f"account {where.account_text}, {where.region}" in summary or summary.endswith(SHORTENED)
        assert (details["account"], details["region"], details.get("account_name", "")) == (
            where.account,
            where.region,
            where.name,
        )
