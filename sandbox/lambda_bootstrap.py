"""The Lambda runtime's side of an invocation: the context object, loading and calling the handler,
and reporting an error in Lambda's shape.

Standard library only, because `python -m sandbox invoke` runs this file as `python -S -c <source>`
in a clean interpreter whose import path holds nothing but the built function, its layers and boto3
(as on Lambda). The in-process runtime imports the same functions, so both behave alike.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Handler = Callable[[Any, Any], Any]


@dataclass
class LambdaContext:
    """The attributes and method of the context object the Python runtime passes to a handler."""

    function_name: str
    function_version: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    aws_request_id: str
    log_group_name: str
    log_stream_name: str
    timeout_seconds: float
    identity: Any = None
    client_context: Any = None
    _started: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._started + self.timeout_seconds - time.monotonic()) * 1000))


def context_from_environment(request_id: str, function_arn: str, timeout_seconds: float) -> LambdaContext:
    """A context for the function whose Lambda environment variables are set in os.environ."""
    environ = os.environ
    return LambdaContext(
        function_name=environ["AWS_LAMBDA_FUNCTION_NAME"],
        function_version=environ["AWS_LAMBDA_FUNCTION_VERSION"],
        invoked_function_arn=function_arn,
        memory_limit_in_mb=int(environ["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"]),
        aws_request_id=request_id,
        log_group_name=environ["AWS_LAMBDA_LOG_GROUP_NAME"],
        log_stream_name=environ["AWS_LAMBDA_LOG_STREAM_NAME"],
        timeout_seconds=timeout_seconds,
    )


class HandlerLoadError(Exception):
    """The handler could not be loaded; `error` is what Lambda reports for it."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error = {"errorType": error_type, "errorMessage": message}


def load_handler(handler: str) -> Handler:
    """Import `<module>.<function>` (the Handler property) the way the Python runtime does."""
    module_name, _, function_name = handler.rpartition(".")
    if not module_name:
        raise HandlerLoadError("Runtime.MalformedHandlerName", f"Bad handler '{handler}': not enough values to unpack")
    try:
        module = importlib.import_module(module_name.replace("/", "."))
    except ImportError as exc:
        raise HandlerLoadError("Runtime.ImportModuleError", f"Unable to import module '{module_name}': {exc}") from exc
    except SyntaxError as exc:
        raise HandlerLoadError("Runtime.UserCodeSyntaxError", f"Syntax error in module '{module_name}': {exc}") from exc
    except Exception as exc:  # module-level code failed: Lambda reports the exception itself
        raise HandlerLoadError(type(exc).__name__, str(exc)) from exc
    function = getattr(module, function_name, None)
    if not callable(function):
        raise HandlerLoadError(
            "Runtime.HandlerNotFound", f"Handler '{function_name}' missing on module '{module_name}'"
        )
    return function  # type: ignore[no-any-return]


def invoke(handler: Handler, event: Any, context: LambdaContext) -> dict[str, Any]:
    """Call the handler: `{"result": <JSON>}` or `{"error": <Lambda's error shape>}`."""
    try:
        result = handler(event, context)
    except Exception as exc:  # the runtime turns any exception into the invocation's error
        traceback.print_exc()
        return {"error": error_shape(exc, context.aws_request_id)}
    try:
        return {"result": json.loads(json.dumps(result))}
    except (TypeError, ValueError) as exc:
        error = {"errorType": "Runtime.MarshalError", "errorMessage": f"Unable to marshal response: {exc}"}
        return {"error": error}


def error_shape(exc: BaseException, request_id: str) -> dict[str, Any]:
    return {
        "errorMessage": str(exc),
        "errorType": type(exc).__name__,
        "requestId": request_id,
        "stackTrace": traceback.format_tb(exc.__traceback__),
    }


def main(argv: list[str]) -> int:
    """`-c` entry point: argv is [-c, result file, request id, function ARN, timeout seconds]."""
    result_path, request_id, function_arn, timeout_seconds = argv[1:5]
    event = json.load(sys.stdin)
    try:
        handler = load_handler(os.environ["_HANDLER"])
    except HandlerLoadError as exc:
        print(f"[ERROR] {exc.error['errorType']}: {exc.error['errorMessage']}", file=sys.stderr)
        outcome: dict[str, Any] = {"error": exc.error}
    else:
        outcome = invoke(handler, event, context_from_environment(request_id, function_arn, float(timeout_seconds)))
    with open(result_path, "w", encoding="utf-8") as result_file:
        json.dump(outcome, result_file)
    return 1 if "error" in outcome else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
