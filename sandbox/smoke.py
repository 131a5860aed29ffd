"""`python -m sandbox smoke --world FILE`: the world the samples name, seeded before they are invoked.

The samples of events/ were recorded from scenario runs (events/README.md, "The workflow's task inputs") and name
that run's world: the cluster, its capacity provider and instances, the job's task, the checkpoints. A world file
(events/world.yaml) says what that world was, in the scenario format's `world:` (docs/scenarios.md), and which ids
of the samples stand for which seeded thing:

    region: us-west-2        # the samples' Region, the sandbox's: ARNs made of names (a cluster's) are theirs
    world: {clusters: [...], checkpoints: [...]}
    ids:                     # an id moto picks itself, as the samples write it: the seeded thing's
      7c2e9a4b1d3f4e6a8b0c2d4e6f8a0b1c: "{{instances.gpu-a.id}}"

The world is seeded through sandbox/world.py, as a scenario's is, with the ECS emulation installed for the whole
smoke. Each sample is then invoked with every occurrence of an `ids` key in its string values replaced by the seeded
value; nothing else of it changes, and a sample that names none of them is invoked as it is.

What the functions themselves make (the claim, the task snapshot, the ledger's attempts, the incident the alert
pipeline opens) is not seeded: the functions make it, invoked in the order the workflow runs them (the Makefile's
SMOKE_INVOCATIONS).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sandbox import scenario as model
from sandbox.ecs_emulation import EcsEmulation
from sandbox.errors import SandboxError
from sandbox.session import Sandbox
from sandbox.world import map_strings, seed_world

OntoWorld = Callable[[Any], Any]
"""A sample -> the same sample about the seeded world."""


class SampleWorld(BaseModel):
    """A world file (see the module's docstring); unknown keys are errors, as in a scenario."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    """The Region the samples name: the sandbox's."""
    world: model.World
    ecs: model.EcsSettings = model.EcsSettings()
    ids: dict[str, str] = {}
    """An id of the samples -> the seeded thing's, as a `{{placeholder}}` of the seeded world."""

    @field_validator("world")
    @classmethod
    def _no_trainers(cls, world: model.World) -> model.World:
        if world.trainers:
            raise ValueError("trainers: the smoke emulates no training (a scenario does)")
        return world

    @field_validator("ids")
    @classmethod
    def _ids_are_text(cls, ids: dict[str, str]) -> dict[str, str]:
        if any(not sample.strip() for sample in ids):
            raise ValueError("an id must not be empty")
        return ids


def load_sample_world(path: Path) -> SampleWorld:
    return model.load_yaml_model(path, SampleWorld, "world file")


@contextlib.contextmanager
def seeded(sandbox: Sandbox, sample_world: SampleWorld | None) -> Iterator[OntoWorld]:
    """The world seeded into the started sandbox, its ECS emulated until the block ends; yields what puts a sample
    onto it. No world: nothing is seeded, and samples are invoked as they are."""
    if sample_world is None:
        yield lambda document: document
        return
    identity = sandbox.identity
    if identity.region != sample_world.region:
        raise SandboxError(f"the samples' world is in {sample_world.region}, the sandbox in {identity.region}")
    with EcsEmulation(
        account_id=identity.account_id,
        region=identity.region,
        start_after_describes=sample_world.ecs.start_after_describes,
        stop_after_describes=sample_world.ecs.stop_after_describes,
    ) as emulation:
        world = seed_world(sample_world.world, sandbox.aws, emulation, sandbox.stack)
        ids = {sample: str(world.fill(placeholder)) for sample, placeholder in sample_world.ids.items()}
        yield lambda document: onto_world(document, ids)


def onto_world(document: Any, ids: Mapping[str, str]) -> Any:
    """`document` with each occurrence of a key of `ids` in its string values replaced by its value (the longest key
    first where two overlap); keys of objects are left as they are."""
    if not ids:
        return document
    pattern = re.compile("|".join(re.escape(sample) for sample in sorted(ids, key=len, reverse=True)))
    return map_strings(document, lambda text: pattern.sub(lambda match: ids[match.group(0)], text))
