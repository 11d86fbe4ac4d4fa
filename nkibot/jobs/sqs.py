"""SQS queue (FIFO): dedupe by MessageDeduplicationId, leases by visibility, DLQ by redrive.

`put` cannot tell a deduplicated send from a new one (SQS accepts both silently
within its five-minute window), so it always answers True; the dispatcher's
effects are idempotent, which is what makes a late duplicate harmless.
Bodies travel base64-encoded because SQS message bodies are text.
"""

from __future__ import annotations

import base64
import json
import math
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from nkibot.jobs.queue import DeadLetter, Lease

if TYPE_CHECKING:
    from mypy_boto3_sqs.client import SQSClient
else:
    SQSClient = Any

#: SQS refuses messages over 256 KiB; base64 costs a third.
MAX_BODY_BYTES = 190 * 1024
_KEY_ATTR = "nkibot_key"


class MessageTooLarge(ValueError):
    """The body does not fit in one SQS message."""


def sqs_client(queue_url: str, region: str | None = None) -> SQSClient:
    """A boto3 SQS client for `queue_url`, pointed at its host unless it is AWS itself."""
    import boto3

    parts = urlsplit(queue_url)
    host = parts.hostname or ""
    kwargs: dict[str, Any] = {}
    if not host.endswith("amazonaws.com"):
        kwargs["endpoint_url"] = f"{parts.scheme}://{parts.netloc}"
    elif region is None and host.startswith("sqs."):
        region = host.split(".")[1]
    return boto3.client("sqs", region_name=region or "us-east-1", **kwargs)


class SqsQueue:
    """The `Queue` protocol on one SQS FIFO queue (plus its DLQ for `dead_letters`)."""

    def __init__(self, client: SQSClient, queue_url: str, dlq_url: str | None = None,
                 group_id: str = "nkibot") -> None:
        self.client = client
        self.queue_url = queue_url
        self.dlq_url = dlq_url
        # One group keeps strict order; per-repo groups would add parallelism but the
        # inbox is drained by one dispatcher anyway.
        self.group_id = group_id

    def put(self, body: bytes, dedupe_key: str) -> bool:
        if len(body) > MAX_BODY_BYTES:
            raise MessageTooLarge(f"{len(body)} bytes is over SQS's limit")
        self.client.send_message(
            QueueUrl=self.queue_url,
            MessageBody=base64.b64encode(body).decode("ascii"),
            MessageGroupId=self.group_id,
            # The id must be <= 128 chars of [A-Za-z0-9!-~]; delivery ids and job ids are.
            MessageDeduplicationId=dedupe_key[:128],
            MessageAttributes={_KEY_ATTR: {"DataType": "String", "StringValue": dedupe_key}},
        )
        return True

    def lease(self, timeout: float) -> Lease | None:
        reply = self.client.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=1,
            VisibilityTimeout=max(0, math.ceil(timeout)),
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
            MessageAttributeNames=[_KEY_ATTR],
        )
        messages = reply.get("Messages", [])
        if not messages:
            return None
        msg = messages[0]
        key = _dedupe_key(msg)
        return Lease(
            item_id=key or msg["MessageId"],
            body=base64.b64decode(msg["Body"]),
            attempt=_receive_count(msg),
            token=msg["ReceiptHandle"],
        )

    def ack(self, lease: Lease) -> None:
        self.client.delete_message(QueueUrl=self.queue_url, ReceiptHandle=lease.token)

    def nack(self, lease: Lease, delay: float = 0.0, reason: str = "") -> None:
        """`reason` is not kept: the redrive policy moves the message as it is."""
        self._visibility(lease, delay)

    def release(self, lease: Lease, delay: float = 0.0) -> None:
        """Re-send a fresh copy at the back of the group, then delete the leased one.

        SQS cannot un-count a receive, and FIFO queues take no per-message delay, so a
        new message (its own dedupe id, receive count zero) is how an unworked item goes
        back without drifting toward the dead-letter queue. `delay` is not applied: the
        copy queues behind the group's other items, which is what a deferral wants.
        """
        self.client.send_message(
            QueueUrl=self.queue_url,
            MessageBody=base64.b64encode(lease.body).decode("ascii"),
            MessageGroupId=self.group_id,
            MessageDeduplicationId=f"{lease.item_id[:90]}:r{uuid.uuid4().hex[:32]}",
            MessageAttributes={_KEY_ATTR: {"DataType": "String", "StringValue": lease.item_id}},
        )
        self.ack(lease)

    def extend(self, lease: Lease, timeout: float) -> None:
        self._visibility(lease, timeout)

    def _visibility(self, lease: Lease, seconds: float) -> None:
        self.client.change_message_visibility(
            QueueUrl=self.queue_url, ReceiptHandle=lease.token,
            VisibilityTimeout=max(0, math.ceil(seconds)),
        )

    def depth(self) -> int:
        attrs = self.client.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages",
                            "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs.get("ApproximateNumberOfMessages", 0)) + int(
            attrs.get("ApproximateNumberOfMessagesNotVisible", 0)
        )

    def dead_letters(self, limit: int = 10) -> list[DeadLetter]:
        """Peek at the DLQ (messages stay there; they become visible again after 1 s)."""
        if self.dlq_url is None:
            return []
        reply = self.client.receive_message(
            QueueUrl=self.dlq_url, MaxNumberOfMessages=min(limit, 10), VisibilityTimeout=1,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
            MessageAttributeNames=[_KEY_ATTR],
        )
        out = []
        for msg in reply.get("Messages", []):
            key = _dedupe_key(msg) or ""
            out.append(DeadLetter(key, base64.b64decode(msg["Body"]),
                                  _receive_count(msg),
                                  "moved by the redrive policy"))
        return out


def _dedupe_key(msg: Any) -> str | None:
    value = dict(msg.get("MessageAttributes", {})).get(_KEY_ATTR, {}).get("StringValue")
    return None if value is None else str(value)


def _receive_count(msg: Any) -> int:
    return int(dict(msg.get("Attributes", {})).get("ApproximateReceiveCount", "1"))


def create_fifo_queue(client: SQSClient, name: str, max_attempts: int,
                      visibility_s: int = 30) -> tuple[str, str]:
    """Create `<name>.fifo` with a `<name>-dlq.fifo` redrive target; return (url, dlq url).

    Production queues come from the CDK stack; this is for local setups and tests.
    """
    dlq_url = client.create_queue(
        QueueName=f"{name}-dlq.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    dlq_arn = client.get_queue_attributes(
        QueueUrl=dlq_url, AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    url = client.create_queue(
        QueueName=f"{name}.fifo",
        Attributes={
            "FifoQueue": "true",
            "VisibilityTimeout": str(visibility_s),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_attempts)}
            ),
        },
    )["QueueUrl"]
    return url, dlq_url
