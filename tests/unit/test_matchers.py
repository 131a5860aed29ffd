"""Label matchers as Alertmanager writes them: what silences and inhibition rules select with."""

from __future__ import annotations

import pytest

from fault_responder.routing.matchers import MatcherError, Op, matches_all, parse_matcher, parse_matchers

LABELS = {"cluster": "gpu-training", "xid": "79", "severity": "critical", "capacity_provider": ""}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cluster=gpu-training", True),
        ("cluster=gpu", False),
        ("cluster!=gpu", True),
        ("xid=~7[49]", True),
        ("xid=~7", False),  # anchored: the whole value must match
        ("xid!~4.", True),
        ('capacity_provider=""', True),  # an empty label is the empty string
        ('capacity_provider!=""', False),
        ("instance=", True),  # a label the incident does not have is empty too
        ('severity=~"critical|error"', True),
    ],
)
def test_a_matcher_selects_as_alertmanager_does(text: str, expected: bool) -> None:
    assert parse_matcher(text).matches(LABELS) is expected


def test_every_matcher_must_hold() -> None:
    matchers = parse_matchers(["cluster=gpu-training", "xid=79"])
    assert matches_all(matchers, LABELS)
    assert not matches_all([*matchers, parse_matcher("severity=warning")], LABELS)


def test_a_quoted_value_keeps_spaces_and_escaped_quotes_and_prints_back() -> None:
    matcher = parse_matcher(r'cluster = "a \"b\" c"')
    assert (matcher.name, matcher.op, matcher.value) == ("cluster", Op.EQUAL, 'a "b" c')
    assert parse_matcher(str(matcher)) == matcher


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("team=ml", "unknown label 'team'"),
        ("cluster", "is not a matcher"),
        ("xid=~(7", "not a regular expression"),
        ('cluster="a', "quote the whole value"),
        ('cluster="a"b"', "a quote inside a quoted value"),
        ("cluster=" + "x" * 300, "longer than 256"),
    ],
)
def test_a_bad_matcher_is_refused_with_a_reason(text: str, says: str) -> None:
    with pytest.raises(MatcherError, match=says):
        parse_matcher(text)
