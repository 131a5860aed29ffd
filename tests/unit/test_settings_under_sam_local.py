"""The functions' settings read a variable that `sam local` declares empty as the deployed function reads it unset.

On Lambda, a variable whose template value is a condition's AWS::NoValue is not set at all; `sam local` does not
resolve Fn::If and declares it as the empty string (docs: README.md, "Replay events"). The settings read an empty
value as unset wherever the setting's default is empty, so both run with the default.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fault_responder.wiring.alert_router import RouterSettings
from fault_responder.wiring.pagerduty_webhook import WebhookSettings
from fault_responder.wiring.resume_training import ResumeSettings
from fault_responder.wiring.slack_actions import ActionsSettings
from sandbox.template import load_template

ROOT = Path(__file__).resolve().parents[2]
SETTINGS: tuple[type[BaseModel], ...] = (RouterSettings, ResumeSettings, ActionsSettings, WebhookSettings)
NO_VALUE = {"Ref": "AWS::NoValue"}


def _conditional_variables() -> Iterator[tuple[str, str]]:
    """(where, variable) for each environment variable the template values with a condition that may leave it out."""
    body = load_template(ROOT / "template.yaml").body
    places: list[tuple[str, Any]] = [("Globals", body.get("Globals", {}).get("Function", {}))]
    places += [
        (name, r.get("Properties", {}))
        for name, r in body["Resources"].items()
        if r["Type"] == "AWS::Serverless::Function"
    ]
    for where, properties in places:
        for name, value in ((properties.get("Environment") or {}).get("Variables") or {}).items():
            if isinstance(value, dict) and "Fn::If" in value and NO_VALUE in value["Fn::If"][1:]:
                yield where, name


CONDITIONAL = sorted(set(_conditional_variables()))


def test_the_template_has_variables_that_a_condition_may_leave_out() -> None:
    # (else the test below checks nothing)
    assert CONDITIONAL


@pytest.mark.parametrize(("where", "variable"), CONDITIONAL, ids=[f"{w}-{v}" for w, v in CONDITIONAL])
def test_a_variable_a_condition_may_leave_out_has_an_empty_default_wherever_it_is_read(
    where: str, variable: str
) -> None:
    readers = [model for model in SETTINGS if any(f.alias == variable for f in model.model_fields.values())]
    for model in readers:
        [field] = [f for f in model.model_fields.values() if f.alias == variable]
        # Given sam local's empty value, Then the setting reads it as unset: it is optional and empty by default
        assert not field.is_required(), f"{model.__name__}.{variable} ({where}) is required"
        assert not field.get_default(call_default_factory=True), f"{model.__name__}.{variable} ({where})"


def test_the_routers_settings_read_sam_locals_empty_variables_as_unset() -> None:
    # Given the router's variables as sam local declares them with the organization's bus off
    base = {"INCIDENTS_TABLE": "t", "SLACK_SECRET_NAME": "s", "PAGERDUTY_SECRET_NAME": "p", "ALERT_DLQ_URL": "q"}
    empty = {variable: "" for where, variable in CONDITIONAL if where in ("AlertRouterFunction", "Globals")}

    # When they are read, Then they are the settings of the variables left out
    assert RouterSettings.from_env({**base, **empty}) == RouterSettings.from_env(base)
    assert RouterSettings.from_env({**base, **empty}).enrollment() is None


def test_an_empty_value_stays_as_given_where_the_default_is_not_empty() -> None:
    # Given the routing file named empty (its default is default.yaml)
    base = {"INCIDENTS_TABLE": "t", "SLACK_SECRET_NAME": "s", "PAGERDUTY_SECRET_NAME": "p", "ALERT_DLQ_URL": "q"}

    # Then it is read as given, not replaced by the default
    assert RouterSettings.from_env({**base, "ROUTING_FILE": ""}).routing_file == ""
