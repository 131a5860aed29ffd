"""The local stack the containers run against: the sandbox's moto and stand-ins on the bridge's address, the stack's
resources created from the built template, the world of the samples seeded (sandbox/smoke.py), and the files `sam
local` reads (FILES_DIR):

- `samconfig.toml`: the options of `sam local invoke` and `sam local start-lambda` for this stack (the built
  template, the parameters, the variables file, the image, the Region), so that a command names only the function and
  its event: `sam local invoke AlertRouterFunction --config-file .aws-sam/local/samconfig.toml -e EVENT`;
- `env.json` (`--env-vars`): each function's variables as the sandbox's deploy resolved them (its table and queue
  names, the notifier secrets, the stand-ins' URLs), and AWS_ENDPOINT_URL, moto's. SAM passes a container only the
  variables the template declares: AWS_ENDPOINT_URL is declared through the LocalAwsEndpointUrl parameter
  (template.yaml), which the config sets too;
- `events/<Function>.json`: each sample as that function receives it (an EventBridge envelope in an SQS event for the
  router, a Slack request signed again now), with the ids of the seeded world.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import urlsplit

from local.image import LambdaImage
from sandbox.event_fit import Trigger, check_fit
from sandbox.invoke import load_built_template, prepare_event, prepare_request, require_function
from sandbox.replay import read_json_file
from sandbox.session import DEFAULT_REGION, DEFAULT_STACK_NAME, Sandbox
from sandbox.smoke import OntoWorld, SampleWorld, load_sample_world, seeded
from sandbox.template import Resolver, StackIdentity, Template, TemplateError, resolve_parameters

FILES_DIR = Path(".aws-sam/local")
ENDPOINT_PARAMETER = "LocalAwsEndpointUrl"


class Network(Protocol):
    """Where the containers are (local.engine.Engine): this machine's address on their bridge, and the firewall."""

    @property
    def gateway(self) -> str: ...

    @property
    def subnet(self) -> str: ...

    def allow(self, port: int) -> None:
        """Let the containers open TCP connections to `port` on `gateway`."""


@dataclass(frozen=True)
class Planned:
    """A function, its sample, and the event it is invoked with."""

    function: str
    sample: Path
    trigger: Trigger
    payload: Any
    note: str
    event_file: Path
    """The sample itself when the function takes it as it is, else <files>/events/<Function>.json."""


def functions_of(template: Template, parameter_overrides: Mapping[str, str]) -> list[str]:
    """The functions the template creates with these parameters (its conditions evaluated), in the template's order."""
    resolver = Resolver(
        template, StackIdentity(DEFAULT_STACK_NAME), resolve_parameters(template, parameter_overrides), _NoResources()
    )
    return [
        name
        for name, resource in template.resources.items()
        if resource.get("Type") == "AWS::Serverless::Function" and resolver.is_enabled(name)
    ]


class _NoResources:
    """Conditions name parameters only: nothing is deployed when they are evaluated."""

    def ref(self, logical_id: str) -> Any:
        raise TemplateError(f"a condition refers to resource {logical_id}")

    def get_att(self, logical_id: str, attribute: str) -> Any:
        raise TemplateError(f"a condition refers to {logical_id}.{attribute}")


