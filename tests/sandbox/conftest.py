"""Shared helpers for the sandbox's tests: paths, templates resolved without AWS, event builders."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from sandbox.stack import RuleSpec
from sandbox.template import Resolver, StackIdentity, Template, load_template, resolve_parameters

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = REPO_ROOT / "template.yaml"
FIXTURES = Path(__file__).parent / "fixtures"
TOY_STACK = FIXTURES / "toy-stack.yaml"
# The verbatim AWS documentation samples, as the repository ships them.
AWS_DOCS_EVENTS = REPO_ROOT / "events" / "aws-docs"


class FakeAttributes:
    """Resource attributes for resolving a template without creating anything: `<Id>` and `<Id.Attr>`."""

    def ref(self, logical_id: str) -> str:
        return f"<{logical_id}>"

    def get_att(self, logical_id: str, attribute: str) -> str:
        return f"<{logical_id}.{attribute}>"


def resolver_for(template: Template, overrides: Mapping[str, str] | None = None) -> Resolver:
    parameters = resolve_parameters(template, overrides or {})
    return Resolver(template, StackIdentity("test-stack"), parameters, FakeAttributes())


def template_rules(template: Template, overrides: Mapping[str, str] | None = None) -> list[RuleSpec]:
    """The template's rules with their patterns resolved as they would be deployed."""
    resolver = resolver_for(template, overrides)
    return [
        RuleSpec.from_properties(logical_id, resolver.properties(logical_id), name=logical_id, arn=f"<{logical_id}>")
        for logical_id, resource in template.resources.items()
        if resource["Type"] == "AWS::Events::Rule" and resolver.is_enabled(logical_id)
    ]


def ecs_event(detail_type: str, detail: Mapping[str, Any], **envelope: Any) -> dict[str, Any]:
    """A full EventBridge envelope for an ECS event."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": "aws.ecs",
        "account": "123456789012",
        "time": "2026-04-11T00:49:09Z",
        "region": "us-east-1",
        "resources": [],
        "detail": dict(detail),
        **envelope,
    }


def toy_event(**detail: Any) -> dict[str, Any]:
    """An envelope the toy stack's rule matches; `detail` steers the toy handler (fail, raise, page)."""
    return {**ecs_event("Toy Event", detail), "source": "toy.app"}


def aws_docs_event(name: str) -> dict[str, Any]:
    return dict(json.loads((AWS_DOCS_EVENTS / name).read_text()))


def with_detail(event: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    changed = copy.deepcopy(dict(event))
    changed["detail"].update(changes)
    return changed


@pytest.fixture(scope="session")
def real_template() -> Template:
    return load_template(TEMPLATE)


@pytest.fixture(scope="session")
def intrinsics_template() -> Template:
    return load_template(FIXTURES / "intrinsics.yaml")


@pytest.fixture(scope="session")
def toy_template() -> Template:
    return load_template(TOY_STACK)
