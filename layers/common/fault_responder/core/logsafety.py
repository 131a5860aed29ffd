"""Keeps secrets out of the libraries' logs, at every log level and whatever logging is configured later.

With DEBUG logging on (Lambda's advanced logging controls set the root logger's level; a tool calls
`logging.basicConfig(level=logging.DEBUG)`), the libraries under this package log wire data:

- botocore logs each request it makes and sends (its body; its signed headers, with the session token),
  each step of signing it (the canonical request holds the session token), and each response body: a
  GetSecretValue response body is the secret itself.
- urllib3 logs request lines and URLs, and the path of a Slack incoming-webhook URL is the webhook's
  credential. Some of those lines (a retried connection, headers it could not parse) are WARNINGs.
- the X-Ray SDK logs every segment it emits, with the URLs its patches recorded.

Importing this module puts a filter on each of those loggers (`install`, run at import). A filter on a
logger object sees every record that logger creates before any handler does, whatever handlers, levels or
propagation are configured before or after, so neither a level change nor a new handler can let a record
through. What each logger gets follows from what it logs (botocore 1.44, urllib3 2.8, aws-xray-sdk 2.15):

- `botocore.endpoint`, `botocore.auth`, `botocore.parsers`: every DEBUG record is dropped. At DEBUG these
  loggers write request parameters, prepared requests, signing material and response bodies; the few
  other DEBUG lines (a retry's sleep, a timeout setting) are not worth a pattern that could miss the next
  dump botocore adds. Their INFO and above (a tagged union member the client does not know) pass.
- `urllib3.connectionpool`, `urllib3.connection`, `urllib3.poolmanager`, `urllib3.util.retry`: every
  record, at every level, is kept with its URL paths and queries replaced by `/<redacted>`; scheme, host,
  port, method and status stay, so a connection problem can still be diagnosed.
- `aws_xray_sdk.core.emitters.udp_emitter`: DEBUG records (each one a serialized segment) are dropped.

Read and left alone, because they log no secret: the other botocore loggers (hooks, credentials,
retries, loaders, regions, utils), and
`aws_lambda_powertools.utilities.parameters` (logs a secret's name, never its value, and only when
setting one).
"""

from __future__ import annotations

import logging
import re
from typing import Final

REDACTED_PATH: Final = "/<redacted>"

DROP_DEBUG_LOGGERS: Final = (
    "botocore.endpoint",
    "botocore.auth",
    "botocore.parsers",
    "aws_xray_sdk.core.emitters.udp_emitter",
)
REDACT_URL_LOGGERS: Final = (
    "urllib3.connectionpool",
    "urllib3.connection",
    "urllib3.poolmanager",
    "urllib3.util.retry",
)

# A URL: its origin is kept, everything from the first "/", "?" or "#" after it is the secret part.
# A path runs to the next space, quote or angle bracket: punctuation after it (a closing parenthesis, a
# colon) goes with it, rather than a path that contains such a character being cut short and half kept.
_URL = re.compile(r"""(?P<origin>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#\s'"<>]*)(?P<rest>[/?#][^\s'"<>]*)?""")
# A bare path as urllib3 logs it (request line, retry, `url='...'`): a "/" that starts a word.
_PATH = re.compile(r"""(?<![^\s'"(=])/[^\s'"<>]*""")
# Marks this module's filters, so a second install (the layer imported afresh, as the sandbox does)
# replaces them rather than stacking a copy per import.
_MARK: Final = "_fault_responder_logsafety"


def redact_url_paths(text: str) -> str:
    """`text` with the path, query and fragment of every URL, and every bare URL path, replaced."""

    def keep_origin(match: re.Match[str]) -> str:
        return match["origin"] + (REDACTED_PATH if match["rest"] else "")

    return _PATH.sub(REDACTED_PATH, _URL.sub(keep_origin, text))


class DropDebugRecords(logging.Filter):
    """For loggers whose DEBUG records are request and response dumps: only INFO and above pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG


class RedactUrlPaths(logging.Filter):
    """For loggers that put URLs in their messages: the record passes with every URL path redacted.

    The message is formatted here, redacted, and stored without its arguments; a traceback attached to
    the record (an exception's text may quote the URL) is folded into the message the same way.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            # Arguments that do not fit the template: keep the template alone, never the arguments.
            message = str(record.msg)
        if record.exc_info:
            message = f"{message}\n{logging.Formatter().formatException(record.exc_info)}"
            record.exc_info = None
        record.exc_text = None
        record.msg = redact_url_paths(message)
        record.args = ()
        return True


def install() -> None:
    """Put the filters on their loggers, replacing any this module installed before."""
    for name in DROP_DEBUG_LOGGERS:
        _replace_filter(logging.getLogger(name), DropDebugRecords())
    for name in REDACT_URL_LOGGERS:
        _replace_filter(logging.getLogger(name), RedactUrlPaths())


def _replace_filter(logger: logging.Logger, new: logging.Filter) -> None:
    for old in [f for f in logger.filters if getattr(f, _MARK, False)]:
        logger.removeFilter(old)
    setattr(new, _MARK, True)
    logger.addFilter(new)


install()
