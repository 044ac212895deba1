"""Latency of the pod admission webhook per admission at 50 concurrent requests, against a
no-op handler in the same server as the floor.

The server is aiohttp over TLS, as kopf's WebhookServer serves it, with the project's own
certificate; the handler runs the webhook's decision (``admit``) and answers with a JSON
patch as kopf does (jsonpatch diff, base64). Run: ``.venv/bin/python benchmarks/admission.py``.

First (``--decisions-only`` for just these): the decision alone, in CPU time of the deciding
thread, for a pod of 100 and of 256 containers (the cap) and for hostile pods (quantities of
1e20000000, 1000 annotations hcsshim reads), as ratios to a pod of 3 containers; and the
longest gap a 1 ms heartbeat thread sees while hostile pods are decided, against its gap at
rest (the interpreter lock: one hostile pod once held it for 19 s, before quantities had one
bounded parser).

With image checks (skipped with a note when the test registry is not built): the
same pods with their images on the test registry (tests/registry.py, loopback HTTP), decided
as the webhook does with --resolve-images (``ImageAdmission.admit``): warm (every lookup
answered by the cache; decided inline as mutate-pods is, so the ratio is the decisions') and
cold (a cache that keeps nothing: every pod reads the index from the registry; decided in a
pool of two threads, as the ``Decider`` runs it), printed beside the no-op floor and the
sizing-only figure of the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import ssl
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import aiohttp
import jsonpatch
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.registry import BIN, Registry

from wcow_contract.errors import parse_profile
from wcow_operator.registry.client import RegistryClient
from wcow_operator.registry.resolver import FactsCache, Resolver
from wcow_operator.webhook.certificates import self_signed
from wcow_operator.webhook.decide import admit
from wcow_operator.webhook.decision import Admitted, Decision
from wcow_operator.webhook.image_admission import ImageAdmission
from wcow_operator.webhook.pod_shape import MAX_CONTAINERS

IMAGE = "nanoserver"  # review()'s image; with image checks, a reference on the test registry
POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="admission")  # as the Decider

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
        {"name": f"c{i}", "image": IMAGE, "resources": {"limits": {"cpu": "1500m",
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


def _pod(count: int, limits: dict[str, str], annotations: int = 0) -> dict[str, Any]:
    vm = "io.microsoft.virtualmachine."
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": {f"{vm}k{i}": "1" for i in range(annotations)}},
        "spec": {
            "runtimeClassName": "sized",
            "containers": [
                {"name": f"c{i}", "resources": {"limits": dict(limits)}} for i in range(count)
            ],
        },
    }


def _thread_ms(body: dict[str, Any], rounds: int) -> float:
    admit(body, PROFILES)
    started = time.thread_time()
    for _ in range(rounds):
        admit(body, PROFILES)
    return (time.thread_time() - started) / rounds * 1000


def _gaps(work: Any, seconds: float) -> tuple[float, float]:
    """The 99th percentile and longest gap (ms) between 1 ms ticks of another thread while
    ``work`` runs."""
    gaps: list[float] = []
    done = threading.Event()

    def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        work()
    done.set()
    ticker.join()
    gaps.sort()
    return gaps[int(len(gaps) * 0.99)] * 1000, gaps[-1] * 1000


def decisions() -> None:
    normal = {"cpu": "1500m", "memory": "1Gi"}
    huge = {"cpu": "1e20000000", "memory": "1e999999999"}
    base = _thread_ms(_pod(3, normal), 2000)
    print(f"decision, 3 containers: {base:.3f} ms thread time (the baseline)")
    for label, body, rounds in (
        ("100 containers", _pod(100, normal), 200),
        (f"{MAX_CONTAINERS} containers (the cap)", _pod(MAX_CONTAINERS, normal), 100),
        ("100 containers, 1e20000000 quantities", _pod(100, huge), 200),
        ("3 containers, 1000 hcsshim annotations", _pod(3, normal, annotations=1000), 200),
    ):
        took = _thread_ms(body, rounds)
        print(f"decision, {label}: {took:.3f} ms ({took / base:.1f}x; budget 50 ms)")
    hostile = _pod(MAX_CONTAINERS, huge)
    rest = _gaps(lambda: time.sleep(0.01), 2.0)
    busy = _gaps(lambda: admit(hostile, PROFILES), 2.0)
    print(
        f"1 ms heartbeat gaps, p99/longest: {rest[0]:.2f}/{rest[1]:.2f} ms at rest, "
        f"{busy[0]:.2f}/{busy[1]:.2f} ms while deciding hostile pods back to back "
        f"({busy[0] / rest[0]:.1f}x at p99)"
    )


def answer(data: dict[str, Any], decision: Decision) -> web.Response:
    pod = data["request"]["object"]
    response: dict[str, Any] = {"uid": data["request"]["uid"], "allowed": True}
    if isinstance(decision, Admitted):
        if decision.mutated:
            ops = jsonpatch.JsonPatch.from_diff(pod, decision.pod).patch
            response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
            response["patchType"] = "JSONPatch"
    else:
        response = {**response, "allowed": False, "status": {"message": decision.message}}
    return web.json_response({**data, "response": response})


async def mutate(request: web.Request) -> web.Response:
    data = await request.json()
    return answer(data, admit(data["request"]["object"], PROFILES))


def images_route(checks: ImageAdmission, *, pooled: bool) -> Any:
    """Cold lookups block: decided in the pool. Warm ones are cache hits: decided inline, as
    mutate-pods decides, so the two figures compare the decisions and not the thread hop."""

    async def mutate_images(request: web.Request) -> web.Response:
        data = await request.json()
        pod = data["request"]["object"]
        if pooled:
            loop = asyncio.get_running_loop()
            decision = await loop.run_in_executor(POOL, checks.admit, pod, PROFILES)
        else:
            decision = checks.admit(pod, PROFILES)
        assert isinstance(decision, Admitted), decision
        assert decision.pod["spec"]["containers"][0]["image"] != IMAGE, "not pinned"
        return answer(data, decision)

    return mutate_images


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


async def main(total: int, concurrency: int, registry_host: str | None) -> None:
    certificate = self_signed(["127.0.0.1"])
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(certificate.certfile, certificate.keyfile)
    client_context = ssl.create_default_context(cadata=certificate.ca_pem)
    app = web.Application()
    app.add_routes([web.post("/mutate-pods", mutate), web.post("/noop", noop)])
    names: list[tuple[str, int]] = [("noop", total), ("mutate-pods", total)]
    if registry_host is not None:
        client = RegistryClient(insecure=frozenset({registry_host}))
        warm = ImageAdmission(Resolver(client))
        cold = ImageAdmission(Resolver(client, cache=FactsCache(size=0)))
        app.add_routes([web.post("/images-warm", images_route(warm, pooled=False)),
                        web.post("/images-cold", images_route(cold, pooled=True))])  # fmt: skip
        names += [("images-warm", total), ("images-cold", max(total // 5, 200))]
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    figures: dict[str, tuple[float, float]] = {}
    try:
        for name, count in names:
            await load(f"https://127.0.0.1:{port}/{name}", client_context, 200, concurrency)
            latencies = sorted(
                await load(f"https://127.0.0.1:{port}/{name}", client_context, count, concurrency)
            )
            p99 = latencies[int(len(latencies) * 0.99) - 1]
            figures[name] = (statistics.median(latencies), p99)
            print(
                f"{name:12} {count} admissions, {concurrency} concurrent: "
                f"median {statistics.median(latencies) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms"
            )
        if "images-warm" in figures:
            sizing, floor = figures["mutate-pods"], figures["noop"]
            for name in ("images-warm", "images-cold"):
                median, p99 = figures[name]
                print(
                    f"{name}: {median / sizing[0]:.2f}x the sizing-only median "
                    f"({p99 / sizing[1]:.2f}x at p99), {median / floor[0]:.2f}x the no-op floor"
                )
    finally:
        await runner.cleanup()


def _registry(folder: Path) -> Any:
    """The test registry with a Windows index of 17763 and 20348 (review()'s image), or None
    when it is not built."""
    global IMAGE  # noqa: PLW0603 - review() builds the pods the load sends
    if not BIN.exists():
        print(f"image checks: not measured, the test registry is not built ({BIN})")
        return None
    registry = Registry(folder)
    registry.start()
    old = registry.push_image("wcow/app", "10.0.17763.1234")
    new = registry.push_image("wcow/app", "10.0.20348.2655")
    registry.push_index("wcow/app", "multi", [old, new])
    IMAGE = registry.reference("wcow/app", "multi")
    return registry


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--decisions-only", action="store_true")
    parser.add_argument(
        "--tenants",
        action="store_true",
        help="on the real API server: one tenant's flood of dry runs and slow registries "
        "against another tenant's admissions (benchmarks/admission_tenants.py)",
    )
    args = parser.parse_args()
    if args.tenants:
        from benchmarks.admission_tenants import run as tenants

        tenants()
        sys.exit(0)
    decisions()
    if not args.decisions_only:
        with TemporaryDirectory() as folder:
            registry = _registry(Path(folder))
            try:
                asyncio.run(main(args.requests, args.concurrency, registry and registry.host))
            finally:
                if registry is not None:
                    registry.stop()
