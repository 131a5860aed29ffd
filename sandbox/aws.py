"""boto3 clients that can only ever reach the sandbox's moto server."""

from __future__ import annotations

from collections.abc import Mapping
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

    moto answers fake credentials as its default account (the stack's); `credentials` that moto's STS handed out
    (AccessKeyId, SecretAccessKey, SessionToken) act in the account of the role they were assumed from
    (sandbox/accounts.py).
    """

    def __init__(self, endpoint_url: str, region: str, credentials: Mapping[str, str] | None = None) -> None:
        self.endpoint_url = endpoint_url
        self.region = region
        self.credentials = dict(credentials) if credentials is not None else None
        keys = credentials or {
            "AccessKeyId": FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "SecretAccessKey": FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "SessionToken": FAKE_CREDENTIALS["AWS_SESSION_TOKEN"],
        }
        self._session = boto3.session.Session(
            aws_access_key_id=keys["AccessKeyId"],
            aws_secret_access_key=keys["SecretAccessKey"],
            aws_session_token=keys["SessionToken"],
            region_name=region,
        )
        self._clients: dict[str, Any] = {}
        # A sandbox call that fails should fail at once, not after the SDK's retries.
        self._config = Config(retries={"max_attempts": 1, "mode": "standard"})

    def in_region(self, region: str) -> AwsClients:
        """The same credentials' clients in another Region."""
        return self if region == self.region else AwsClients(self.endpoint_url, region, self.credentials)

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
