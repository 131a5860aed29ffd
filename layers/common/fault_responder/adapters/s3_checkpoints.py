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
from datetime import datetime
from typing import Any, Protocol, cast

from botocore.client import BaseClient
from botocore.exceptions import BotoCoreError, ClientError

from fault_responder.resume.checkpoint_now import (
    MAX_REQUEST_BYTES,
    CheckpointRequest,
    Placed,
    StoredRequest,
    parse_request,
    request_location,
)
from fault_responder.resume.checkpoints import CheckpointStoreError, S3Location, StoredObject

_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})
_CONDITION_FAILED = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "412"})


class _S3Api(Protocol):
    """The part of the S3 client this adapter calls (boto3's stubs type clients without service methods)."""

    def get_paginator(self, operation_name: str) -> Any: ...

    def get_object(self, **kwargs: Any) -> Any: ...

    def put_object(self, **kwargs: Any) -> Any: ...

    def delete_object(self, **kwargs: Any) -> Any: ...


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


class S3CheckpointRequests:
    """Writes, reads and withdraws a prefix's checkpoint-now request (fault_responder.resume.checkpoint_now).

    Writes are conditional, so two people (or the workflow and a person) asking at once never overwrite each
    other: `create` only where there is none, `replace` only the version that was read.
    """

    def __init__(self, client: BaseClient) -> None:
        self._s3 = cast(_S3Api, client)

    def read(self, location: S3Location) -> StoredRequest | None:
        bucket, key = request_location(location)
        try:
            response = self._s3.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{MAX_REQUEST_BYTES}")
        except ClientError as error:
            if error.response.get("Error", {}).get("Code", "") in _NOT_FOUND:
                return None
            raise _failed("GetObject", bucket, key, error) from error
        except BotoCoreError as error:
            raise _failed("GetObject", bucket, key, error) from error
        return StoredRequest(
            body=cast(bytes, response["Body"].read()),
            etag=str(response.get("ETag", "")),
            stored_at=response.get("LastModified"),
        )

    def place(self, location: S3Location, request: CheckpointRequest, moment: datetime) -> Placed:
        """Store `request`, or join the request already pending there (one save answers both); a request no longer
        pending at `moment` (answered, expired or unreadable) is replaced, only in the version read."""
        for _ in range(3):
            stored = self.create(location, request)
            if stored is not None:
                return Placed(request, stored, joined=False)
            existing = self.read(location)
            if existing is None:
                continue  # withdrawn between the two calls: create again
            found = parse_request(existing.body)
            if isinstance(found, CheckpointRequest) and found.pending(moment):
                return Placed(found, existing, joined=True)
            stored = self.replace(location, request, existing.etag)
            if stored is not None:
                return Placed(request, stored, joined=False)
        raise CheckpointStoreError(f"the request at {location.uri} kept changing while it was written; try again")

    def create(self, location: S3Location, request: CheckpointRequest) -> StoredRequest | None:
        """Store `request` where no request is; None when one is there already."""
        return self._put(location, request, IfNoneMatch="*")

    def replace(self, location: S3Location, request: CheckpointRequest, etag: str) -> StoredRequest | None:
        """Store `request` over the version `etag`; None when that version is no longer there."""
        return self._put(location, request, IfMatch=etag)

    def withdraw(self, location: S3Location, request_id: str) -> bool:
        """Delete the request if it is still `request_id`'s; False when another (or none) is there."""
        stored = self.read(location)
        found = parse_request(stored.body) if stored is not None else None
        if stored is None or not isinstance(found, CheckpointRequest) or found.id != request_id:
            return False
        bucket, key = request_location(location)
        try:
            # The version read, and no other: a request written meanwhile by someone else stays.
            self._s3.delete_object(Bucket=bucket, Key=key, IfMatch=stored.etag)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code", "") in _CONDITION_FAILED | _NOT_FOUND:
                return False
            raise _failed("DeleteObject", bucket, key, error) from error
        except BotoCoreError as error:
            raise _failed("DeleteObject", bucket, key, error) from error
        return True

    def _put(self, location: S3Location, request: CheckpointRequest, **condition: str) -> StoredRequest | None:
        bucket, key = request_location(location)
        body = request.to_json()
        try:
            self._s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json", **condition)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code", "") in _CONDITION_FAILED:
                return None
            raise _failed("PutObject", bucket, key, error) from error
        except BotoCoreError as error:
            raise _failed("PutObject", bucket, key, error) from error
        # Read back for S3's own time of it (PutObject does not return LastModified).
        stored = self.read(location)
        return stored if stored is not None and stored.body == body else None


def _failed(operation: str, bucket: str, key: str, error: Exception) -> CheckpointStoreError:
    code = error.response.get("Error", {}).get("Code", "") if isinstance(error, ClientError) else ""
    return CheckpointStoreError(f"S3 {operation} s3://{bucket}/{key} failed: {code or error}")
