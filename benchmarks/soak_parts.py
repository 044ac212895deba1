"""The moving parts of ``benchmarks/soak.py``: the webhook's front (what a Service and
kube-proxy do for two replicas), the pod stream through the webhook, the record of the
rollout ConfigMap, the operator replicas kept running, and the judges of the figures (logs,
admissions, permissions) as pure functions of what was recorded."""

from __future__ import annotations

import contextlib
import datetime
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from tests.control_plane import LOOPBACK
from tests.e2e.operator_harness import free_port, http_status, windows_pod
from tests.faults.harness import replica
from tests.fleet.harness import Operator
from tests.fleet.paced import Window

from wcow_contract.catalog.hcs_annotations import ANNOTATION_PROCESSOR_COUNT
from wcow_contract.wire.rollout import ROLLOUT_CONFIGMAP, ROLLOUT_KEY, parse_rollout

# --- the webhook's front --------------------------------------------------------------------


class Front:
    """A TCP port on loopback that hands each connection to a ready replica's webhook port,
    round robin (ready: its /readyz answered 200 at the last probe, every 0.5 s), trying the
    next when one refuses; TLS passes through untouched. What a Service with kube-proxy does
    for the chart's two replicas; the API server calls ``https://127.0.0.1:PORT``."""

    IDLE_SECONDS = 60.0

    def __init__(self, backends: Callable[[], list[tuple[int, int]]]) -> None:
        self.backends = backends  # (webhook port, health port) of each running replica
        self.port = free_port()
        self.ready: list[int] = []
        self.stopping = threading.Event()
        self._listener = socket.create_server((LOOPBACK, self.port))
        self._listener.settimeout(0.5)
        self._turn = 0

    def start(self) -> None:
        for target in (self._accept, self._probe):
            threading.Thread(target=target, daemon=True, name=f"front-{target.__name__}").start()

    def stop(self) -> None:
        self.stopping.set()
        self._listener.close()

    def _probe(self) -> None:
        while not self.stopping.is_set():
            self.ready = [
                webhook
                for webhook, health in self.backends()
                if http_status(f"http://{LOOPBACK}:{health}/readyz") == 200
            ]
            self.stopping.wait(0.5)

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        ready = list(self.ready)
        self._turn += 1
        with conn:
            for i in range(len(ready)):
                port = ready[(self._turn + i) % len(ready)]
                try:
                    upstream = socket.create_connection((LOOPBACK, port), timeout=2)
                except OSError:
                    continue
                with upstream:
                    _pipe(conn, upstream, self.IDLE_SECONDS)
                return


def _pipe(a: socket.socket, b: socket.socket, idle: float) -> None:
    """Copy bytes both ways until either side closes or nothing moves for ``idle`` s."""
    with selectors.DefaultSelector() as selector:
        selector.register(a, selectors.EVENT_READ, b)
        selector.register(b, selectors.EVENT_READ, a)
        while True:
            events = selector.select(timeout=idle)
            if not events:
                return
            for key, _ in events:
                try:
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    key.data.sendall(data)
                except OSError:
                    return


# --- the operator replicas --------------------------------------------------------------------


