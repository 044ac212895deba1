"""CRI through ``crictl`` (JSON in, JSON out), as present on Windows Kubernetes nodes.

Request files are PodSandboxConfig / ContainerConfig documents with the CRI API's
snake_case field names (crictl decodes them with the Go struct tags); answers are crictl's
``-o json`` output (protojson, camelCase, ``createdAt`` as RFC 3339). ``runp`` and
``create`` print the new id on a line of their own.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wcow_agent.host.interfaces import (
    CancelledError,
    CommandTimeoutError,
    CriError,
    CriStatus,
    HostError,
    SandboxStatus,
)
from wcow_agent.host.process import Runner

WINDOWS_ENDPOINT = "npipe:////./pipe/containerd-containerd"
# crictl needs a moment beyond its own RPC timeout to start and print.
_GRACE_SECONDS = 10.0


class CrictlCri:
    def __init__(
        self,
        runner: Runner,
        crictl: str = "crictl",
        endpoint: str = WINDOWS_ENDPOINT,
        work_dir: Path | None = None,
        steady_runner: Runner | None = None,
    ) -> None:
        """``runner`` may abandon a command when the agent stops (canary steps);
        ``steady_runner`` is for what must finish anyway: status, list, stop, remove."""
        self.runner = runner
        self.steady_runner = steady_runner or runner
        self.crictl = crictl
        self.endpoint = endpoint
        self.work_dir = work_dir

    def _run(self, args: Sequence[str], timeout: float, steady: bool = False) -> str:
        seconds = max(1, math.ceil(timeout))
        command = [
            self.crictl,
            "--runtime-endpoint",
            self.endpoint,
            "--image-endpoint",
            self.endpoint,
            "--timeout",
            f"{seconds}s",
            *args,
        ]
        try:
            runner = self.steady_runner if steady else self.runner
            result = runner(command, timeout=seconds + _GRACE_SECONDS)
        except (CommandTimeoutError, CancelledError):
            raise
        except HostError as error:
            raise CriError(str(error)) from None
        if result.returncode != 0:
            detail = " ".join(result.stderr.split()) or " ".join(result.stdout.split())
            raise CriError(f"crictl {args[0]} failed: {detail or f'exit {result.returncode}'}")
        return result.stdout

    def _json(self, args: Sequence[str], timeout: float, steady: bool = False) -> Any:
        output = self._run(args, timeout, steady)
        try:
            return json.loads(output)
        except json.JSONDecodeError:
            raise CriError(f"crictl {args[0]} printed no JSON: {output[:200]!r}") from None

    def _with_files(self, documents: Sequence[Mapping[str, Any]]) -> tuple[list[str], Any]:
        folder = tempfile.TemporaryDirectory(prefix="wcow-crictl-", dir=self.work_dir)
        paths = []
        for index, document in enumerate(documents):
            path = Path(folder.name) / f"{index}.json"
            path.write_text(json.dumps(document, indent=2, sort_keys=True), encoding="utf-8")
            paths.append(str(path))
        return paths, folder

    def status(self, timeout: float) -> CriStatus:
        info = self._json(["info", "-o", "json"], timeout, steady=True)
        return parse_info(info)

    def run_pod_sandbox(self, config: Mapping[str, Any], handler: str, timeout: float) -> str:
        (path,), folder = self._with_files([config])
        with folder:
            output = self._run(["runp", "--runtime", handler, path], timeout)
        return _last_line(output, "runp")

    def pod_sandbox_status(self, sandbox_id: str, timeout: float) -> SandboxStatus:
        document = self._json(["inspectp", "-o", "json", sandbox_id], timeout)
        if isinstance(document, list):  # several ids: crictl prints a list
            document = document[0]
        return parse_sandbox(document.get("status", {}))

    def list_pod_sandboxes(self, labels: Mapping[str, str], timeout: float) -> list[SandboxStatus]:
        args = ["pods", "-o", "json"]
        for key, value in sorted(labels.items()):
            args += ["--label", f"{key}={value}"]
        document = self._json(args, timeout, steady=True)
        return [parse_sandbox(item) for item in document.get("items") or []]

    def stop_pod_sandbox(self, sandbox_id: str, timeout: float) -> None:
        self._run(["stopp", sandbox_id], timeout, steady=True)

    def remove_pod_sandbox(self, sandbox_id: str, timeout: float) -> None:
        self._run(["rmp", "--force", sandbox_id], timeout, steady=True)

    def pull_image(self, image: str, timeout: float) -> None:
        self._run(["pull", image], timeout)

    def image_os_version(self, image: str, timeout: float) -> str | None:
        try:
            document = self._json(["inspecti", "-o", "json", image], timeout)
        except CriError as error:
            if "no such image" in str(error):  # cri-tools inspecti: image status without image
                return None
            raise
        return parse_image_os_version(document, image)

    def create_container(
        self,
        sandbox_id: str,
        container: Mapping[str, Any],
        sandbox: Mapping[str, Any],
        timeout: float,
    ) -> str:
        (container_path, sandbox_path), folder = self._with_files([container, sandbox])
        with folder:
            output = self._run(["create", sandbox_id, container_path, sandbox_path], timeout)
        return _last_line(output, "create")

    def start_container(self, container_id: str, timeout: float) -> None:
        self._run(["start", container_id], timeout)

    def exec_sync(self, container_id: str, command: Sequence[str], timeout: float) -> str:
        seconds = str(max(1, math.ceil(timeout)))
        return self._run(["exec", "--sync", "--timeout", seconds, container_id, *command], timeout)

    def stop_container(self, container_id: str, timeout: float) -> None:
        self._run(["stop", container_id], timeout, steady=True)

    def remove_container(self, container_id: str, timeout: float) -> None:
        self._run(["rm", "--force", container_id], timeout, steady=True)


def parse_image_os_version(document: Any, image: str) -> str:
    """``os.version`` from ``crictl inspecti -o json``: containerd's verbose image status
    carries the image config as ``info.imageSpec`` (1.7 ``pkg/cri/server/image_status.go``,
    2.x ``internal/cri/server/images/image_status.go`` ``verboseImageInfo``; the OCI config's
    platform fields inline, so ``os.version`` sits beside ``os``)."""
    if isinstance(document, list):  # several images: crictl prints a list
        document = document[0] if document else {}
    info = document.get("info") if isinstance(document, dict) else None
    spec = info.get("imageSpec") if isinstance(info, dict) else None
    if not isinstance(spec, dict):
        raise CriError(f"crictl inspecti {image}: no image config in the verbose status")
    version = spec.get("os.version") or ""
    if not isinstance(version, str) or len(version) > 64:
        raise CriError(f"crictl inspecti {image}: os.version is not a version: {version!r:.80}")
    return version


def _last_line(output: str, command: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        raise CriError(f"crictl {command} printed no id")
    return lines[-1]


def parse_info(info: Mapping[str, Any]) -> CriStatus:
    conditions = {str(c.get("type")): c for c in (info.get("status") or {}).get("conditions") or []}
    runtime = conditions.get("RuntimeReady", {})
    network = conditions.get("NetworkReady", {})
    messages = [
        f"{name}: {c.get('reason') or ''} {c.get('message') or ''}".strip()
        for name, c in sorted(conditions.items())
        if not c.get("status")
    ]
    handlers = info.get("runtimeHandlers")
    names = (
        tuple(str(h.get("name")) for h in handlers if h.get("name"))
        if isinstance(handlers, list)
        else None
    )
    return CriStatus(
        runtime_ready=runtime.get("status") is True,
        network_ready=network.get("status") is True,
        message="; ".join(messages),
        handlers=names or None,
    )


def parse_sandbox(status: Mapping[str, Any]) -> SandboxStatus:
    return SandboxStatus(
        id=str(status.get("id", "")),
        state=str(status.get("state", "")),
        runtime_handler=status.get("runtimeHandler") or None,
        labels=dict(status.get("labels") or {}),
    )
