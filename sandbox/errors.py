"""The one exception type the CLI turns into a clear message and a non-zero exit."""


class SandboxError(Exception):
    """Bad input or a template the sandbox cannot emulate; the message says what to fix."""
