"""Slack Block Kit rendering: escaping, limits, severity, lifecycle phases, webhook mode."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest

from fault_responder.core.domain import DrainAttribution, DrainCause, FaultClass, Severity
from fault_responder.notification.render import slack
from fault_responder.notification.render.blocks import (
    MAX_CONTEXT_ELEMENTS,
    MAX_LISTING_TEXT,
    MAX_MESSAGE_TEXT,
    SlackMessage,
    escape_mrkdwn,
)
from fault_responder.notification.render.slack import (
    render_alert,
    render_incident_root,
    render_superseded_alert,
    render_timeline_reply,
    render_webhook_step,
)
from fault_responder.routing.router import RouteRunbook
from fault_responder.routing.runbooks import MAX_ACTION, MAX_URL, runbook_for
from sandbox.standins import block_errors
from tests.builders import INSTANCE, OPENED, an_alert, an_incident, draining, resolved, step

HOSTILE = "<!channel> & <script>"
HOSTILE_ESCAPED = "&lt;!channel&gt; &amp; &lt;script&gt;"


def text_objects(message: SlackMessage) -> list[dict[str, Any]]:
    """Every text object in the message, wherever Block Kit allows one."""
    found = []
    for block in message.blocks:
        if "text" in block:
            found.append(block["text"])
        found += block.get("fields", []) + block.get("elements", [])
    return found


def field_text(message: SlackMessage, label: str) -> str:
    fields: list[str] = [f["text"] for block in message.blocks for f in block.get("fields", [])]
    return next(text.split("\n", 1)[1] for text in fields if text.startswith(f"*{label}*\n"))


def section_texts(message: SlackMessage) -> list[str]:
    return [block["text"]["text"] for block in message.blocks if block["type"] == "section" and "text" in block]


def header_text(message: SlackMessage) -> str:
    header = message.blocks[0]
    assert header["type"] == "header"
    return str(header["text"]["text"])


def assert_within_slack_limits(message: SlackMessage) -> None:
    assert block_errors(message.blocks) == []
    assert len(message.text) <= 40_000


def test_escape_mrkdwn_replaces_only_slack_control_characters() -> None:
    assert escape_mrkdwn("a & b < c > d 'e' \"f\"") == "a &amp; b &lt; c &gt; d 'e' \"f\""


def test_escape_mrkdwn_escapes_text_that_looks_already_escaped() -> None:
    # Untrusted text that spells an entity must display as typed, not as the character.
    assert escape_mrkdwn("&lt;") == "&amp;lt;"


def test_root_escapes_a_hostile_reason() -> None:
    # Given a reason that would mention @channel and inject markup
    incident = an_incident(reason=HOSTILE)

    # When the root message is rendered
    message = render_incident_root(incident)

    # Then the reason appears only escaped, in the blocks and in the fallback text
    rendered = json.dumps(message.blocks) + message.text
    assert "<!channel>" not in rendered
    assert "<script>" not in rendered
    assert field_text(message, "Reason") == HOSTILE_ESCAPED


def test_root_escapes_a_hostile_title_in_header_and_fallback() -> None:
    message = render_incident_root(an_incident(title=f"XID 999: {HOSTILE}"))

    assert HOSTILE_ESCAPED in header_text(message)
    assert HOSTILE_ESCAPED in message.text
    assert "<!channel>" not in message.text


def test_reply_escapes_the_drain_reason_and_step_text() -> None:
    # Given a draining incident whose drain reason and step text are hostile
    incident = draining(an_incident(), DrainAttribution(DrainCause.ECS_REPORTED, "ECS reported", HOSTILE))
    entry = step(OPENED, "evt-x", "DRAINING", HOSTILE)

    # When the thread reply is rendered
    message = render_timeline_reply(incident, entry)

    # Then nothing hostile survives unescaped
    rendered = json.dumps(message.blocks) + message.text
    assert "<!channel>" not in rendered
    assert rendered.count(HOSTILE_ESCAPED) >= 3


def test_alert_escapes_title_text_and_details() -> None:
    alert = an_alert(title=HOSTILE, text=HOSTILE, details={HOSTILE: HOSTILE})

    message = render_alert(alert)

    rendered = json.dumps(message.blocks) + message.text
    assert "<!channel>" not in rendered
    assert "<script>" not in rendered


def test_console_link_keeps_its_markup_and_escapes_its_label() -> None:
    # Given a container instance id carrying markup (the ARN comes from the event)
    arn = INSTANCE.container_instance_arn.rsplit("/", 1)[0] + "/evil>|<!here>"
    incident = dataclasses.replace(an_incident(), instance=dataclasses.replace(INSTANCE, container_instance_arn=arn))

    # When the root message is rendered
    link = field_text(render_incident_root(incident), "Container instance")

    # Then it is one well-formed link whose URL and label cannot close it early or mention anyone
    assert link.startswith("<https://us-west-2.console.aws.amazon.com/ecs/v2/clusters/gpu-training/")
    assert link.endswith("|evil&gt;|&lt;!here&gt;>")
    assert link.count("<") == 1
    assert link.count(">") == 1
    assert "%7C" in link


def test_every_mrkdwn_object_is_verbatim_so_bare_mentions_stay_text() -> None:
    message = render_incident_root(draining(an_incident(reason="@channel #general")))

    mrkdwn = [obj for obj in text_objects(message) if obj["type"] == "mrkdwn"]

    assert mrkdwn
    assert all(obj["verbatim"] is True for obj in mrkdwn)


def test_very_long_reason_is_cut_to_the_field_limit_and_says_so() -> None:
    message = render_incident_root(an_incident(reason="XID_79 " + "x" * 10_000))

    reason = field_text(message, "Reason")
    assert len("*Reason*\n" + reason) == 2000
    assert reason.endswith("x… (shortened)")
    assert_within_slack_limits(message)


def test_truncation_never_leaves_half_an_entity() -> None:
    message = render_incident_root(an_incident(reason="&" * 5_000))

    reason = field_text(message, "Reason")
    assert reason.endswith("&amp;… (shortened)")
    assert_within_slack_limits(message)


def test_very_long_title_is_cut_in_the_header_and_shown_whole_right_under_it() -> None:
    # Given a title far longer than a header may be
    title = "XID 79: " + "y" * 500

    # When the root, a webhook message and a notice are rendered
    incident = an_incident(title=title)
    messages = [
        render_incident_root(incident),
        render_webhook_step(incident, incident.timeline[-1]),
        render_alert(an_alert(title=title)),
        render_superseded_alert(an_alert(title=title), incident),
    ]

    # Then each header is cut to Slack's limit, and the next block has the whole title
    for message in messages:
        assert len(header_text(message)) == 150
        assert header_text(message).endswith("y…")
        assert message.blocks[1]["text"]["text"] == f"*Title:* {title}"
        assert_within_slack_limits(message)


def test_a_title_that_fits_the_header_is_not_repeated() -> None:
    message = render_incident_root(an_incident())

    assert not any(text.startswith("*Title:*") for text in section_texts(message))


def test_very_long_step_text_and_drain_reason_fit_the_section_limit() -> None:
    drain = DrainAttribution(DrainCause.ECS_REPORTED, "ECS reported", "r" * 20_000)
    incident = draining(an_incident(), drain)
    entry = step(OPENED, "evt-long", "DRAINING", "t" * 20_000)

    assert_within_slack_limits(render_timeline_reply(incident, entry))


def test_root_of_a_60_entry_timeline_stays_within_limits() -> None:
    incident = an_incident()
    incident.timeline = [
        step(OPENED + timedelta(seconds=i), f"evt-{i}", "TASK_STOPPED", "task stopped " * 40) for i in range(60)
    ]

    message = render_incident_root(incident)

    assert len(message.blocks) <= 50
    assert_within_slack_limits(message)


def test_a_notice_with_hundreds_of_details_shows_what_fits_and_counts_the_rest() -> None:
    # Given a notice with 600 details
    alert = an_alert(details={f"key-{i}": f"value-{i}" for i in range(600)})

    # When it is rendered
    message = render_alert(alert)

    # Then the fields shown and the count of the rest add up to every field, and the message keeps its context
    fields = [f["text"] for block in message.blocks for f in block.get("fields", [])]
    shown = [text for text in fields if text.startswith("*key-")]
    assert shown == [f"*key-{i}*\nvalue-{i}" for i in range(len(shown))]
    assert fields[-1] == (
        f"*Not shown*\n{600 - len(shown)} more fields, left out to fit Slack: ECS event `evt-manual` has them"
    )
    assert sum(len(text) for text in fields) <= MAX_LISTING_TEXT
    assert message.blocks[-1]["elements"][0]["text"] == "instance_state · ECS event `evt-manual`"
    assert_within_slack_limits(message)


@pytest.mark.parametrize(
    ("severity", "prefix"),
    [
        (Severity.CRITICAL, ":rotating_light: CRITICAL · "),
        (Severity.ERROR, ":red_circle: ERROR · "),
        (Severity.WARNING, ":warning: WARNING · "),
        (Severity.INFO, ":information_source: INFO · "),
    ],
)
def test_open_incident_header_shows_severity(severity: Severity, prefix: str) -> None:
    message = render_incident_root(an_incident(severity=severity))

    assert header_text(message) == prefix + "XID 79: GPU has fallen off the bus"
    assert message.text.startswith(prefix.split(" ", 1)[1])


def test_draining_incident_status_names_the_drain_attribution() -> None:
    message = render_incident_root(draining(an_incident()))

    assert field_text(message, "Status") == "DRAINING — ECS auto-repair (XID 79)"
    assert field_text(message, "Drain") == "ECS auto-repair (XID 79)"


def test_resolved_incident_says_resolved_with_duration_and_reason() -> None:
    # Given an incident closed 8m30s after it opened
    incident = resolved(draining(an_incident()))

    # When its root message is re-rendered for chat.update
    message = render_incident_root(incident)

    # Then the header, the status and a resolution line say so
    assert header_text(message) == ":white_check_mark: RESOLVED · XID 79: GPU has fallen off the bus"
    assert field_text(message, "Status") == "RESOLVED after 8m 30s"
    [resolution] = [text for text in section_texts(message) if text.startswith(":white_check_mark: *Resolved*")]
    assert resolution.startswith(":white_check_mark: *Resolved* after 8m 30s")
    assert resolution.endswith(": health check OK")
    assert message.text == (
        "RESOLVED after 8m 30s · XID 79: GPU has fallen off the bus · i-0abcdef1234567890 (gpu-training)"
        " · health check OK"
    )


def test_draining_reply_carries_drain_label_and_raw_reason() -> None:
    incident = draining(an_incident())

    message = render_timeline_reply(incident, incident.timeline[-1])

    text = message.blocks[0]["text"]["text"]
    assert text.startswith("*DRAINING* · <!date^1775868593^")
    assert "*Drain:* ECS auto-repair (XID 79)" in text
    assert "*Drain reason:* INSTANCE_HEALTH" in text
    assert message.text == "DRAINING: ECS set the instance DRAINING"


def test_webhook_message_carries_current_status_and_the_step() -> None:
    # Given a drain step of an incident, in webhook mode (no thread, no updates)
    incident = draining(an_incident())

    # When it is rendered
    message = render_webhook_step(incident, incident.timeline[-1])

    # Then the one message says what the incident is, where it stands and what just happened
    assert header_text(message).startswith(":rotating_light: CRITICAL · XID 79")
    assert message.blocks[1]["text"]["text"].startswith("*DRAINING*")
    assert field_text(message, "Status") == "DRAINING — ECS auto-repair (XID 79)"
    assert message.text == (
        "CRITICAL · XID 79: GPU has fallen off the bus · i-0abcdef1234567890 (gpu-training)"
        " · DRAINING: ECS set the instance DRAINING"
    )
    assert_within_slack_limits(message)


def test_a_notice_corrected_in_place_points_at_the_incident_that_explains_it() -> None:
    # Given a drain first announced on its own, and the incident learned later that explains it
    alert = an_alert(text="Draining: manual or scheduled drain (no health fault)")
    incident = draining(an_incident())

    # When the notice is rendered again
    message = render_superseded_alert(alert, incident)

    # Then it says it is part of that incident, naming it, and stays within Slack's limits
    assert header_text(message) == ":information_source: PART OF AN INCIDENT · Instance draining (manual or scheduled)"
    assert "Now part of incident `gpu-training/a1b2c3d4e5f6/ACCELERATED_COMPUTE`" in message.blocks[1]["text"]["text"]
    assert message.text.endswith("i-0abcdef1234567890 (gpu-training)")
    assert_within_slack_limits(message)


def test_alert_shows_severity_instance_and_drain() -> None:
    alert = an_alert(
        title="Manual drain", drain=DrainAttribution(DrainCause.MANUAL_OR_SCHEDULED, "manual or scheduled drain")
    )

    message = render_alert(alert)

    assert header_text(message) == ":information_source: INFO · Manual drain"
    assert field_text(message, "EC2 instance") == "i-0abcdef1234567890"
    assert field_text(message, "Drain") == "manual or scheduled drain"
    assert_within_slack_limits(message)


def test_alert_without_text_is_still_a_valid_message() -> None:
    assert_within_slack_limits(render_alert(an_alert(text="")))


def test_missing_ec2_id_and_capacity_provider_render_as_dashes() -> None:
    instance = dataclasses.replace(INSTANCE, ec2_instance_id=None, capacity_provider=None)

    message = render_incident_root(dataclasses.replace(an_incident(), instance=instance))

    assert field_text(message, "EC2 instance") == "—"
    assert field_text(message, "Capacity provider") == "—"
    assert "a1b2c3d4e5f6" in message.text


# --- Runbooks --------------------------------------------------------------------------------------------------------

XID_79_WHAT_TO_DO = (
    "*What to do:* The GPU fell off the bus: ECS replaces the instance if auto-repair is on; otherwise drain and "
    "replace it.\n*Runbook:* <https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html|NVIDIA Xid catalog: "
    "Xid 79>"
)


def test_open_root_says_what_to_do_with_the_runbook_link_right_under_the_header() -> None:
    message = render_incident_root(an_incident())

    assert message.blocks[1]["text"]["text"] == XID_79_WHAT_TO_DO


def test_resolved_root_keeps_the_runbook_link_but_not_what_to_do() -> None:
    message = render_incident_root(resolved(draining(an_incident())))

    runbook = [text for text in section_texts(message) if "Runbook" in text]
    assert runbook == [
        "*Runbook:* <https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html|NVIDIA Xid catalog: Xid 79>"
    ]
    assert not any("What to do" in text for text in section_texts(message))


def test_webhook_step_says_what_to_do_while_the_incident_is_open() -> None:
    incident = draining(an_incident())

    message = render_webhook_step(incident, incident.timeline[-1])

    assert XID_79_WHAT_TO_DO in section_texts(message)


def test_notice_says_what_to_do_before_its_details() -> None:
    alert = an_alert(details={f"key-{i}": f"value-{i}" for i in range(600)})

    message = render_alert(alert)

    # The block limit cuts details from the end; what to do is never among what it cuts.
    assert section_texts(message)[1].startswith("*What to do:* Nothing for a planned or ECS auto-repair drain")
    assert (
        "<https://docs.aws.amazon.com/AmazonECS/latest/developerguide/container-instance-draining.html|"
        in (section_texts(message)[1])
    )


def test_a_route_runbook_is_escaped_like_any_untrusted_text() -> None:
    # Given a route's runbook whose line and link carry Slack markup (routing files are reviewed, not trusted)
    override = RouteRunbook(action=HOSTILE, url="https://wiki.example.com/gpu?team=a|b&x=<y>")
    incident = dataclasses.replace(an_incident(), runbook=runbook_for(FaultClass.XID_CRITICAL, 79, override=override))

    # When the root message is rendered
    [section] = [text for text in section_texts(render_incident_root(incident)) if "Runbook" in text]

    # Then the line mentions nobody and the link is one well-formed link
    assert section == (
        f"*What to do:* {HOSTILE_ESCAPED}\n"
        "*Runbook:* <https://wiki.example.com/gpu?team=a%7Cb&amp;x=&lt;y&gt;|Runbook (wiki.example.com)>"
    )


def test_the_longest_runbook_a_route_may_give_fits_slack_limits_with_its_link_whole() -> None:
    override = RouteRunbook(action="a" * MAX_ACTION, url="https://wiki.example.com/" + "p" * (MAX_URL - 25))
    incident = dataclasses.replace(an_incident(), runbook=runbook_for(FaultClass.XID_CRITICAL, 79, override=override))

    message = render_incident_root(incident)

    assert_within_slack_limits(message)
    [section] = [text for text in section_texts(message) if "Runbook" in text]
    assert section.endswith("|Runbook (wiki.example.com)>")


def test_an_incident_without_a_runbook_has_no_runbook_section() -> None:
    message = render_incident_root(dataclasses.replace(an_incident(), runbook=None))

    assert not any("Runbook" in text or "What to do" in text for text in section_texts(message))


# --- Nothing left out in silence -------------------------------------------------------------------------------------


def test_a_root_with_a_long_history_counts_the_earlier_steps_and_points_at_the_thread() -> None:
    # Given an incident with 12 steps, one of them muted (it went nowhere, so no thread has it either)
    incident = an_incident()
    incident.timeline = [step(OPENED + timedelta(seconds=i), f"evt-{i}", f"STEP_{i}", f"step {i}") for i in range(12)]
    incident.timeline[3] = dataclasses.replace(incident.timeline[3], muted="inhibited")

    # When its root is rendered
    [latest] = [text for text in section_texts(render_incident_root(incident)) if text.startswith("*Latest*")]

    # Then it says how many earlier steps are in the thread, then the newest three
    lines = latest.split("\n")
    assert lines[1] == "…8 earlier steps: see the thread"
    assert [line.split("*")[1] for line in lines[2:]] == ["STEP_9", "STEP_10", "STEP_11"]


def test_a_root_with_a_short_history_has_no_count() -> None:
    [latest] = [text for text in section_texts(render_incident_root(an_incident())) if text.startswith("*Latest*")]

    assert "earlier" not in latest


def test_a_step_cut_short_in_the_root_says_its_thread_reply_has_more() -> None:
    # Given a step whose text is longer than a root's line
    incident = an_incident()
    entry = step(OPENED, "evt-long", "TASK_STOPPED", "t" * 1000)
    incident.timeline = [entry]

    # When the root and the step's thread reply are rendered
    [latest] = [text for text in section_texts(render_incident_root(incident)) if text.startswith("*Latest*")]
    reply = render_timeline_reply(incident, entry).blocks[0]["text"]["text"]

    # Then the root's line points at the thread, where the reply has the whole text
    assert latest.endswith("t… (more in the thread)")
    assert reply.endswith("t" * 1000)


def test_a_thread_reply_gives_a_long_step_all_the_room_of_its_section_and_says_what_it_cut() -> None:
    # Given a draining step with a long text and a long drain reason
    drain = DrainAttribution(DrainCause.ECS_REPORTED, "ECS reported", "r" * 5_000)
    incident = draining(an_incident(), drain)
    entry = step(OPENED, "evt-long", "DRAINING", "t" * 20_000)

    # When its thread reply is rendered
    message = render_timeline_reply(incident, entry)

    # Then the section is full, the text and the drain reason each say they were cut, the drain label is whole
    text = message.blocks[0]["text"]["text"]
    assert len(text) == 3000
    phase, body, label, reason = text.split("\n")
    assert phase.startswith("*DRAINING* · ")
    assert body.endswith("t… (shortened)")
    assert len(body) > 2000
    assert label == "*Drain:* ECS reported"
    assert reason.endswith("r… (shortened)")
    assert_within_slack_limits(message)


def test_context_elements_past_ten_share_the_last_one_so_no_quiet_reason_is_dropped() -> None:
    # Given an incident quiet for 14 different reasons
    muted = {f"receiver-{n}": f"silence {n:02d}" for n in range(14)}
    incident = dataclasses.replace(an_incident(), muted=muted)

    # When its root is rendered without a dashboard link
    [context] = [block for block in render_incident_root(incident).blocks if block["type"] == "context"]

    # Then there are ten elements and every reason is in one of them
    texts = [element["text"] for element in context["elements"]]
    assert len(texts) == MAX_CONTEXT_ELEMENTS
    assert all(f"Quiet: silence {n:02d}" in " · ".join(texts) for n in range(14))


def test_the_block_limit_guard_names_what_it_drops_and_keeps_the_closing_blocks() -> None:
    # Given 60 blocks: a header, 57 sections, buttons and a context
    header = {"type": "header", "text": {"type": "plain_text", "text": "Fleet"}}
    sections = [{"type": "section", "text": {"type": "mrkdwn", "text": f"member {i}\nmore"}} for i in range(57)]
    closing = [{"type": "actions", "elements": []}, {"type": "context", "elements": []}]

    # When they are fitted to Slack's 50
    fitted = slack._fit([header, *sections, *closing], where=": the thread has each one")

    # Then the header, the first 46 sections, a note naming the 11 dropped ones, and the closing blocks remain
    assert len(fitted) == 50
    assert fitted[:47] == [header, *sections[:46]]
    assert fitted[47]["elements"][0]["text"] == (
        "11 more blocks not shown (" + "; ".join(f"member {i}" for i in range(46, 57)) + "): the thread has each one"
    )
    assert fitted[48:] == closing


def test_an_incident_whose_ids_are_too_long_for_a_button_says_it_has_no_buttons() -> None:
    # Given an instance whose ARN makes a button value longer than Slack allows
    arn = INSTANCE.container_instance_arn + "x" * 2000
    incident = dataclasses.replace(an_incident(), instance=dataclasses.replace(INSTANCE, container_instance_arn=arn))

    # When its root is rendered
    message = render_incident_root(incident)

    # Then there are no buttons, and a line says why
    assert not any(block["type"] == "actions" for block in message.blocks)
    assert "No buttons: this incident's ids exceed Slack's 2,000 characters per button" in json.dumps(message.blocks)
    assert_within_slack_limits(message)


def test_the_opening_step_cut_short_in_the_root_says_so_without_pointing_at_a_thread_reply_it_has_none() -> None:
    # Given an incident whose opening step (said by the root itself, never a thread reply) is long
    incident = an_incident(reason="XID_79 " + "x" * 1000)

    # When its root is rendered
    [latest] = [text for text in section_texts(render_incident_root(incident)) if text.startswith("*Latest*")]

    # Then the line says it was shortened (the Reason field has more)
    assert latest.endswith("x… (shortened)")


def test_a_root_of_long_hostile_text_everywhere_stays_within_the_text_slack_takes_in_one_message() -> None:
    # Given an incident whose every free text is thousands of characters long
    long = HOSTILE * 500
    incident = resolved(an_incident(reason=long, title=long), reason=long)
    incident = dataclasses.replace(
        incident,
        route=long,
        found=long,
        fleet_id=long,
        muted={f"receiver-{n}": f"{n} {long}" for n in range(12)},
        drain=DrainAttribution(DrainCause.ECS_REPORTED, long, long),
    )

    # When its root is rendered
    message = render_incident_root(incident)

    # Then its blocks hold no more text than Slack takes in one message, the longest texts each cut saying so
    texts = [obj["text"] for obj in text_objects(message) if isinstance(obj.get("text"), str)]
    assert sum(len(text) for text in texts) <= MAX_MESSAGE_TEXT
    assert sum(text.endswith("… (shortened)") for text in texts) >= 5
    assert_within_slack_limits(message)


def test_a_message_within_the_text_budget_is_left_as_it_is() -> None:
    message = render_incident_root(draining(an_incident()))

    assert not any("(shortened)" in json.dumps(block) for block in message.blocks)
