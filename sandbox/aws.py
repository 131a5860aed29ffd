"""boto3 clients that can only ever reach the sandbox's moto server."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

# moto accepts any credentials; fixed fake ones mean nothing from ~/.aws or the environment is used.
_MOTO_PLACEHOLDER = "testing"
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": _MOTO_PLACEHOLDER,
    "AWS_SECRET_ACCESS_KEY": _MOTO_PLACEHOLDER,
    "AWS_SESSION_TOKEN": _MOTO_PLACEHOLDER,
}


class AwsClients:
    """One cached client per service, with moto's URL and fake credentials set explicitly.

    Explicit rather than read from the environment, so the sandbox's own calls cannot go to real AWS
    even if a handler under test changes `os.environ`.
    """

    def __init__(self, endpoint_url: str, region: str) -> None:
        self.endpoint_url = endpoint_url
        self.region = region
        self._session = boto3.session.Session(
            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=FAKE_CREDENTIALS["AWS_SESSION_TOKEN"],
            region_name=region,
        )
        self._clients: dict[str, Any] = {}
        # A sandbox call that fails should fail at once, not after the SDK's retries.
        self._config = Config(retries={"max_attempts": 1, "mode": "standard"})

    def client(self, service: str) -> Any:
        if service not in self._clients:
            # The stubs only type literal service names; this takes any.
            self._clients[service] = self._session.client(  # type: ignore[call-overload]
                service, endpoint_url=self.endpoint_url, config=self._config
            )
        return self._clients[service]

    @property
    def sqs(self) -> Any:
        return self.client("sqs")

    @property
    def dynamodb(self) -> Any:
        return self.client("dynamodb")

    @property
    def events(self) -> Any:
        return self.client("events")

    @property
    def secretsmanager(self) -> Any:
        return self.client("secretsmanager")
