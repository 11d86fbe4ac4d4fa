"""POST /webhook and the probes: every bad input is a 4xx, nothing is a 5xx."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nkibot.bot.app import INLINE_CHECK_BYTES, create_app
from nkibot.bot.delivery import Delivery
from nkibot.config.settings import Settings
from nkibot.jobs.queue import Lease
from nkibot.jobs.sqlite import SqliteQueue
from tests.fakes.github_fixtures import TEST_WEBHOOK_SECRET, load_webhook, signed_headers

LIMIT = 64 * 1024


@pytest.fixture
def inbox(tmp_path: Path) -> SqliteQueue:
    return SqliteQueue(tmp_path / "q.db", "inbox")


@pytest.fixture
def client(inbox: SqliteQueue, tmp_path: Path) -> Iterator[TestClient]:
    s = Settings(_env_file=None, webhook_secret=TEST_WEBHOOK_SECRET,  # type: ignore[call-arg]
                 queue_url=f"sqlite:///{tmp_path / 'q.db'}", dispatcher_enabled=False,
                 max_body_bytes=LIMIT)
    yield TestClient(create_app(s, inbox))


def post(client: TestClient, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    resp = client.post("/webhook", content=body, headers=headers)
    return resp.status_code, resp.json()["detail"]


class TestWebhook:
    def test_stores_a_signed_delivery(self, client: TestClient, inbox: SqliteQueue) -> None:
        """A valid delivery is written to the inbox keyed by its id and answered 202."""
        headers, body = load_webhook("issue_comment_created_issue")
        assert post(client, body, headers) == (202, "stored")
        lease = inbox.lease(10)
        assert lease is not None and lease.item_id == headers["x-github-delivery"]
        delivery = Delivery.decode(lease.body)
        assert (delivery.event, delivery.body) == ("issue_comment", body)

    def test_redelivery_is_not_stored_twice(self, client: TestClient, inbox: SqliteQueue) -> None:
        """The same delivery id again gets 202 and leaves one inbox item."""
        headers, body = load_webhook("issues_labeled")
        assert post(client, body, headers)[0] == 202
        assert post(client, body, headers) == (202, "already stored")
        assert inbox.count() == 1

    def test_ping(self, client: TestClient, inbox: SqliteQueue) -> None:
        """ping is answered 200 and not stored."""
        headers, body = load_webhook("ping")
        assert post(client, body, headers) == (200, "pong")
        assert inbox.count() == 0

    @pytest.mark.parametrize("mutate", ["missing", "wrong", "sha1_only", "other_secret"])
    def test_bad_signatures_are_401(self, client: TestClient, inbox: SqliteQueue,
                                    mutate: str) -> None:
        """A missing or wrong X-Hub-Signature-256, or a sha1 signature alone, gets 401."""
        headers, body = load_webhook("issue_comment_created_issue")
        if mutate == "missing":
            del headers["x-hub-signature-256"]
        elif mutate == "wrong":
            headers["x-hub-signature-256"] = "sha256=" + "0" * 64
        elif mutate == "sha1_only":
            del headers["x-hub-signature-256"]
            digest = hmac.new(TEST_WEBHOOK_SECRET.encode(), body, hashlib.sha1).hexdigest()
            headers["x-hub-signature"] = f"sha1={digest}"
        else:
            headers = signed_headers(body, "issue_comment", secret="not-the-secret")
        assert post(client, body, headers)[0] == 401
        assert inbox.count() == 0

    @pytest.mark.parametrize(("body", "reason"),
                             ids=["truncated", "text", "array", "binary", "deep"], argvalues=[
        (b'{"action": "created", "comment": {"bo', "not JSON"),
        (b"this is not json", "not JSON"),
        (b"[1, 2, 3]", "not a JSON object"),
        (b"\xff\xfe\x00garbage", "not JSON"),
        (b"[" * 10_000, "not JSON"),
    ])
    def test_bad_bodies_are_400(self, client: TestClient, body: bytes, reason: str) -> None:
        """Truncated, non-JSON or non-object bodies get 400 with a one-line reason."""
        status, detail = post(client, body, signed_headers(body, "issue_comment"))
        assert status == 400 and reason in detail and "\n" not in detail

    @pytest.mark.parametrize("header", ["x-github-event", "x-github-delivery"])
    def test_missing_headers_are_400(self, client: TestClient, header: str) -> None:
        """A signed body without X-GitHub-Event or X-GitHub-Delivery gets 400 naming it."""
        headers, body = load_webhook("issues_labeled")
        del headers[header]
        status, detail = post(client, body, headers)
        assert status == 400 and header in detail.lower()

    def test_oversize_body_is_413(self, client: TestClient, inbox: SqliteQueue) -> None:
        """A declared or streamed body over the limit gets 413 and is not stored."""
        body = b"{" + b" " * LIMIT + b"}"
        assert post(client, body, signed_headers(body, "issues"))[0] == 413

        def chunks() -> Iterator[bytes]:
            for _ in range(LIMIT // 1024 + 2):
                yield b" " * 1024

        resp = client.post("/webhook", content=chunks(), headers=signed_headers(b"", "issues"))
        assert resp.status_code == 413 and inbox.count() == 0

    def test_large_body_is_checked_off_the_loop(self, inbox: SqliteQueue) -> None:
        """A body above the inline threshold is verified in a thread and stored the same way."""
        s = Settings(_env_file=None, webhook_secret=TEST_WEBHOOK_SECRET,  # type: ignore[call-arg]
                     dispatcher_enabled=False)
        big_client = TestClient(create_app(s, inbox))
        _, body = load_webhook("issues_labeled")
        payload = json.loads(body)
        payload["issue"]["body"] = "y" * (INLINE_CHECK_BYTES + 1000)
        big = json.dumps(payload).encode()
        assert post(big_client, big, signed_headers(big, "issues"))[0] == 202
        assert post(big_client, big + b"x", signed_headers(big, "issues"))[0] == 401
        assert inbox.count() == 1

    def test_default_limit_is_25_mb(self) -> None:
        """Unless configured otherwise, bodies over 25 MB are refused."""
        assert Settings(_env_file=None).max_body_bytes == 25 * 1024 * 1024  # type: ignore[call-arg]

    def test_unknown_event_is_acknowledged_not_stored(self, client: TestClient,
                                                      inbox: SqliteQueue) -> None:
        """An event nkibot does not handle is answered 202 and dropped."""
        body = b'{"action": "starred"}'
        status, detail = post(client, body, signed_headers(body, "star"))
        assert status == 202 and "not handled" in detail and inbox.count() == 0

    def test_bad_event_and_delivery_names(self, client: TestClient) -> None:
        """Header values that are not event names or delivery ids get 400."""
        body = b"{}"
        assert post(client, body, signed_headers(body, "Issue Comment!"))[0] == 400
        assert post(client, body, signed_headers(body, "issues", delivery="x" * 300))[0] == 400

    def test_huge_comment_within_limit_is_stored(self, client: TestClient,
                                                 inbox: SqliteQueue) -> None:
        """A large but allowed payload is stored whole."""
        _headers, body = load_webhook("issue_comment_created_issue")
        payload = json.loads(body)
        payload["comment"]["body"] = "/nki help\n" + "x" * (LIMIT - len(body) - 100)
        big = json.dumps(payload).encode()
        assert post(client, big, signed_headers(big, "issue_comment"))[0] == 202
        lease = inbox.lease(10)
        assert lease is not None and Delivery.decode(lease.body).body == big


class BrokenQueue:
    """A queue whose storage is gone (disk full, file removed)."""

    def put(self, body: bytes, dedupe_key: str) -> bool:
        raise OSError("disk I/O error")

    def lease(self, timeout: float) -> Lease | None:
        raise OSError("disk I/O error")

    def ack(self, lease: Lease) -> None: ...

    def nack(self, lease: Lease, delay: float = 0.0) -> None: ...

    def release(self, lease: Lease, delay: float = 0.0) -> None: ...

    def extend(self, lease: Lease, timeout: float) -> None: ...

    def depth(self) -> int:
        raise OSError("disk I/O error")


class TestProbes:
    def test_health_ready_metrics(self, client: TestClient) -> None:
        """healthz and readyz answer; metrics count deliveries by event and outcome."""
        headers, body = load_webhook("issues_labeled")
        post(client, body, headers)
        post(client, body, headers)
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz").json()
        assert ready["status"] == "ready" and ready["inbox_depth"] == 1
        text = client.get("/metrics").text
        assert 'nkibot_deliveries_total{event="issues",outcome="stored"} 1.0' in text
        assert 'nkibot_deliveries_total{event="issues",outcome="duplicate"} 1.0' in text
        assert "nkibot_inbox_depth 1.0" in text
        for name in ("nkibot_dispatch_seconds", "nkibot_jobs_enqueued", "nkibot_decisions"):
            assert name in text

    def test_queue_failure_is_503_not_500(self, tmp_path: Path) -> None:
        """When our queue fails, readyz and the webhook answer 503 so GitHub retries."""
        s = Settings(_env_file=None, webhook_secret=TEST_WEBHOOK_SECRET,  # type: ignore[call-arg]
                     dispatcher_enabled=False)
        client = TestClient(create_app(s, BrokenQueue()))
        assert client.get("/readyz").status_code == 503
        headers, body = load_webhook("issues_labeled")
        assert client.post("/webhook", content=body, headers=headers).status_code == 503
        assert "nkibot_inbox_depth -1.0" in client.get("/metrics").text


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20,
)
EVENTS = ["issue_comment", "issues", "pull_request", "check_run", "installation", "ping",
          "push", "", "x" * 70]


class TestFuzz:
    @settings(max_examples=150, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(payload=json_values, event=st.sampled_from(EVENTS),
           delivery=st.text(max_size=40), sign_it=st.booleans())
    def test_never_5xx(self, client: TestClient, payload: object, event: str, delivery: str,
                       sign_it: bool) -> None:
        """Any payload shape, header value and signature state gets 2xx or 4xx, never 5xx."""
        body = json.dumps(payload).encode()
        headers = {"x-github-event": event, "x-github-delivery": delivery}
        if sign_it:
            headers["x-hub-signature-256"] = signed_headers(body, "e")["x-hub-signature-256"]
        headers = {k: v for k, v in headers.items() if v.isascii() and v.isprintable()}
        status = client.post("/webhook", content=body, headers=headers).status_code
        assert 200 <= status < 500

    @settings(max_examples=100, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(body=st.binary(max_size=300))
    def test_random_bytes_signed(self, client: TestClient, body: bytes) -> None:
        """Signed random bytes are 2xx or 4xx."""
        status = post(client, body, signed_headers(body, "issues"))[0]
        assert status in (202, 400)
