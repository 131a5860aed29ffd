"""A Lambda whose process died mid-invocation, for the workflow tests: raised inside a handler, the dispatcher
(conftest.py) answers as Lambda does for a function that timed out. In a module of its own so that the test that
raises it and conftest.py, which pytest imports under its own name as well, share one class."""


class FunctionDied(BaseException):
    """The invocation ends here as one whose process died (a timeout, out of memory): no handler of the function runs
    after it (a BaseException: no `except Exception` of ours catches it)."""
