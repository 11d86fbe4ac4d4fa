"""Webhook ack-path load: `nkibot serve` against a do-nothing FastAPI endpoint.

Both servers run as subprocesses under the same uvicorn settings (one worker,
log level warning, no access log). nkibot runs with its dispatcher OFF, so the
figures measure the ack path alone: read, verify the signature, check the JSON,
write to the SQLite inbox, answer. The do-nothing endpoint reads the body and
answers 202.

    python bench/webhook_load.py [--n 4000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
from fastapi import FastAPI, Request, Response
from githubkit.webhooks import sign

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "webhooks" / "issue_comment_created_issue"
SECRET = "bench-secret"


def noop_server(port: int) -> None:
    """The baseline: a FastAPI endpoint that reads the body and does nothing else."""
    import uvicorn

    app = FastAPI()

    @app.post("/webhook")
    async def hook(request: Request) -> Response:
        await request.body()
        return Response(status_code=202)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                server_header=False)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(cmd: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{cmd} did not start")


def build_requests(n: int, seed: int = 7) -> tuple[list[tuple[bytes, dict[str, str]]], int]:
    """N signed deliveries; 10% are exact redeliveries of earlier ones. Returns (reqs, unique)."""
    rng = random.Random(seed)
    payload = json.loads((FIXTURE / "payload.json").read_bytes())
    unique: list[tuple[bytes, dict[str, str]]] = []
    reqs: list[tuple[bytes, dict[str, str]]] = []
    for i in range(n):
        if unique and rng.random() < 0.10:
            reqs.append(rng.choice(unique))
            continue
        payload["comment"]["id"] = 10_000_000 + i
        payload["comment"]["body"] = f"/nki convert src/models/norm.py::RMSNorm --turns {i % 9 + 1}"
        body = json.dumps(payload).encode()
        headers = {"content-type": "application/json", "x-github-event": "issue_comment",
                   "x-github-delivery": str(uuid.UUID(int=rng.getrandbits(128))),
                   "x-hub-signature-256": sign(SECRET, body, "sha256")}
        unique.append((body, headers))
        reqs.append((body, headers))
    return reqs, len(unique)


@dataclass
class Result:
    seconds: float
    latencies: list[float]
    statuses: dict[int, int]

    def add(self, other: Result) -> None:
        self.seconds += other.seconds
        self.latencies += other.latencies
        for code, count in other.statuses.items():
            self.statuses[code] = self.statuses.get(code, 0) + count

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.seconds

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def load(client: httpx.AsyncClient, url: str, reqs: list[tuple[bytes, dict[str, str]]],
               concurrency: int) -> Result:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    queue: asyncio.Queue[tuple[bytes, dict[str, str]]] = asyncio.Queue()
    for item in reqs:
        queue.put_nowait(item)

    async def worker() -> None:
        while not queue.empty():
            body, headers = queue.get_nowait()
            start = time.perf_counter()
            status = -1
            # A keep-alive connection closed by the server as it is reused is retried on a
            # fresh one, as GitHub's sender would; -1 counts requests that never got an answer.
            for _ in range(3):
                try:
                    status = (await client.post(url, content=body, headers=headers)).status_code
                    break
                except httpx.TransportError:
                    continue
            latencies.append(time.perf_counter() - start)
            statuses[status] = statuses.get(status, 0) + 1

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return Result(time.perf_counter() - began, latencies, statuses)


async def compare(urls: tuple[str, str], warm: list[tuple[bytes, dict[str, str]]],
                  reqs: list[tuple[bytes, dict[str, str]]], concurrency: int,
                  rounds: int) -> tuple[Result, Result]:
    """Warm both (connections open), then alternate rounds so host noise hits both alike."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    results = (Result(0.0, [], {}), Result(0.0, [], {}))
    async with httpx.AsyncClient(limits=limits, timeout=60) as a, \
            httpx.AsyncClient(limits=limits, timeout=60) as b:
        clients = (a, b)
        for client, url in zip(clients, urls, strict=True):
            await load(client, url, warm, concurrency)
        step = -(-len(reqs) // rounds)
        for start_at in range(0, len(reqs), step):
            for client, url, result in zip(clients, urls, results, strict=True):
                result.add(await load(client, url, reqs[start_at:start_at + step], concurrency))
    return results


def report(name: str, r: Result) -> None:
    print(f"{name:10s} {r.throughput:9.0f} req/s   p50 {r.pct(0.50):7.2f} ms   "
          f"p99 {r.pct(0.99):7.2f} ms   mean {statistics.fmean(r.latencies) * 1000:7.2f} ms   "
          f"statuses {dict(sorted(r.statuses.items()))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds per target")
    parser.add_argument("--noop-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.noop_server:
        noop_server(args.noop_server)
        return

    work = Path(tempfile.mkdtemp(prefix="nkibot-bench-"))
    db = work / "queue.db"
    env = {**os.environ, "NKIBOT_WEBHOOK_SECRET": SECRET, "NKIBOT_QUEUE_URL": f"sqlite:///{db}",
           "NKIBOT_DISPATCHER_ENABLED": "false", "NKIBOT_LOG_LEVEL": "warning"}
    nk_port, noop_port = free_port(), free_port()
    nkibot = start([sys.executable, "-m", "nkibot.cli", "serve", "--host", "127.0.0.1",
                    "--port", str(nk_port), "--no-dispatcher"], env, nk_port)
    noop = start([sys.executable, __file__, "--noop-server", str(noop_port)], env, noop_port)
    try:
        warm, _ = build_requests(200, seed=1)
        reqs, unique = build_requests(args.n)
        urls = (f"http://127.0.0.1:{noop_port}/webhook", f"http://127.0.0.1:{nk_port}/webhook")
        base, ours = asyncio.run(compare(urls, warm, reqs, args.concurrency, args.rounds))
    finally:
        for proc in (nkibot, noop):
            proc.terminate()
            proc.wait(timeout=15)

    from nkibot.jobs.sqlite import SqliteQueue

    stored = SqliteQueue(db, "inbox").count() - len({h["x-github-delivery"] for _, h in warm})
    print(f"{args.n} deliveries ({unique} unique, {args.n - unique} redeliveries), "
          f"concurrency {args.concurrency}, dispatcher off, one uvicorn worker each")
    report("do-nothing", base)
    report("nkibot", ours)
    print(f"throughput ratio {ours.throughput / base.throughput:.2f} (target >= 0.50)   "
          f"p99 ratio {ours.pct(0.99) / base.pct(0.99):.2f} (target <= 3.00)")
    print(f"inbox items {stored} vs unique deliveries {unique}: "
          f"lost {max(0, unique - stored)}, duplicated {max(0, stored - unique)}")


if __name__ == "__main__":
    main()
