"""fit_lines and fit_fields: lists fitted into Slack messages by characters, with what they leave out counted.

The defect they fix: a fleet root listed its first 40 members in sections of 20 lines of ~290 characters, Slack's
3,000-character section limit cut each section in half, and "…and 60 more" counted only the members past 40, so
20 listed members appeared nowhere and nothing said so.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fault_responder.notification.render.blocks import (
    MAX_FIELDS_PER_SECTION,
    MAX_LISTING_TEXT,
    MAX_SECTION_TEXT,
    SHORTENED,
    _section,
    _slack_time,
    fit_fields,
    fit_lines,
)
from sandbox.standins import block_errors
from tests.builders import OPENED

MORE = re.compile(r"…and (\d+) more")


def member_line(n: int) -> str:
    """A fleet member's line as the fleet root writes it: a console link, the fault, the state, since when."""
    instance = f"{n:018x}"
    url = (
        "https://us-west-2.console.aws.amazon.com/ecs/v2/clusters/gpu-training/infrastructure/container-instances/"
        f"{instance}?region=us-west-2"
    )
    since = _slack_time(OPENED + timedelta(seconds=n))
    return f"• <{url}|{instance}> · XID 79: GPU has fallen off the bus · IMPAIRED since {since}"


MEMBERS = [member_line(n) for n in range(100)]


def more_members(count: int) -> str:
    return f"…and {count} more: the thread names each one"


def section_lines(blocks: list[dict[str, Any]]) -> list[str]:
    return [line for block in blocks for line in block["text"]["text"].split("\n")]


def shown_or_counted(blocks: list[dict[str, Any]], members: list[str]) -> tuple[int, int]:
    """How many members appear whole, and how many the note says are left out."""
    lines = section_lines(blocks)
    whole = sum(1 for member in members if member in lines)
    stated = [int(match.group(1)) for line in lines if (match := MORE.match(line))]
    return whole, sum(stated)


def sections_of_20_lines(members: list[str]) -> list[dict[str, Any]]:
    """The member list as render/fleet.py wrote it at 2e2583a: the first 40 members in sections of 20 lines, each
    section cut at Slack's limit, then "…and N more" for the members past 40."""
    lines = members[:40]
    blocks = [
        _section(("*Members*\n" if start == 0 else "") + "\n".join(lines[start : start + 20]))
        for start in range(0, len(lines), 20)
    ]
    if len(members) > 40:
        blocks.append(_section(f"…and {len(members) - 40} more: the thread names each one as it joins and leaves."))
    return blocks


def fitted(members: list[str]) -> list[dict[str, Any]]:
    return fit_lines(members, title="*Members*", max_chars=MAX_LISTING_TEXT, left_out=more_members).blocks


def assert_every_member_is_shown_whole_or_counted(render: Callable[[list[str]], list[dict[str, Any]]]) -> None:
    # Given 100 fleet members whose lines are ~290 characters each
    assert all(280 <= len(member) <= 300 for member in MEMBERS)

    # When the member list is rendered
    blocks = render(MEMBERS)

    # Then every member is either on a line of its own, whole, or counted by the note, and Slack takes the blocks
    assert block_errors(blocks) == []
    whole, stated = shown_or_counted(blocks, MEMBERS)
    assert whole + stated == len(MEMBERS)


def test_a_hundred_members_of_290_characters_are_each_shown_whole_or_counted() -> None:
    assert_every_member_is_shown_whole_or_counted(fitted)


def test_the_same_check_fails_on_the_sections_of_20_lines_of_2e2583a() -> None:
    # The check above can fail: on the old listing, 20 of the 40 listed members are cut off and counted nowhere.
    whole, stated = shown_or_counted(sections_of_20_lines(MEMBERS), MEMBERS)
    assert (whole, stated) == (20, 60)
    with pytest.raises(AssertionError):
        assert_every_member_is_shown_whole_or_counted(sections_of_20_lines)


