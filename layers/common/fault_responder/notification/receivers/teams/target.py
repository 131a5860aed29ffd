"""The routing file's `teams` receiver: which Workflows webhook URL of the Teams secret it posts to."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fault_responder.routing.router import Name


class TeamsTarget(BaseModel):
    """`receivers: [{name: ..., teams: {webhook: <name>}}]`: the name of a URL in the Teams secret's
    `webhook_urls` (docs/teams.md). The URL itself is the secret; the routing file never holds it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    webhook: Name = Field(description="A key of the Teams secret's webhook_urls.")
