"""Types for reading the functions' environment with pydantic."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator


def _names(value: Any) -> Any:
    """A comma-delimited stack parameter (CommaDelimitedList joined by !Join) as a tuple of names."""
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


Names = Annotated[tuple[str, ...], BeforeValidator(_names)]


def _receiver_secrets(value: Any) -> Any:
    """RECEIVER_SECRETS, a JSON object of receiver kind -> secret name built by the template from one parameter per
    kind: the kinds whose parameter is empty (unused) are left out."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError("RECEIVER_SECRETS is not JSON: it is an object of receiver kind -> secret name") from None
    if isinstance(value, Mapping):
        return {kind: name for kind, name in value.items() if name != ""}
    return value


ReceiverSecrets = Annotated[dict[str, str], BeforeValidator(_receiver_secrets)]
"""Each receiver kind's secret name, for the kinds the stack uses beside Slack and PagerDuty."""


def declared(model: type[BaseModel], env: Mapping[str, str]) -> dict[str, str]:
    """The environment as `model` reads it: a variable set to the empty string is read as unset where the setting's
    default is itself empty (off, none, nothing listed).

    A variable the template values with a condition's AWS::NoValue is absent on Lambda, but `sam local` does not
    resolve Fn::If and declares it empty; either way the function then runs with the setting's default. A setting
    whose default is not empty keeps an empty value as given (and its validation decides)."""
    empty_by_default = {
        field.alias
        for field in model.model_fields.values()
        if field.alias is not None and not field.is_required() and not field.get_default(call_default_factory=True)
    }
    return {name: value for name, value in env.items() if value != "" or name not in empty_by_default}
