"""The SQS queue with the real boto3 client against moto's server on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer

from nkibot.config.settings import Settings
from nkibot.jobs.factory import open_named_queue, open_queue
from nkibot.jobs.queue import DeadLetterSource, Queue
from nkibot.jobs.sqs import MessageTooLarge, SqsQueue, create_fifo_queue


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture
def sqs(moto_url: str, aws_env: None, request: pytest.FixtureRequest) -> SqsQueue:
    client = boto3.client("sqs", endpoint_url=moto_url, region_name="us-east-1")
    url, dlq = create_fifo_queue(client, f"t{abs(hash(request.node.name)) % 10**8}",
                                 max_attempts=2, visibility_s=30)
    return SqsQueue(client, url, dlq_url=dlq)


class TestSqsQueue:
    def test_is_a_queue(self, sqs: SqsQueue) -> None:
        """SqsQueue satisfies the Queue and DeadLetterSource protocols."""
        assert isinstance(sqs, Queue) and isinstance(sqs, DeadLetterSource)

    def test_put_lease_ack(self, sqs: SqsQueue) -> None:
        """A body (binary-safe) round-trips with its dedupe key, and ack deletes it."""
        sqs.put(b"\x00\xffbody", "delivery-1")
        lease = sqs.lease(30)
        assert lease is not None
        assert (lease.item_id, lease.body, lease.attempt) == ("delivery-1", b"\x00\xffbody", 1)
        sqs.ack(lease)
        assert sqs.lease(0) is None and sqs.depth() == 0

    def test_deduplication_id_drops_a_repeat(self, sqs: SqsQueue) -> None:
        """A second put with the same key inside SQS's window is not delivered again."""
        sqs.put(b"one", "same")
        sqs.put(b"two", "same")
        lease = sqs.lease(30)
        assert lease is not None and lease.body == b"one"
        sqs.ack(lease)
        assert sqs.lease(30) is None

    def test_nack_returns_item_with_higher_attempt(self, sqs: SqsQueue) -> None:
        """nack makes the message visible again; its receive count is the attempt."""
        sqs.put(b"x", "k")
        first = sqs.lease(30)
        assert first is not None
        sqs.nack(first)
        second = sqs.lease(30)
        assert second is not None and second.attempt == 2

    def test_release_gives_the_item_back_uncounted(self, sqs: SqsQueue) -> None:
        """release re-queues an unworked item as a fresh message: no receive is counted."""
        sqs.put(b"deferred", "d")
        for _ in range(3):  # more releases than the redrive policy's receive limit
            lease = sqs.lease(30)
            assert lease is not None and lease.attempt == 1 and lease.item_id == "d"
            sqs.release(lease)
        lease = sqs.lease(30)
        assert lease is not None and lease.body == b"deferred" and lease.attempt == 1
        sqs.ack(lease)
        assert sqs.lease(30) is None

    def test_redrive_moves_to_dead_letter_queue(self, sqs: SqsQueue) -> None:
        """After maxReceiveCount receives the redrive policy moves the message to the DLQ."""
        sqs.put(b"poison", "p")
        for _ in range(2):
            lease = sqs.lease(30)
            assert lease is not None
            sqs.nack(lease)
        assert sqs.lease(30) is None
        deadline = time.monotonic() + 5
        dead = sqs.dead_letters()
        while not dead and time.monotonic() < deadline:
            time.sleep(0.1)
            dead = sqs.dead_letters()
        assert [(d.item_id, d.body) for d in dead] == [("p", b"poison")]

    def test_heartbeat_keeps_a_short_lease_and_its_end_frees_it(self, sqs: SqsQueue) -> None:
        """ChangeMessageVisibility extends a 2 s lease past its end; once it stops, it lapses."""
        sqs.put(b"job", "j")
        lease = sqs.lease(2)
        assert lease is not None
        for _ in range(3):  # 3 s of beats on a 2 s lease: never visible meanwhile
            time.sleep(1)
            sqs.extend(lease, 2)
            assert sqs.lease(2) is None
        # The runner dies: no more beats. The message returns after the last lease's 2 s.
        stopped = time.monotonic()
        again = sqs.lease(2)
        while again is None and time.monotonic() - stopped < 6:
            time.sleep(0.1)
            again = sqs.lease(2)
        assert again is not None and again.attempt == 2
        assert 1.5 <= time.monotonic() - stopped <= 3.5

    def test_oversize_body_is_refused(self, sqs: SqsQueue) -> None:
        """A body SQS cannot carry raises MessageTooLarge instead of failing in boto3."""
        with pytest.raises(MessageTooLarge):
            sqs.put(b"x" * 300_000, "big")


class TestOpenQueue:
    def test_sqs_urls_select_two_queues(self, sqs: SqsQueue, moto_url: str) -> None:
        """NKIBOT_QUEUE_URL names the inbox and NKIBOT_JOBS_QUEUE_URL the jobs queue."""
        client = sqs.client
        jobs_url, _ = create_fifo_queue(client, "factory-jobs", max_attempts=3)
        settings = Settings(_env_file=None, queue_url=f"sqs://{sqs.queue_url}",  # type: ignore[call-arg]
                            jobs_queue_url=f"sqs://{jobs_url}")
        inbox = open_named_queue("inbox", settings)
        jobs = open_named_queue("jobs", settings)
        assert isinstance(inbox, SqsQueue) and inbox.queue_url == sqs.queue_url
        assert isinstance(jobs, SqsQueue) and jobs.queue_url == jobs_url
        inbox.put(b"hello", "k")
        lease = sqs.lease(30)
        assert lease is not None and lease.body == b"hello"

    def test_sqs_inbox_needs_a_jobs_url(self, moto_url: str) -> None:
        """An SQS inbox without NKIBOT_JOBS_QUEUE_URL is a configuration error, said plainly."""
        settings = Settings(_env_file=None, queue_url=f"sqs://{moto_url}/123/x.fifo")  # type: ignore[call-arg]
        with pytest.raises(ValueError, match="NKIBOT_JOBS_QUEUE_URL"):
            open_named_queue("jobs", settings)

    def test_unknown_scheme(self) -> None:
        """Only sqlite:/// and sqs:// URLs are accepted."""
        with pytest.raises(ValueError, match="unsupported queue URL"):
            open_queue("redis://x", "inbox", Settings(_env_file=None))  # type: ignore[call-arg]