@dataclass
class Incarnation:
    """One process of a replica (``name``: its slot in the Deployment; ``identity``: its
    POD_NAME, the Lease holder's name): from its start to its end (None: running)."""

    name: str
    identity: str
    operator: Operator
    metrics_port: int
    started: float
    stack: contextlib.ExitStack
    ended: float | None = None
    samples: list[tuple[float, float, int, int]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.operator.process.pid


class Replicas:
    """Two ``wcow-operator`` replicas with leader election and the webhook, each on its own
    webhook port, all registering the front's URL; killed and started again as a Deployment
    would: a container restart keeps the pod's name (its Lease identity), a new pod gets a
    new one; the same webhook port (the Service's), a new log."""

    def __init__(self, kubeconfig: Path, ns: str, logs: Path, names: Iterable[str]) -> None:
        self.kubeconfig, self.ns, self.logs = kubeconfig, ns, logs
        self.webhook_ports = {name: free_port() for name in names}
        self.front = Front(self.backends)
        self.flags: tuple[str, ...] = ()
        self.history: list[Incarnation] = []
        self.unexpected_exits: list[str] = []
        self.lock = threading.Lock()

    def current(self) -> dict[str, Incarnation]:
        with self.lock:
            return {i.name: i for i in self.history if i.ended is None}

    def backends(self) -> list[tuple[int, int]]:
        return [
            (self.webhook_ports[name], i.operator.health_port) for name, i in self.current().items()
        ]

    def start(self, name: str, identity: str | None = None) -> Incarnation:
        """Start the replica of slot ``name`` as ``identity`` (default: a new pod's name)."""
        count = sum(1 for i in self.history if i.name == name) + 1
        identity = identity or f"{name}-{count}"
        port = self.webhook_ports[name]
        webhook = (
            "--webhook-port",
            str(port),
            "--webhook-url",
            f"https://{LOOPBACK}:{self.front.port}",
        )
        stack = contextlib.ExitStack()
        log = self.logs / f"{name}.{count}.log"
        operator, metrics = stack.enter_context(
            replica(self.kubeconfig, self.ns, identity, log, *self.flags, *webhook)
        )
        incarnation = Incarnation(name, identity, operator, metrics, time.time(), stack)
        with self.lock:
            self.history.append(incarnation)
        return incarnation

    def slot(self, identity: str | None) -> str | None:
        """The slot of the running replica named ``identity``."""
        found = [i.name for i in self.current().values() if i.identity == identity]
        return found[0] if found else None

    def kill(self, name: str) -> None:
        """SIGKILL: no shutdown, no drain (a node lost, an OOM kill)."""
        incarnation = self.current()[name]
        incarnation.operator.process.kill()
        incarnation.operator.process.wait(timeout=30)
        self._end(incarnation)

    def keep_running(self) -> None:
        """A replica that exited on its own is started again (a Deployment's restart) and
        noted: the soak makes no replica exit but by ``kill``."""
        for name, incarnation in self.current().items():
            code = incarnation.operator.process.poll()
            if code is not None:
                self.unexpected_exits.append(
                    f"{name} (pid {incarnation.pid}) exited with {code} at "
                    f"{time.strftime('%H:%M:%S')}; log {incarnation.operator.log}"
                )
                self._end(incarnation)
                self.start(name, incarnation.identity)  # the kubelet restarts the container

    def sample(self) -> None:
        for incarnation in self.current().values():
            found = process_figures(incarnation.pid)
            if found is not None:
                incarnation.samples.append((time.time(), *found))

    def stop(self) -> None:
        for incarnation in self.current().values():
            self._end(incarnation)

    def _end(self, incarnation: Incarnation) -> None:
        with self.lock:
            incarnation.ended = time.time()
        incarnation.stack.close()


def process_figures(pid: int) -> tuple[float, int, int] | None:
    """(RSS MiB, threads, open files) of a process from /proc; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        files = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"]), files


# --- pods through the webhook -----------------------------------------------------------------


@dataclass
class PodStream:
    """Pods of a wcow class created one at a time, every ``interval`` s, each deleted once
    created (no scheduler here: they would pile up); what became of each creation."""

    core: client.CoreV1Api
    ns: str
    runtime_class: str
    interval: float
    created: int = 0
    # (began, ended, what): "sized", "unsized" (admitted without the webhook's annotation)
    # or the refusal
    outcomes: list[tuple[float, float, str]] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            self.created += 1
            name = f"soak-{self.created}"
            body = windows_pod(name, self.runtime_class, limits={"cpu": "3", "memory": "3Gi"})
            began = time.time()
            try:
                pod = self.core.create_namespaced_pod(self.ns, body, _request_timeout=15)
            except ApiException as error:
                what = f"{error.status} {str(error.body)[:200]}"
            except Exception as error:  # noqa: BLE001 - no answer at all (the server is down)
                what = f"no answer: {type(error).__name__}: {str(error)[:160]}"
            else:
                sized = (pod.metadata.annotations or {}).get(ANNOTATION_PROCESSOR_COUNT) == "3"
                what = "sized" if sized else "unsized"
                with contextlib.suppress(Exception):
                    self.core.delete_namespaced_pod(name, self.ns, grace_period_seconds=0)
            self.outcomes.append((began, time.time(), what))


# --- the rollout, as it was at each moment ----------------------------------------------------


@dataclass
class RolloutRecord:
    """Every version of the rollout ConfigMap this process saw, with when it saw it: a watch,
    listed again after any error (a restarting API server)."""

    core: client.CoreV1Api
    ns: str
    versions: list[tuple[float, frozenset[str]]] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        selector = f"metadata.name={ROLLOUT_CONFIGMAP}"
        while not self.stopping.is_set():
            try:
                listed = self.core.list_namespaced_config_map(
                    self.ns, field_selector=selector, _request_timeout=15
                )
                for item in listed.items:
                    self._note(item)
                stream = watch.Watch().stream(
                    self.core.list_namespaced_config_map, self.ns, field_selector=selector,
                    resource_version=listed.metadata.resource_version, timeout_seconds=20,
                    _request_timeout=30,
                )  # fmt: skip
                for event in stream:
                    self._note(event["object"])
                    if self.stopping.is_set():
                        return
            except Exception:  # noqa: BLE001 - the server is restarting: list again
                self.stopping.wait(0.5)

    def _note(self, config_map: Any) -> None:
        rollout = parse_rollout((config_map.data or {}).get(ROLLOUT_KEY))
        permitted = frozenset(rollout.permitted) if rollout else frozenset()
        self.versions.append((time.time(), permitted))


def unpermitted(
    windows: Iterable[Window], versions: list[tuple[float, frozenset[str]]], slack: float = 5.0
) -> list[Window]:
    """The applies no version of the rollout around their start names: a node's preflight at
    ``t`` is permitted when its node is in a version seen within ``slack`` s of ``t``, or in
    the last one seen before (the version in force when no new one came, as in an outage)."""
    found = []
    for window in windows:
        t = window.start
        before = [v for seen, v in versions if seen < t - slack]
        around = [v for seen, v in versions if t - slack <= seen <= t + slack]
        if not any(window.node in v for v in (*before[-1:], *around)):
            found.append(window)
    return found


# --- what went wrong ---------------------------------------------------------------------------


def failed_admissions(
    outcomes: Iterable[tuple[float, float, str]], outages: list[tuple[float, float]]
) -> list[tuple[float, str]]:
    """Creations refused or failed that overlap no API-server outage, and any pod admitted
    without the webhook's sizing (never excused)."""
    found = []
    for began, ended, what in outcomes:
        if what == "sized":
            continue
        excused = what != "unsized" and any(
            began <= end and ended >= start for start, end in outages
        )
        if not excused:
            found.append((began, what))
    return found


LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


@dataclass(frozen=True)
class LogError:
    log: str
    time: float
    text: str  # the record's line, and the traceback's last line if any


def log_errors(path: Path) -> list[LogError]:
    """ERROR and CRITICAL records, and tracebacks printed outside any such record (an
    uncaught exception in a thread, a warning with one), of an operator or agent log."""
    found: list[LogError] = []
    when, pending, head = 0.0, None, ""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        match = LINE.match(line)
        if match:
            pending = None
            when = datetime.datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S").timestamp()
            if match[2] in ("ERROR", "CRITICAL"):
                head = line[:300]
                found.append(LogError(path.name, when, head))
                pending = len(found) - 1
        elif line.startswith("Traceback (most recent call last)"):
            if pending is None:
                head = line
                found.append(LogError(path.name, when, head))
                pending = len(found) - 1
        elif pending is not None and line and not line.startswith((" ", "\t")):
            # A traceback's last unindented line names the exception.
            found[pending] = LogError(path.name, when, f"{head} | {line[:200]}")
    return found


@contextlib.contextmanager
def running_thread(target: Callable[[], None], stop: threading.Event, name: str) -> Iterator[None]:
    thread = threading.Thread(target=target, daemon=True, name=name)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=60)
