"""The boto3 implementation of `CheckpointStore`, counting every S3 request it sends.

The count is taken from botocore's `request-created` event, which fires once per HTTP attempt, so retries are
counted too: it is the number the S3 bill and the request-rate limits see. It covers every request made
through the client, so give the store its own client when the count is evidence.

No HeadObject: one listing of a candidate folder answers which markers exist and every object's size, which
manifest verification needs anyway, for one request per 1,000 objects instead of one per file.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, Protocol, cast

from botocore.client import BaseClient
from botocore.exceptions import BotoCoreError, ClientError

from fault_responder.resume.checkpoints import CheckpointStoreError, StoredObject

_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})


class _S3Api(Protocol):
    """The part of the S3 client this adapter calls (boto3's stubs type clients without service methods)."""

    def get_paginator(self, operation_name: str) -> Any: ...

    def get_object(self, **kwargs: Any) -> Any: ...


class S3CheckpointStore:
    def __init__(self, client: BaseClient) -> None:
        self._s3 = cast(_S3Api, client)
        self.requests: Counter[str] = Counter()
        """S3 requests sent, by operation name (ListObjectsV2, GetObject)."""
        client.meta.events.register("request-created.s3", self._count_request)

    @property
    def request_count(self) -> int:
        return sum(self.requests.values())

    def list_folders(self, bucket: str, prefix: str) -> Iterator[str]:
        for page in self._pages(bucket, prefix, delimiter="/"):
            for common in page.get("CommonPrefixes", ()):
                yield common["Prefix"][len(prefix) :].rstrip("/")

    def list_files(self, bucket: str, prefix: str) -> Mapping[str, StoredObject]:
        return {
            obj["Key"][len(prefix) :]: StoredObject(size=obj["Size"], last_modified=obj.get("LastModified"))
            for page in self._pages(bucket, prefix)
            for obj in page.get("Contents", ())
        }

    def read(self, bucket: str, key: str, limit: int) -> bytes | None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        try:
            response = self._s3.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{limit - 1}")
            return cast(bytes, response["Body"].read())
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in _NOT_FOUND:
                return None
            if code == "InvalidRange":
                # S3 refuses any byte range of an empty object; the object exists and holds nothing.
                return b""
            raise CheckpointStoreError(f"S3 GetObject s3://{bucket}/{key} failed: {code or error}") from error
        except BotoCoreError as error:
            raise CheckpointStoreError(f"S3 GetObject s3://{bucket}/{key} failed: {error}") from error

    def _pages(self, bucket: str, prefix: str, delimiter: str | None = None) -> Iterator[dict[str, Any]]:
        arguments = {"Bucket": bucket, "Prefix": prefix} | ({"Delimiter": delimiter} if delimiter else {})
        try:
            yield from self._s3.get_paginator("list_objects_v2").paginate(**arguments)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            raise CheckpointStoreError(f"S3 ListObjectsV2 s3://{bucket}/{prefix} failed: {code or error}") from error
        except BotoCoreError as error:
            raise CheckpointStoreError(f"S3 ListObjectsV2 s3://{bucket}/{prefix} failed: {error}") from error

    def _count_request(self, operation_name: str, **_: Any) -> None:
        self.requests[operation_name] += 1
