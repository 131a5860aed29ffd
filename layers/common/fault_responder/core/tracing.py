"""X-Ray tracing, only when the stack turns it on.

Powertools' Tracer imports the X-Ray SDK whenever one is created, even a disabled one: 20 to 40 ms of a cold
start (benchmarks/README.md). And the SDK depends on botocore, which bundled in a layer would shadow the runtime's.
So the SDK is not in the common layer: it ships, without botocore, in the TracingLayer (layers/tracing/), which
functions get only when the stack's `Tracing` parameter is `Active`; that also sets POWERTOOLS_TRACE_DISABLED=false.
Otherwise the Tracer is given a provider that records nothing, and the SDK is never imported.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any

from aws_lambda_powertools import Tracer
from aws_lambda_powertools.shared.functions import resolve_truthy_env_var_choice
from aws_lambda_powertools.tracing.base import BaseProvider, BaseSegment


def tracing_enabled(environ: Mapping[str, str]) -> bool:
    """Traced when the stack says so (POWERTOOLS_TRACE_DISABLED) and, as Powertools has it, only inside Lambda:
    not outside it (no LAMBDA_TASK_ROOT), nor under `sam local` (AWS_SAM_LOCAL), where no X-Ray daemon listens."""
    if resolve_truthy_env_var_choice(env=environ.get("POWERTOOLS_TRACE_DISABLED", "false")):
        return False
    return bool(environ.get("LAMBDA_TASK_ROOT")) and not environ.get("AWS_SAM_LOCAL")


TRACED_MODULES = ("boto3", "botocore")
"""Not `httplib` (under urllib3, which sends the pages): the X-Ray SDK records each request's URL in the
trace, and a Slack webhook's path is its secret. Slack and PagerDuty calls show as time inside the handler's
segment instead."""


def make_tracer(service: str, environ: Mapping[str, str]) -> Tracer:
    if tracing_enabled(environ):
        return Tracer(service=service, patch_modules=TRACED_MODULES)
    # Not `disabled=True`: Powertools would import the X-Ray SDK to switch it off. This provider is off by itself.
    return Tracer(service=service, disabled=False, auto_patch=False, provider=UntracedProvider())


class _UntracedSegment(BaseSegment):
    def close(self, end_time: int | None = None) -> None:
        pass

    def add_subsegment(self, subsegment: Any) -> None:
        pass

    def remove_subsegment(self, subsegment: Any) -> None:
        pass

    def put_annotation(self, key: str, value: Any) -> None:
        pass

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        pass

    def add_exception(self, exception: BaseException, stack: Any, remote: bool = False) -> None:
        pass


class UntracedProvider(BaseProvider):
    """A tracing provider that records nothing: the Tracer's decorators and calls all become no-ops."""

    @contextmanager
    def in_subsegment(self, name: str | None = None, **kwargs: Any) -> Iterator[BaseSegment]:
        yield _UntracedSegment()

    def in_subsegment_async(self, name: str | None = None, **kwargs: Any) -> AbstractAsyncContextManager[BaseSegment]:
        return _untraced_async()

    def put_annotation(self, key: str, value: Any) -> None:
        pass

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        pass

    def patch(self, modules: Sequence[str]) -> None:
        pass

    def patch_all(self) -> None:
        pass


@asynccontextmanager
async def _untraced_async() -> AsyncIterator[BaseSegment]:
    yield _UntracedSegment()