def test_forty_members_of_290_characters_all_appear_whole_in_as_few_sections_as_they_need() -> None:
    # Given the 40 members a fleet root lists
    members = MEMBERS[:40]

    # When they are fitted with no budget but Slack's block limit
    listing = fit_lines(members, title="*Members*", left_out=more_members)

    # Then all 40 are there, whole, in order, in 4 sections (10 lines of ~290 characters fill 3,000), none over
    assert section_lines(listing.blocks) == ["*Members*", *members]
    assert (listing.shown, listing.left_out) == (40, 0)
    assert len(listing.blocks) == 4
    assert all(len(block["text"]["text"]) <= MAX_SECTION_TEXT for block in listing.blocks)


def test_within_a_character_budget_the_note_counts_exactly_the_members_not_shown() -> None:
    listing = fit_lines(MEMBERS, title="*Members*", max_chars=MAX_LISTING_TEXT, left_out=more_members)

    lines = section_lines(listing.blocks)
    assert lines == ["*Members*", *MEMBERS[: listing.shown], more_members(100 - listing.shown)]
    assert listing.left_out == 100 - listing.shown
    assert listing.chars == sum(len(block["text"]["text"]) for block in listing.blocks) <= MAX_LISTING_TEXT


def test_within_a_block_budget_the_note_counts_exactly_the_members_not_shown() -> None:
    listing = fit_lines(MEMBERS, title="*Members*", max_blocks=2, left_out=more_members)

    assert len(listing.blocks) == 2
    assert section_lines(listing.blocks)[-1] == more_members(listing.left_out)
    assert listing.shown + listing.left_out == 100


def test_the_note_makes_room_for_itself_by_leaving_out_one_more_line() -> None:
    # Given five lines of 999 characters, three of which fill a section exactly (2,999 characters)
    lines = [str(n) * 999 for n in range(5)]

    # When they are fitted into one section with a note
    listing = fit_lines(lines, max_blocks=1, left_out=more_members)

    # Then two lines are shown and the note counts the other three
    assert section_lines(listing.blocks) == [lines[0], lines[1], more_members(3)]
    assert (listing.shown, listing.left_out) == (2, 3)


def test_a_line_longer_than_a_section_is_cut_and_ends_with_its_marker() -> None:
    marker = "… (full text in the thread)"

    listing = fit_lines(["x" * 5000, "y"], title="*Steps*", marker=marker)

    first, second = listing.blocks
    assert first["text"]["text"] == "*Steps*\n" + "x" * (MAX_SECTION_TEXT - len("*Steps*\n") - len(marker)) + marker
    assert second["text"]["text"] == "y"
    assert (listing.shown, listing.left_out) == (2, 0)


def test_max_line_cuts_each_longer_line_saying_so_and_leaves_shorter_ones_whole() -> None:
    listing = fit_lines(["a" * 500, "b" * 100], max_line=300)

    assert section_lines(listing.blocks) == ["a" * (300 - len(SHORTENED)) + SHORTENED, "b" * 100]


def test_a_cut_never_leaves_half_an_entity_or_half_a_link() -> None:
    listing = fit_lines(["&amp;" * 100, "<https://example.com|" + "l" * 400 + ">"], max_line=100)

    assert section_lines(listing.blocks) == ["&amp;" * 17 + SHORTENED, SHORTENED]


def test_a_blank_line_shows_as_a_dash_since_slack_refuses_an_empty_text() -> None:
    listing = fit_lines(["", "  "])

    assert section_lines(listing.blocks) == ["—", "—"]
    assert block_errors(listing.blocks) == []


def test_no_lines_no_blocks() -> None:
    assert fit_lines([], title="*Members*", left_out=more_members) == fit_lines([])
    assert fit_lines([]).blocks == []


