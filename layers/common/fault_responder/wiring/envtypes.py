"""Types for reading the functions' environment with pydantic."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def _names(value: Any) -> Any:
    """A comma-delimited stack parameter (CommaDelimitedList joined by !Join) as a tuple of names."""
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


Names = Annotated[tuple[str, ...], BeforeValidator(_names)]
