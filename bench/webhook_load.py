"""Webhook ack-path load with wrk: `nkibot serve` beside a do-nothing FastAPI endpoint.

    python bench/webhook_load.py [--threads 2] [--connections 64] [--duration 15]

Both servers run in this one run as subprocesses on 127.0.0.1 under the same uvicorn
settings (one worker, log level warning, no access log). nkibot runs with its dispatcher
OFF, so the figures measure the ack path alone: read, verify the signature, check the
JSON, commit to the SQLite inbox (group commit), answer 202. The do-nothing endpoint reads
the body and answers 202.

The load comes from wrk (`wrk -t2 -c64 -d15s` by default; a C client, so the client is
not the bottleneck) with bench/webhook_load.lua: 6 KB signed issue_comment deliveries,
unique delivery ids, one in ten an exact redelivery. The bench finds wrk on PATH, or
installs the Debian package with apt-get when it runs as root, and says which.
Afterwards it checks the inbox against what wrk saw: every delivery answered "stored" is
in it, nothing is in it that was never sent, and no delivery is in it twice.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request, Response

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "webhooks" / "issue_comment_created_issue"
SCRIPT = Path(__file__).with_suffix(".lua")
SECRET = "bench-secret"
BODY_BYTES = 6 * 1024
DISTINCT_BODIES = 64


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


def find_wrk() -> str:
    """wrk's path: found on PATH, or installed from Debian's `wrk` package (as root)."""
    found = shutil.which("wrk")
    if found:
        print(f"wrk: found at {found}")
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("wrk: not on PATH; installing the Debian package `wrk` with apt-get")
        subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        found = shutil.which("wrk")
        if found:
            print(f"wrk: installed at {found}")
            return found
    sys.exit("wrk is not installed: `apt-get install wrk` (Debian/Ubuntu) or build it from "
             "https://github.com/wg/wrk, then run the bench again")


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


def _trim(value: Any) -> Any:
    """The fixture without its API `*_url` links, so a padded comment makes it 6 KB."""
    if isinstance(value, dict):
        return {k: _trim(v) for k, v in value.items()
                if not (k.endswith("_url") and k != "html_url")}
    return [_trim(v) for v in value] if isinstance(value, list) else value


def write_bodies(path: Path) -> int:
    """DISTINCT_BODIES signed 6 KB bodies, one "<signature>\\t<json>" line each."""
    payload = _trim(json.loads((FIXTURE / "payload.json").read_bytes()))
    lines = []
    for i in range(DISTINCT_BODIES):
        payload["comment"]["id"] = 10_000_000 + i
        command = f"/nki convert src/models/norm.py::RMSNorm --turns {i % 9 + 1}\n"
        payload["comment"]["body"] = command
        short = len(json.dumps(payload, separators=(",", ":")).encode())
        payload["comment"]["body"] += "x" * max(0, BODY_BYTES - short)
        body = json.dumps(payload, separators=(",", ":")).encode()
        sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        lines.append(sig.encode() + b"\t" + body)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return len(body)


def run_wrk(wrk: str, url: str, args: argparse.Namespace, bodies: Path, out: Path,
            duration: int) -> dict[str, Any]:
    env = {**os.environ, "BODIES": str(bodies), "OUT": str(out), "RUN": f"{out.stem}-"}
    cmd = [wrk, f"-t{args.threads}", f"-c{args.connections}", f"-d{duration}s", "--latency",
           "-s", str(SCRIPT), url]
    # Bounded in time: wrk stops itself after `duration`; the timeout covers a hung wrk.
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, timeout=duration + 60)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc), 0 where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def inbox_keys(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT key FROM q_inbox")]


def sent_ids(result: dict[str, Any], prefix: str) -> set[str]:
    """Every unique delivery id wrk generated (ids repeat on every tenth request)."""
    return {f"{prefix}{t['tid']}-{n}" for t in result["threads"]
            for n in range(1, t["sent"] + 1) if n % 10}


def row(name: str, r: dict[str, Any], base: dict[str, Any]) -> str:
    rps = r["requests"] / (r["duration_us"] / 1e6)
    base_rps = base["requests"] / (base["duration_us"] / 1e6)
    cpu_us = r.get("cpu_s", 0.0) / max(1, r["requests"]) * 1e6
    return (f"| {name} | {rps:,.0f} req/s | {rps / base_rps:.2f}x | {r['p50_us'] / 1000:.1f} ms "
            f"| {r['p99_us'] / 1000:.1f} ms | {cpu_us:.0f} us | {r['errors']} / {r['non2xx']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--duration", type=int, default=15, help="seconds of load per server")
    parser.add_argument("--warmup", type=int, default=2, help="seconds of unmeasured load")
    parser.add_argument("--noop-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.noop_server:
        noop_server(args.noop_server)
        return
    wrk = find_wrk()
    work = Path(tempfile.mkdtemp(prefix="nkibot-bench-"))
    db, bodies = work / "queue.db", work / "bodies.txt"
    size = write_bodies(bodies)
    env = {**os.environ, "NKIBOT_WEBHOOK_SECRET": SECRET, "NKIBOT_QUEUE_URL": f"sqlite:///{db}",
           "NKIBOT_DISPATCHER_ENABLED": "false", "NKIBOT_LOG_LEVEL": "warning"}
    nk_port, noop_port = free_port(), free_port()
    nkibot = start([sys.executable, "-m", "nkibot.cli", "serve", "--host", "127.0.0.1",
                    "--port", str(nk_port), "--no-dispatcher"], env, nk_port)
    noop = start([sys.executable, __file__, "--noop-server", str(noop_port)], env, noop_port)
    urls = {"noop": f"http://127.0.0.1:{noop_port}/webhook",
            "nkibot": f"http://127.0.0.1:{nk_port}/webhook"}
    try:
        for name, url in urls.items():  # warm: connections, caches, the SQLite file
            run_wrk(wrk, url, args, bodies, work / f"warm-{name}.json", args.warmup)
        before = set(inbox_keys(db))
        results = {}
        for (name, url), proc in zip(urls.items(), (noop, nkibot), strict=True):
            before_cpu = cpu_seconds(proc.pid)
            results[name] = run_wrk(wrk, url, args, bodies, work / f"{name}.json", args.duration)
            results[name]["cpu_s"] = cpu_seconds(proc.pid) - before_cpu
        time.sleep(1.0)  # requests in flight when wrk stopped finish their commit
    finally:
        for proc in (nkibot, noop):
            proc.terminate()
            proc.wait(timeout=15)
    report(results, inbox_keys(db), before, size, args)


def report(results: dict[str, dict[str, Any]], keys: list[str], before: set[str], size: int,
           args: argparse.Namespace) -> None:
    base, ours = results["noop"], results["nkibot"]
    new = [k for k in keys if k not in before]
    sent = sent_ids(ours, "nkibot-")
    acked = {d for t in ours["threads"] for d in t["stored"]}
    repeats = sum(t["repeats"] for t in ours["threads"])
    print(f"wrk -t{args.threads} -c{args.connections} -d{args.duration}s, {size} B signed "
          f"issue_comment deliveries, one in ten redelivered; dispatcher off; one uvicorn "
          f"worker each; 127.0.0.1")
    print("| server | throughput | vs do-nothing | p50 | p99 | server CPU per request "
          "| socket errors / non-2xx |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print(row("do-nothing FastAPI + uvicorn", base, base))
    print(row("`nkibot serve`", ours, base))
    ratio = (ours["requests"] / ours["duration_us"]) / (base["requests"] / base["duration_us"])
    print(f"throughput ratio {ratio:.2f} (target >= 0.50)   p99 ratio "
          f"{ours['p99_us'] / base['p99_us']:.2f} (target <= 3.00)")
    print(f"inbox: {len(new)} items; {len(acked)} deliveries answered 'stored', {repeats} "
          f"answered 'already stored'; {len(sent)} unique ids sent")
    print(f"  acked but missing from the inbox (lost): {len(acked - set(new))}; in the inbox "
          f"but never sent: {len(set(new) - sent)}; in the inbox twice: "
          f"{len(new) - len(set(new))}; stored while wrk stopped (no answer read): "
          f"{len(set(new) - acked)}")


if __name__ == "__main__":
    main()
