"""The sandbox world: moto as the AWS account, the Slack and PagerDuty stand-ins, and the stack
deployed into moto from the template, with the notifier secrets seeded.

One `Sandbox` at a time per process: moto keeps its state in module globals (the sandbox resets it
when it starts), and the environment variables it sets are process-wide.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import requests
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from moto.server import ThreadedMotoServer
from werkzeug.serving import make_server

from sandbox import moto_dynamodb
from sandbox.aws import FAKE_CREDENTIALS, AwsClients
from sandbox.errors import SandboxError
from sandbox.lambda_runtime import lambda_environment, patched_environ
from sandbox.moto_in_process import AnsweredDirectly, answered_in_process
from sandbox.stack import FunctionSpec, Stack, deploy_stack
from sandbox.standin_webhook import SANDBOX_WEBHOOK_ENDPOINT, SANDBOX_WEBHOOK_SECRET
from sandbox.standins import (
    DEFAULT_SLACK_TOKEN,
    PAGERDUTY_WEBHOOK_SECRET,
    RESPONSE_URL_PATH,
    SANDBOX_ROUTING_KEY,
    SLACK_SIGNING_SECRET,
    StandIns,
)
from sandbox.statemachine import moto_settings_restored
from sandbox.template import StackIdentity, Template, resolve_parameters

DEFAULT_STACK_NAME = "gpu-fault-responder"
DEFAULT_REGION = "us-east-1"
# The names the sandbox's notifier secrets give the webhook and the PagerDuty service.
SLACK_WEBHOOK_NAME = "gpu-alerts"
PAGERDUTY_SERVICE_NAME = "gpu-oncall"
TEAMS_WEBHOOK_NAME = "gpu-alerts"
"""The Teams secret's webhook URL (the Teams stand-in's), when the stack names a Teams secret (TeamsSecretName)."""

_T = TypeVar("_T")


class Sandbox:
    """Start with `with Sandbox(...) as sandbox:`; everything stops and the environment is restored on exit."""

    def __init__(
        self,
        template: Template,
        *,
        stack_name: str = DEFAULT_STACK_NAME,
        region: str = DEFAULT_REGION,
        parameter_overrides: Mapping[str, str] | None = None,
        faults: Mapping[str, Any] | None = None,
        calls_over_http: bool = False,
        host: str = "127.0.0.1",
    ) -> None:
        self.template = template
        self.identity = StackIdentity(stack_name, region)
        # Resolved before anything starts, so a bad parameter fails fast with a clear message.
        self.parameters = resolve_parameters(template, parameter_overrides or {})
        self.faults = faults
        self.calls_over_http = calls_over_http
        """False: this process's AWS calls reach moto's app directly (sandbox/moto_in_process.py); True: over HTTP."""
        self.host = host
        """The address moto and the stand-ins listen on, and their URLs name: loopback, or one that Lambda containers
        reach this machine by (local/, `make local-invoke`)."""
        self._exit_stack: contextlib.ExitStack | None = None
        self._stack: Stack | None = None
        self._aws: AwsClients | None = None
        self._standins: StandIns | None = None
        self._moto: _SandboxMotoServer | None = None
        self.moto_endpoint = ""

    def __enter__(self) -> Sandbox:
        with contextlib.ExitStack() as exit_stack:
            # A stack with a state machine switches moto's execution settings on; put them back on exit.
            exit_stack.enter_context(moto_settings_restored())
            port = _free_port(self.host)
            self.moto_endpoint = f"http://{self.host}:{port}"
            exit_stack.enter_context(patched_environ(_aws_environment(self.moto_endpoint, port, self.identity.region)))
            moto = _start_moto(self.host, port)
            exit_stack.callback(moto.stop)
            self._moto = moto
            if not self.calls_over_http:
                exit_stack.enter_context(answered_in_process(self.moto_endpoint, moto.dynamodb))
            _reset_moto(self.moto_endpoint)
            self._aws = AwsClients(self.moto_endpoint, self.identity.region)
            self._standins = StandIns(pagerduty_routing_keys={SANDBOX_ROUTING_KEY}, faults=self.faults).start(self.host)
            exit_stack.callback(self._standins.stop)
            self._stack = deploy_stack(self.template, self.identity, self.parameters, self._aws)
            _seed_notifier_secrets(self.parameters, self._aws, self._standins)
            exit_stack.enter_context(fresh_layer_modules(self._stack))
            self._exit_stack = exit_stack.pop_all()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._exit_stack is not None:
            self._exit_stack.close()
            self._exit_stack = None

    @property
    def stack(self) -> Stack:
        return _started(self._stack)

    @property
    def aws(self) -> AwsClients:
        return _started(self._aws)

    @property
    def standins(self) -> StandIns:
        return _started(self._standins)

    def dynamodb_calls(self) -> list[tuple[float, float, str]]:
        """Every DynamoDB request so far: (started, ended, operation), epoch seconds."""
        return list(_started(self._moto).dynamodb.calls)

    def function_environment(self, spec: FunctionSpec) -> dict[str, str]:
        """What the function sees: its template variables plus moto and the stand-ins as endpoints."""
        endpoints = {
            **FAKE_CREDENTIALS,
            "AWS_ENDPOINT_URL": self.moto_endpoint,
            "SLACK_API_URL": self.standins.slack_api_url,
            "PAGERDUTY_EVENTS_URL": self.standins.pagerduty_url,
            # A press's response_url points at the Slack stand-in (sandbox/standins.py signed_click).
            "SLACK_RESPONSE_URL_PREFIX": self.standins.base_url + RESPONSE_URL_PATH,
            # The sandbox creates no dashboard (a skipped resource): its Slack roots link to none.
            "DASHBOARD_URL": "",
        }
        return lambda_environment(spec, self.identity.region, endpoints)


@contextlib.contextmanager
def fresh_layer_modules(stack: Stack) -> Iterator[None]:
    """The layers' modules imported anew for this sandbox, and the process's own put back afterwards.

    A layer module may read the environment when imported (Powertools' Metrics takes its namespace then):
    imported earlier in this process, by a test say, it would carry that environment into the functions.
    On Lambda every execution environment imports the layer itself; so does each sandbox here (and
    Powertools binds its log handler to the stdout of that moment, which the function runtime captures).
    """
    packages = {
        path.name if path.is_dir() else path.stem
        for layer in stack.of_type("AWS::Serverless::LayerVersion")
        for path in Path(str(layer.attributes.get("ImportDir", ""))).glob("*")
        if (path.is_dir() and (path / "__init__.py").exists()) or path.suffix == ".py"
    }

    def ours(name: str) -> bool:
        return name.split(".", 1)[0] in packages

    saved = {name: module for name, module in sys.modules.items() if ours(name)}
    for name in saved:
        del sys.modules[name]
    try:
        with _fresh_powertools_loggers():
            yield
    finally:
        for name in [name for name in sys.modules if ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)


# Powertools marks a logger it configured with this attribute and, when one exists under the same name,
# reuses it as it is: handler bound to the stdout of its first import, level from its first environment.
_POWERTOOLS_CONFIGURED = "init"


@contextlib.contextmanager
def _fresh_powertools_loggers() -> Iterator[None]:
    """Loggers Powertools configured earlier in this process are set aside, as in a new execution environment."""
    registry = logging.Logger.manager.loggerDict
    saved = {
        name: logger
        for name, logger in registry.items()
        if isinstance(logger, logging.Logger) and getattr(logger, _POWERTOOLS_CONFIGURED, False)
    }
    for name in saved:
        del registry[name]
    try:
        yield
    finally:
        registry.update(saved)


def _started(value: _T | None) -> _T:
    if value is None:
        raise RuntimeError("the sandbox is not running: use it as a context manager")
    return value


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _aws_environment(endpoint: str, port: int, region: str) -> dict[str, str | None]:
    """Point every boto3 client in the process at moto, and cut every path to real AWS."""
    environment: dict[str, str | None] = {
        **FAKE_CREDENTIALS,
        "MOTO_PORT": str(port),
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        # A profile or config file could carry other credentials or endpoints.
        "AWS_PROFILE": None,
        "AWS_DEFAULT_PROFILE": None,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        # Either would send a client past AWS_ENDPOINT_URL.
        "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": None,
    }
    environment.update({name: None for name in os.environ if name.startswith("AWS_ENDPOINT_URL_")})
    return environment


class _AtomicDynamoDB:
    """WSGI middleware: one DynamoDB request at a time.

    DynamoDB applies each conditional write atomically; moto checks a condition and writes in two steps that
    two request threads can interleave, and the handlers write concurrently (a batch's records, a record's
    receivers). Other services are left threaded: a Step Functions task calls back into moto while its own
    request is still being served.
    """

    def __init__(self, dispatcher: DomainDispatcherApplication) -> None:
        self.dispatcher = dispatcher
        self._lock = threading.Lock()
        self.calls: list[tuple[float, float, str]] = []
        """(started, ended, operation) of every DynamoDB request, epoch seconds (benchmarks/first_page.py)."""

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        with self.one_at_a_time(str(environ.get("HTTP_X_AMZ_TARGET", ""))):
            return list(self.dispatcher(environ, start_response))

    @contextlib.contextmanager
    def one_at_a_time(self, target: str) -> Iterator[None]:
        """Held while a request is answered (over HTTP, or in process: sandbox/moto_in_process.py): a DynamoDB
        request holds the lock, and is recorded."""
        if not target.startswith("DynamoDB_"):
            yield
            return
        with self._lock:
            started = time.time()
            yield
            self.calls.append((started, time.time(), target.rpartition(".")[2]))


class _SandboxMotoServer(ThreadedMotoServer):
    def __init__(self, ip_address: str, port: int) -> None:
        super().__init__(ip_address=ip_address, port=port, verbose=False)
        self.dynamodb = _AtomicDynamoDB(DomainDispatcherApplication(create_backend_app))

    def _server_entry(self) -> None:
        app = AnsweredDirectly(self.dynamodb)
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()


def _start_moto(host: str, port: int) -> _SandboxMotoServer:
    # werkzeug logs every request to stderr; the report is the record of what happened.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    # moto's EC2 reads its catalogue of public AMIs (thousands) each time it starts a region's backend, which is on
    # every reset; the sandbox's instances name an image of their own and nothing lists images.
    os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    moto_dynamodb.install()
    server = _SandboxMotoServer(ip_address=host, port=port)
    with contextlib.redirect_stdout(io.StringIO()):
        server.start()
    return server


def _reset_moto(endpoint: str) -> None:
    # moto's state lives in this process's module globals: start every sandbox from an empty account.
    try:
        requests.post(f"{endpoint}/moto-api/reset", timeout=10).raise_for_status()
    except requests.RequestException as exc:
        raise SandboxError(f"moto did not answer on {endpoint}: {exc}") from exc


def _seed_notifier_secrets(parameters: Mapping[str, Any], aws: AwsClients, standins: StandIns) -> None:
    """The secrets the template names, pointing at the stand-ins (only those the template declares)."""
    secrets: dict[str, dict[str, Any]] = {}
    if "SlackSecretName" in parameters:
        secrets[parameters["SlackSecretName"]] = {
            "bot_token": DEFAULT_SLACK_TOKEN,
            "webhook_urls": {SLACK_WEBHOOK_NAME: standins.slack_webhook_url},
            "signing_secret": SLACK_SIGNING_SECRET,
        }
    if "PagerDutySecretName" in parameters:
        secrets[parameters["PagerDutySecretName"]] = {
            "routing_keys": {PAGERDUTY_SERVICE_NAME: SANDBOX_ROUTING_KEY},
            "webhook_secrets": [PAGERDUTY_WEBHOOK_SECRET],
        }
    # The other receiver kinds' secrets: only where the stack names one (their parameters are empty by default).
    if parameters.get("TeamsSecretName"):
        secrets[parameters["TeamsSecretName"]] = {"webhook_urls": {TEAMS_WEBHOOK_NAME: standins.teams_webhook_url}}
    if parameters.get("WebhookSecretName"):
        secrets[parameters["WebhookSecretName"]] = {
            "endpoints": {
                SANDBOX_WEBHOOK_ENDPOINT: {
                    "url": standins.webhook_url(SANDBOX_WEBHOOK_ENDPOINT),
                    "signing_secrets": [SANDBOX_WEBHOOK_SECRET],
                }
            }
        }
    for name, value in secrets.items():
        aws.secretsmanager.create_secret(Name=name, SecretString=json.dumps(value))
