"""Latency of the pod admission webhook per admission at 50 concurrent requests, against a
no-op handler in the same server as the floor.

The server is aiohttp over TLS, as kopf's WebhookServer serves it, with the project's own
certificate; the handler runs the webhook's decision (``admit``) and answers with a JSON
patch as kopf does (jsonpatch diff, base64). Run: ``.venv/bin/python benchmarks/admission.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import ssl
import statistics
import time
from typing import Any

import aiohttp
import jsonpatch
from aiohttp import web

from wcow_operator.api.errors import parse_profile
from wcow_operator.handlers.certificates import self_signed
from wcow_operator.reconcile.admission import Admitted, admit

PROFILES = {
    "sized": parse_profile(
        {
            "apiVersion": "runtime.wcow.dev/v1alpha1",
            "kind": "WindowsRuntimeProfile",
            "metadata": {"name": "sized"},
            "spec": {
                "isolation": "HyperV",
                "windowsBuild": "ltsc2022",
                "vm": {"sizing": "FromPodLimits", "maxProcessorCount": 16, "maxMemoryMB": 65536},
            },
        }
    )
}


def review(uid: int) -> dict[str, Any]:
    containers = [
        {"name": f"c{i}", "image": "nanoserver", "resources": {"limits": {"cpu": "1500m",
         "memory": "1Gi"}}} for i in range(3)
    ]  # fmt: skip
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{uid}", "namespace": "default"},
        "spec": {"runtimeClassName": "sized", "containers": containers},
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": str(uid), "operation": "CREATE", "object": pod},
    }


async def mutate(request: web.Request) -> web.Response:
    data = await request.json()
    pod = data["request"]["object"]
    decision = admit(pod, PROFILES)
    response: dict[str, Any] = {"uid": data["request"]["uid"], "allowed": True}
    if isinstance(decision, Admitted):
        if decision.mutated:
            ops = jsonpatch.JsonPatch.from_diff(pod, decision.pod).patch
            response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
            response["patchType"] = "JSONPatch"
    else:
        response = {**response, "allowed": False, "status": {"message": decision.message}}
    return web.json_response({**data, "response": response})


async def noop(request: web.Request) -> web.Response:
    data = await request.json()
    return web.json_response({**data, "response": {"uid": data["request"]["uid"],
                                                    "allowed": True}})  # fmt: skip


async def load(url: str, context: ssl.SSLContext, total: int, concurrency: int) -> list[float]:
    latencies: list[float] = []
    queue = iter(range(total))
    connector = aiohttp.TCPConnector(ssl=context, limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            for uid in queue:
                body = review(uid)
                started = time.perf_counter()
                async with session.post(url, json=body) as answer:
                    assert answer.status == 200
                    assert (await answer.json())["response"]["allowed"]
                latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


async def main(total: int, concurrency: int) -> None:
    certificate = self_signed(["127.0.0.1"])
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(certificate.certfile, certificate.keyfile)
    client_context = ssl.create_default_context(cadata=certificate.ca_pem)
    app = web.Application()
    app.add_routes([web.post("/mutate-pods", mutate), web.post("/noop", noop)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        for name in ("noop", "mutate-pods"):
            await load(f"https://127.0.0.1:{port}/{name}", client_context, 200, concurrency)
            latencies = sorted(
                await load(f"https://127.0.0.1:{port}/{name}", client_context, total, concurrency)
            )
            p99 = latencies[int(len(latencies) * 0.99) - 1]
            print(
                f"{name:12} {total} admissions, {concurrency} concurrent: "
                f"median {statistics.median(latencies) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms"
            )
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.concurrency))
