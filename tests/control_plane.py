"""A real Kubernetes control plane on loopback for the e2e and fleet tests.

etcd, kube-apiserver and kube-controller-manager (garbage collector, namespace, service
account, admission-policy status, disruption and job controllers; no kubelet, no scheduler)
built from the versions pinned in tools/control-plane/go.mod into .cache/control-plane/bin/.
Certificates are generated for each start; the admin kubeconfig authenticates with a client
certificate in system:masters.

Used by the e2e fixture (session scope) and by people:

    python -m tests.control_plane up     # start in .cache/control-plane/run, print KUBECONFIG
    python -m tests.control_plane down   # stop what `up` started
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "control-plane"
BIN = CACHE / "bin"
RUN = CACHE / "run"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
BUILD_SCRIPT = ROOT / "tools" / "control-plane" / "build.sh"
LOOPBACK = "127.0.0.1"


def terminate(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL if it is still running after ``timeout`` seconds."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def missing_binaries(bin_dir: Path = BIN) -> list[str]:
    return [name for name in BINARIES if not os.access(bin_dir / name, os.X_OK)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


# --- certificates -------------------------------------------------------------------------


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _certificate(
    subject: x509.Name,
    key: rsa.RSAPrivateKey,
    issuer: tuple[x509.Certificate, rsa.RSAPrivateKey] | None,
    *,
    server: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=7))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        builder = builder.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), True
        )
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), False)
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address(LOOPBACK)),
                    ]
                ),
                False,
            )
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


@dataclass(frozen=True)
class Certificates:
    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    @classmethod
    def generate(cls, directory: Path) -> Certificates:
        """A CA, the API server's serving certificate, an admin client (system:masters) and
        the service account signing key pair."""
        directory.mkdir(parents=True, exist_ok=True)
        ca_key = _key()
        ca = _certificate(_name("wcow-test-ca"), ca_key, None)
        files: dict[str, bytes] = {
            "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
            "ca.key": _pem_key(ca_key),
        }
        for stem, subject, server in (
            ("apiserver", _name("kube-apiserver"), True),
            ("admin", _name("wcow-test-admin", "system:masters"), False),
        ):
            key = _key()
            cert = _certificate(subject, key, (ca, ca_key), server=server)
            files[f"{stem}.crt"] = cert.public_bytes(serialization.Encoding.PEM)
            files[f"{stem}.key"] = _pem_key(key)
        sa_key = _key()
        files["sa.key"] = _pem_key(sa_key)
        files["sa.pub"] = sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        for name, data in files.items():
            target = directory / name
            target.write_bytes(data)
            target.chmod(0o600)
        return cls(directory)


# --- processes ----------------------------------------------------------------------------


@dataclass
class ControlPlane:
    """The three processes and the files they use, all under ``workdir``."""

    workdir: Path
    bin_dir: Path = BIN
    etcd_port: int = field(default_factory=free_port)
    etcd_peer_port: int = field(default_factory=free_port)
    apiserver_port: int = field(default_factory=free_port)
    # kube-apiserver's --etcd-compaction-interval (its default: 5m); the fault tests shorten
    # it so watches resuming from an old resourceVersion get 410 Gone.
    compaction_interval: str | None = None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # Each process's command line, kept so a fault test can restart it on the same ports,
    # certificates and data directory (``kill`` then ``restart``).
    commands: dict[str, list[str]] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.apiserver_port}"

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def start(self, timeout: float = 120) -> None:
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise RuntimeError(
                f"control plane binaries missing in {self.bin_dir}: {', '.join(missing)}; "
                f"build them with {BUILD_SCRIPT.relative_to(ROOT)} (or `make e2e`)"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        certs = Certificates.generate(self.workdir / "pki")
        self._write_kubeconfig(certs)
        try:
            self._spawn("etcd", self._etcd_args())
            self._wait_http(f"http://{LOOPBACK}:{self.etcd_port}/health", "etcd", timeout)
            self._spawn("kube-apiserver", self._apiserver_args(certs))
            self._wait_http(f"{self.server}/readyz", "kube-apiserver", timeout, certs)
            self._spawn("kube-controller-manager", self._controller_manager_args(certs))
            self._wait_default_service_account(timeout)
        except BaseException:
            self.stop()
            raise
        (self.workdir / "pids").write_text(
            "".join(f"{name} {proc.pid}\n" for name, proc in self.processes.items())
        )

    def stop(self) -> None:
        """Stop in reverse order of start; SIGTERM, then SIGKILL after 15 s."""
        for name in reversed(list(self.processes)):
            terminate(self.processes.pop(name), 15)
        with contextlib.suppress(FileNotFoundError):
            (self.workdir / "pids").unlink()

    def kill(self, name: str) -> None:
        """SIGKILL one process (``etcd``, ``kube-apiserver``): a crash, no shutdown."""
        process = self.processes.pop(name)
        process.kill()
        process.wait(timeout=30)

    def restart(self, name: str, timeout: float = 120) -> float:
        """Start a killed process again with the same command line (same ports, certificates,
        data directory); return the seconds until it answered its health check."""
        started = time.monotonic()
        self._spawn(name, self.commands[name], append=True)
        certs = Certificates(self.workdir / "pki")
        if name == "etcd":
            self._wait_http(f"http://{LOOPBACK}:{self.etcd_port}/health", name, timeout)
        elif name == "kube-apiserver":
            self._wait_http(f"{self.server}/readyz", name, timeout, certs)
        return time.monotonic() - started

    def wait_ready(self, timeout: float = 120) -> None:
        """Until kube-apiserver answers /readyz (after etcd came back, say)."""
        certs = Certificates(self.workdir / "pki")
        self._wait_http(f"{self.server}/readyz", "kube-apiserver", timeout, certs)

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision, as kube-apiserver does every
        --etcd-compaction-interval; return that revision. Through etcd's JSON gateway to its
        v3 API (/v3/kv/range, /v3/kv/compaction; etcd's api/etcdserverpb/rpc.proto)."""
        base = f"http://{LOOPBACK}:{self.etcd_port}/v3/kv"
        header = _etcd_call(f"{base}/range", {"key": "AA==", "limit": 1})["header"]
        revision = int(header["revision"])
        try:
            _etcd_call(f"{base}/compaction", {"revision": revision, "physical": True})
        except urllib.error.HTTPError as error:
            if b"compacted" not in error.read():  # already compacted to there: done
                raise
        return revision

    def _spawn(self, name: str, args: list[str], *, append: bool = False) -> None:
        self.commands[name] = args
        with self.log(name).open("ab" if append else "wb") as log:
            self.processes[name] = subprocess.Popen(
                [str(self.bin_dir / name), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in a shell stops it only through stop()
            )

    def _etcd_args(self) -> list[str]:
        peer = f"http://{LOOPBACK}:{self.etcd_peer_port}"
        client = f"http://{LOOPBACK}:{self.etcd_port}"
        return [
            "--name=wcow-test",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=wcow-test={peer}",
            # A throwaway test store: durability buys nothing and fsync costs seconds.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def _apiserver_args(self, certs: Certificates) -> list[str]:
        return [
            f"--etcd-servers=http://{LOOPBACK}:{self.etcd_port}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={certs.path('apiserver.crt')}",
            f"--tls-private-key-file={certs.path('apiserver.key')}",
            f"--client-ca-file={certs.path('ca.crt')}",
            f"--service-account-key-file={certs.path('sa.pub')}",
            f"--service-account-signing-key-file={certs.path('sa.key')}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--api-audiences=https://kubernetes.default.svc",
            "--authorization-mode=RBAC",
            # As kubeadm and kind set it: the agent is a privileged HostProcess DaemonSet.
            "--allow-privileged=true",
            "--service-cluster-ip-range=10.96.0.0/16",
            # No kubelets: nothing would answer the endpoint reconciler's or the
            # aggregator's calls to Services.
            "--endpoint-reconciler-type=none",
            # Calls to webhooks behind Services go to an endpoint's address, not the ClusterIP
            # (no kube-proxy here): tests point a Service's EndpointSlice at this host.
            "--enable-aggregator-routing=true",
            "--enable-priority-and-fairness=true",
            "--profiling=false",
            *(
                [f"--etcd-compaction-interval={self.compaction_interval}"]
                if self.compaction_interval
                else []
            ),
            "--v=1",
        ]

    def _controller_manager_args(self, certs: Certificates) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            # validatingadmissionpolicy-status-controller: the server's type check of the
            # chart's policies (status.typeChecking), which tests/e2e/test_guards.py reads.
            # disruption: PodDisruptionBudgets' status, which the Eviction API reads
            # (tests/fleet/test_fleet_drain.py). job: the chart's uninstall hook Job makes its
            # pod, whose end completes the Job for `helm uninstall` (tests/e2e/test_uninstall.py
            # runs the pod's command).
            "--controllers=garbagecollector,namespace,serviceaccount,serviceaccount-token,"
            "validatingadmissionpolicy-status-controller,disruption,job",
            f"--service-account-private-key-file={certs.path('sa.key')}",
            f"--root-ca-file={certs.path('ca.crt')}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={free_port()}",
            "--leader-elect=false",
            "--use-service-account-credentials=false",
            "--v=1",
        ]

    def _write_kubeconfig(self, certs: Certificates) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "wcow-test",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(certs.path("ca.crt")),
                    },
                }
            ],
            "users": [
                {
                    "name": "wcow-test-admin",
                    "user": {
                        "client-certificate": str(certs.path("admin.crt")),
                        "client-key": str(certs.path("admin.key")),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "wcow-test",
                    "context": {"cluster": "wcow-test", "user": "wcow-test-admin"},
                }
            ],
            "current-context": "wcow-test",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                tail = self.log(name).read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{tail}")

    def _wait_http(
        self, url: str, what: str, timeout: float, certs: Certificates | None = None
    ) -> None:
        context = None
        if certs is not None:
            context = ssl.create_default_context(cafile=str(certs.path("ca.crt")))
            context.load_cert_chain(certs.path("admin.crt"), certs.path("admin.key"))
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with urllib.request.urlopen(url, timeout=5, context=context) as response:
                    if response.status == 200:
                        return
            except OSError as error:
                last = str(error)
            time.sleep(0.25)
        raise RuntimeError(
            f"{what} not ready after {timeout:.0f} s ({last}); log: {self.log(what)}"
        )

    def _wait_default_service_account(self, timeout: float) -> None:
        """Pods need the `default` ServiceAccount, which the controller manager creates."""
        from kubernetes import client, config

        api = client.CoreV1Api(config.new_client_from_config(str(self.kubeconfig)))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            if any(
                sa.metadata.name == "default"
                for sa in api.list_namespaced_service_account("default").items
            ):
                return
            time.sleep(0.25)
        raise RuntimeError(
            "kube-controller-manager did not create the default ServiceAccount "
            f"in {timeout:.0f} s; log: {self.log('kube-controller-manager')}"
        )


def _etcd_call(url: str, body: dict[str, object]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return dict(json.loads(response.read()))


@contextlib.contextmanager
def running(workdir: Path, compaction_interval: str | None = None) -> Iterator[ControlPlane]:
    plane = ControlPlane(workdir, compaction_interval=compaction_interval)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@contextlib.contextmanager
def cluster_kubeconfig() -> Iterator[Path]:
    """For benchmarks: the cluster KUBECONFIG points at, or else a local control plane
    started for the duration (KUBECONFIG is set to it meanwhile, for subprocesses)."""
    given = os.environ.get("KUBECONFIG")
    if given:
        yield Path(given)
        return
    with (
        tempfile.TemporaryDirectory(prefix="wcow-control-plane-") as workdir,
        running(Path(workdir)) as plane,
    ):
        os.environ["KUBECONFIG"] = str(plane.kubeconfig)
        try:
            yield plane.kubeconfig
        finally:
            del os.environ["KUBECONFIG"]


# --- command line (make cluster-up / cluster-down) ----------------------------------------


def _pids(run_dir: Path) -> dict[str, int]:
    try:
        lines = (run_dir / "pids").read_text().splitlines()
    except FileNotFoundError:
        return {}
    return {name: int(pid) for name, pid in (line.split() for line in lines if line.strip())}


def up(run_dir: Path) -> int:
    if _pids(run_dir):
        print(f"already running; KUBECONFIG={run_dir / 'kubeconfig'}")
        return 0
    shutil.rmtree(run_dir, ignore_errors=True)
    plane = ControlPlane(run_dir)
    started = time.monotonic()
    plane.start()
    # Leave the processes running; `down` stops them through the pid file.
    print(f"control plane up in {time.monotonic() - started:.1f} s at {plane.server}")
    print(f"export KUBECONFIG={plane.kubeconfig}")
    return 0


def down(run_dir: Path) -> int:
    pids = _pids(run_dir)
    for name in reversed(list(pids)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pids[name], signal.SIGTERM)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.kill(pids[name], 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pids[name], signal.SIGKILL)
    shutil.rmtree(run_dir, ignore_errors=True)
    print("control plane stopped" if pids else "control plane was not running")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.control_plane", description=__doc__)
    parser.add_argument("command", choices=["up", "down"])
    parser.add_argument("--dir", type=Path, default=RUN, help="working directory")
    args = parser.parse_args(argv)
    try:
        return up(args.dir) if args.command == "up" else down(args.dir)
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
