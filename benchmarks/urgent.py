"""The urgent submit filter under load: ``POST /urgent/authenticate`` on a real server.

Peer figure: the targets set for this work, p99 under 10 ms and at least 1,000
requests/s on this machine, with 10,000 tokens and 100,000 audit records in the store.
The server (uvicorn with TLS, the project's ASGI app) runs in its own process on
127.0.0.1; clients are asyncio HTTPS connections in this one, each asking for a
different team member of an active session, as a resource's submit path does.

    python benchmarks/urgent.py [--requests 5000] [--clients 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

TOKENS, AUDIT = 10_000, 100_000


def prepare(state: Path) -> str:
    """The store: 10,000 active tokens of two members each, 100,000 audit records; the
    resource's key."""
    from elasticsite.urgent.principals import Principals
    from elasticsite.urgent.store import UrgentStore
    from elasticsite.urgent.tokens import digest, new_token

    store = UrgentStore(state / "urgent.db")
    now = time.time()
    _, key = Principals(store.db).add("lab-submit", "resource", now, resources=["lab"])
    with store.db.transaction():
        store.db.executemany(
            "INSERT INTO tokens VALUES (?, ?, ?, 3, 86400, ?, 'ops', '', ?, ?, NULL, 0)",
            [(f"t{i}", digest(new_token()), '["lab"]', now, now, now + 86400)
             for i in range(TOKENS)],
        )  # fmt: skip
        store.db.executemany(
            "INSERT INTO members VALUES (?, ?, 'lab', ?)",
            [(f"t{i}", f"u{i}-{m}", f"u{i}-{m}") for i in range(TOKENS) for m in range(2)],
        )
        store.db.executemany(
            "INSERT INTO audit (at, action, actor, token_id, resource, identity, urgency, ok, "
            "reason, source) VALUES (?, 'authenticate', ?, ?, 'lab', ?, 'red', 1, '', '')",
            [(now - AUDIT + i, f"u{i % TOKENS}-0", f"t{i % TOKENS}", f"u{i % TOKENS}-0")
             for i in range(AUDIT)],
        )  # fmt: skip
    store.close()
    return key


SERVER = """
import sys
from pathlib import Path
from elasticsite.server import build_server, create_app
from elasticsite.context.tls import ensure_certificate
from elasticsite.urgent.routes import UrgentService
from elasticsite.urgent.store import UrgentStore
state, port = Path(sys.argv[1]), int(sys.argv[2])
cert, key = ensure_certificate(state, ["127.0.0.1"])
store = UrgentStore(state / "urgent.db", max_failures=10**9)
app = create_app(state / "broker", admin_token="a" * 43, urgent=UrgentService(store))
build_server(app, host="127.0.0.1", port=port, certfile=cert, keyfile=key,
             log_level="warning").run()
"""


async def load(port: int, ca: Path, key: str, requests: int, clients: int) -> list[float]:
    """``clients`` keep-alive TLS connections (a minimal HTTP/1.1 client over asyncio
    streams, so the client's own cost stays small beside the server's on 2 cores)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    latencies: list[float] = []
    per = requests // clients

    async def client(c: int) -> None:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1"
        )
        for n in range(per):
            i = (c * per + n) % TOKENS
            body = json.dumps({"resource": "lab", "urgency": "red", "identity": f"u{i}-{n % 2}"})
            head = (
                f"POST /urgent/authenticate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n{body}"
            ).encode()
            t0 = time.perf_counter()
            writer.write(head)
            await writer.drain()
            status = int((await reader.readuntil(b"\r\n")).split()[1])
            length = 0
            while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            answer = await reader.readexactly(length)
            latencies.append(time.perf_counter() - t0)
            assert status == 200 and b'"ok":true' in answer, answer
        writer.close()

    await asyncio.gather(*(client(c) for c in range(clients)))
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        key = prepare(state)
        port = 20000 + secrets.randbelow(20000)
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(state), str(port)],
                                  env={**os.environ})  # fmt: skip
        try:
            url = f"https://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(f"{url}/healthz", verify=str(state / "broker.crt"), timeout=1)
                    break
                except (httpx.HTTPError, OSError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            ca = state / "broker.crt"
            asyncio.run(load(port, ca, key, 200, 4))  # warm-up
            # Latency: one submit path at a time. Throughput: many at once.
            lat = sorted(asyncio.run(load(port, ca, key, args.requests // 5, 1)))
            t0 = time.perf_counter()
            many = asyncio.run(load(port, ca, key, args.requests, args.clients))
            elapsed = time.perf_counter() - t0
        finally:
            server.terminate()
            server.wait(20)
    p50, p99 = statistics.median(lat), lat[int(0.99 * (len(lat) - 1))]
    rate = len(many) / elapsed
    many.sort()
    print(f"{TOKENS:,} tokens, {AUDIT:,} audit records (each request adds one)")
    print(f"one client, {len(lat):,} requests: p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms")
    print(f"{args.clients} clients, {len(many):,} requests: {rate:,.0f} requests/s, p99 "
          f"{many[int(0.99 * (len(many) - 1))] * 1e3:.1f} ms")  # fmt: skip
    print(
        f"ratios to the targets: p99 {p99 / 0.010:.2f} of 10 ms; rate {rate / 1000:.2f}x of 1,000/s"
    )


if __name__ == "__main__":
    main()