class LocalStack:
    """`with LocalStack(...) as stack:` moto and the stand-ins listen on the bridge's address, the firewall lets the
    containers reach their ports, and the world is seeded; all of it stops on exit."""

    def __init__(
        self,
        build_dir: Path,
        world: Path | None,
        parameter_overrides: Mapping[str, str],
        engine: Network,
        files: Path = FILES_DIR,
    ) -> None:
        self.build_dir = build_dir
        self.template = load_built_template(build_dir)
        self.world: SampleWorld | None = load_sample_world(world) if world is not None else None
        self.region = self.world.region if self.world is not None else DEFAULT_REGION
        self.parameter_overrides = dict(parameter_overrides)
        self.engine = engine
        self.files = files
        self.sandbox = Sandbox(
            self.template, region=self.region, parameter_overrides=self.parameter_overrides, host=engine.gateway
        )
        self._exit_stack: contextlib.ExitStack | None = None
        self._onto_world: OntoWorld | None = None

    def __enter__(self) -> LocalStack:
        with contextlib.ExitStack() as exit_stack:
            exit_stack.enter_context(self.sandbox)
            for url in (self.sandbox.moto_endpoint, self.sandbox.standins.base_url):
                self.engine.allow(int(urlsplit(url).port or 80))
            self._onto_world = exit_stack.enter_context(seeded(self.sandbox, self.world))
            self._exit_stack = exit_stack.pop_all()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._exit_stack is not None:
            self._exit_stack.close()
            self._exit_stack = None

    def plan(self, function: str, sample: Path) -> Planned:
        """`sample` as `function` receives it, about the seeded world; an event that does not fit is refused."""
        require_function(self.template, function)
        original = read_json_file(sample)
        trigger = check_fit(self.template, function, original, sample)
        if self._onto_world is None:
            raise RuntimeError("the local stack is not started: use it as a context manager")
        document = self._onto_world(original)
        if trigger is Trigger.URL:
            prepared = prepare_request(document, self.sandbox.standins)
        else:
            prepared = prepare_event(document, self.sandbox.stack.functions[function], self.region)
        unchanged = prepared.payload == original
        event_file = sample if unchanged else self.files / "events" / f"{function}.json"
        return Planned(function, sample, trigger, prepared.payload, prepared.note, event_file)

    def sam_parameters(self) -> str:
        """--parameter-overrides for sam local: the build's, and moto's endpoint."""
        values = {**self.parameter_overrides, ENDPOINT_PARAMETER: self.sandbox.moto_endpoint}
        return " ".join(f"{name}={value}" for name, value in values.items())

    def environment_file(self) -> dict[str, dict[str, str]]:
        """env.json: every variable each function declares, valued as the sandbox deployed it, AWS_ENDPOINT_URL moto."""
        sections = {}
        for function, spec in self.sandbox.stack.functions.items():
            values = self.sandbox.function_environment(spec)
            declared = {*spec.environment, "AWS_ENDPOINT_URL"}
            sections[function] = {name: values[name] for name in sorted(declared) if name in values}
        return sections

    def write_files(self, image: LambdaImage, planned: list[Planned], start_lambda_port: int) -> None:
        """samconfig.toml, env.json and events/ for this stack (the module's docstring)."""
        (self.files / "events").mkdir(parents=True, exist_ok=True)
        env_vars = self.files / "env.json"
        env_vars.write_text(json.dumps(self.environment_file(), indent=2) + "\n")
        for item in planned:
            if item.event_file != item.sample:
                item.event_file.write_text(json.dumps(item.payload, indent=2) + "\n")
        common = {
            "template_file": str((self.build_dir / "template.yaml").resolve()),
            "parameter_overrides": self.sam_parameters(),
            "env_vars": str(env_vars.resolve()),
            "region": self.region,
            "skip_pull_image": True,
        }
        if not image.official:
            common["invoke_image"] = [image.name]
        start_lambda = {**common, "host": "127.0.0.1", "port": start_lambda_port, "warm_containers": "LAZY"}
        lines = [
            "# Written by local/stack.py for the local stack running now (make local-up, make local-invoke): the",
            "# endpoint, the image and the port change from run to run. `sam local ... --config-file` reads it.",
            "version = 0.1",
            "",
            "[default.local_invoke.parameters]",
            *(_toml(name, value) for name, value in common.items()),
            "",
            "[default.local_start_lambda.parameters]",
            *(_toml(name, value) for name, value in start_lambda.items()),
        ]
        (self.files / "samconfig.toml").write_text("\n".join(lines) + "\n")


def _toml(name: str, value: Any) -> str:
    return f"{name} = {json.dumps(value)}"