def test_when_not_even_the_note_fits_there_are_no_blocks_and_every_line_is_left_for_the_caller_to_count() -> None:
    listing = fit_lines(MEMBERS, max_chars=20, left_out=more_members)

    assert (listing.blocks, listing.shown, listing.left_out) == ([], 0, 100)


def test_fields_fill_sections_of_ten_and_the_last_field_counts_the_rest() -> None:
    # Given 25 fields
    fields = [(f"key-{n}", f"value-{n}") for n in range(25)]

    # When they are fitted into two sections with a note
    listing = fit_fields(fields, max_blocks=2, left_out=lambda count: f"*Not shown*\n{count} more")

    # Then 19 fields and the note fill the two sections, and the note counts the other 6
    texts = [field["text"] for block in listing.blocks for field in block["fields"]]
    assert texts == [f"*key-{n}*\nvalue-{n}" for n in range(19)] + ["*Not shown*\n6 more"]
    assert [len(block["fields"]) for block in listing.blocks] == [MAX_FIELDS_PER_SECTION, MAX_FIELDS_PER_SECTION]
    assert (listing.shown, listing.left_out) == (19, 6)


def test_a_field_longer_than_slack_allows_is_cut_saying_so() -> None:
    listing = fit_fields([("Reason", "r" * 5000)])

    [field] = listing.blocks[0]["fields"]
    assert field["text"] == "*Reason*\n" + "r" * (2000 - len("*Reason*\n") - len(SHORTENED)) + SHORTENED


# --- Property: whatever the lines and the budget -----------------------------------------------------------------

# Slack's control characters, mrkdwn's markup, wide and right-to-left characters: no newline (one line each).
_LINE_CHARACTERS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\n") | st.sampled_from(
    list("&<>|*_~`@#!🚀\u202e")
)
_LINES = st.lists(
    st.builds(lambda part, times: part * times, st.text(_LINE_CHARACTERS, max_size=40), st.integers(1, 200)),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(
    lines=_LINES,
    title=st.none() | st.sampled_from(["*Members*", "*Latest*"]),
    max_blocks=st.integers(0, 8),
    max_chars=st.none() | st.integers(0, 20_000),
    max_line=st.integers(20, MAX_SECTION_TEXT),
    with_note=st.booleans(),
)
def test_any_lines_fit_within_every_limit_and_each_is_shown_in_order_or_counted(
    lines: list[str], title: str | None, max_blocks: int, max_chars: int | None, max_line: int, with_note: bool
) -> None:
    # Given any lines and any budget, When they are fitted
    note = (lambda count: f"…and {count} more: see the thread") if with_note else None
    listing = fit_lines(
        lines, title=title, max_blocks=max_blocks, max_chars=max_chars, max_line=max_line, left_out=note
    )

    # Then Slack takes the blocks, within the budget
    texts = [block["text"]["text"] for block in listing.blocks]
    assert block_errors(listing.blocks) == []
    assert len(listing.blocks) <= max_blocks
    assert listing.chars == sum(len(text) for text in texts) <= (max_chars if max_chars is not None else 10**9)

    # And the first `shown` lines are there in order, each whole or cut saying so, then the note counting the rest
    assert listing.shown + listing.left_out == len(lines)
    shown = [line for text in texts for line in text.split("\n")]
    if title and listing.blocks:
        assert shown.pop(0) == title
    if listing.left_out and note is not None and listing.blocks:
        assert shown.pop() == note(listing.left_out)
    assert len(shown) == listing.shown
    for given_line, line in zip(lines, shown, strict=False):
        expected = given_line if given_line.strip() else "—"
        assert line == expected or (line.endswith(SHORTENED) and expected.startswith(line[: -len(SHORTENED)]))
        assert line == expected or len(expected) > min(max_line, MAX_SECTION_TEXT - len(title or "") - 1)

    # And no section could have taken the line that opens the next: as few sections as the lines need
    for text, following in itertools.pairwise(texts):
        assert len(text) + 1 + len(following.split("\n")[0]) > MAX_SECTION_TEXT
