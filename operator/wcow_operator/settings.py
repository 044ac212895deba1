"""Operator settings from flags, then environment, then defaults."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wcow_contract.v1alpha1 import Drain
from wcow_operator.registry.policy import check_pattern

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(
    r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
DRAINS: tuple[Drain, ...] = ("None", "Cordon", "Evict")
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class SettingsError(ValueError):
    pass


@dataclass(frozen=True)
class ImageSettings:
    """The webhook's image checks: off unless --resolve-images."""

    resolve: bool = False
    insecure_registries: tuple[str, ...] = ()
    registry_secret: str = ""  # a kubernetes.io/dockerconfigjson Secret in the namespace
    unreachable_registry: str = "Admit"
    lookup_timeout_seconds: float = 1.0
    allowed_registries: tuple[str, ...] = ()  # host[:port] globs (empty: public addresses)
    registry_ca_file: str = ""  # CA bundle for registries (empty: the system's)


@dataclass(frozen=True)
class OperatorSettings:
    namespace: str
    metrics_port: int = 9090
    health_port: int = 8080
    resync_seconds: float = 300.0
    debounce_seconds: float = 0.5
    leader_election: bool = True
    require_node_gating: bool = False
    log_format: str = "json"
    log_level: str = "INFO"
    workers: int = 8
    max_unavailable: int | str = "10%"
    rollout_timeout_seconds: float = 900.0
    drain: Drain = "None"
    allow_evict: bool = False
    webhook_port: int = 0  # 0: no admission webhook
    webhook_service: str = ""
    webhook_url: str = ""
    webhook_cert_dir: str = ""
    webhook_ca_injection_from: str = ""
    webhook_owner_clusterrole: str = ""
    shutdown_delay_seconds: float = 5.0
    images: ImageSettings = ImageSettings()


def _flag(env: Mapping[str, str], name: str) -> bool | None:
    value = env.get(name)
    if value is None or value == "":
        return None
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"environment variable {name}={value!r} is not a boolean")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wcow-operator",
        description="Reconcile WindowsRuntimeProfiles into RuntimeClasses and the node plan.",
    )
    parser.add_argument(
        "--namespace",
        help="namespace of the plan ConfigMap and the Lease "
        "(env WCOW_NAMESPACE, else POD_NAMESPACE, else the pod's own)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="Prometheus /metrics port (env WCOW_METRICS_PORT, default 9090)",
    )
    parser.add_argument(
        "--health-port",
        type=int,
        help="/healthz and /readyz port (env WCOW_HEALTH_PORT, default 8080)",
    )
    parser.add_argument(
        "--resync-seconds",
        type=float,
        help="full reconcile at least this often (env WCOW_RESYNC_SECONDS, default 300)",
    )
    parser.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="hold a Lease so one replica reconciles (env WCOW_LEADER_ELECTION, default on)",
    )
    parser.add_argument(
        "--require-node-gating",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="refuse profiles with requireReadyLabel: false "
        "(env WCOW_REQUIRE_NODE_GATING, default off)",
    )
    parser.add_argument(
        "--max-unavailable",
        help="Windows nodes that may apply a plan change at once: a count or a percentage "
        "of the nodes with an agent, rounded up (env WCOW_MAX_UNAVAILABLE, default 10%%); "
        "a profile's spec.rollout.maxUnavailable can lower it",
    )
    parser.add_argument(
        "--rollout-timeout-seconds",
        type=float,
        help="a node with permission and no result for this long fails the rollout "
        "(env WCOW_ROLLOUT_TIMEOUT_SECONDS, default 900)",
    )
    parser.add_argument(
        "--drain",
        choices=DRAINS,
        help="what happens to a node's pods before its containerd restarts for a change, for "
        "profiles whose spec.rollout.drain says nothing: None, Cordon or Evict "
        "(env WCOW_DRAIN, default None; docs/rollout.md 'Drain before a restart')",
    )
    parser.add_argument(
        "--allow-evict",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="drain Evict may be used: the operator lists the pods on a draining node and "
        "evicts them (its ClusterRole then reads every pod); without it a profile with "
        "spec.rollout.drain Evict is not valid (env WCOW_ALLOW_EVICT, default off; on with "
        "--drain Evict)",
    )
    parser.add_argument(
        "--webhook-port",
        type=int,
        help="serve the pod admission webhook on this port (env WCOW_WEBHOOK_PORT; "
        "default 0: no webhook)",
    )
    parser.add_argument(
        "--webhook-service",
        help="the Service in the operator's namespace the API server calls the webhook "
        "through (env WCOW_WEBHOOK_SERVICE)",
    )
    parser.add_argument(
        "--webhook-url",
        help="call the webhook at this https URL instead of a Service, e.g. "
        "https://127.0.0.1:9443 for an API server on the same host (env WCOW_WEBHOOK_URL)",
    )
    parser.add_argument(
        "--webhook-cert-dir",
        help="serve with tls.crt/tls.key from this folder (cert-manager's Secret); default: "
        "a CA and certificate made at start (env WCOW_WEBHOOK_CERT_DIR)",
    )
    parser.add_argument(
        "--webhook-ca-injection-from",
        help="the cert-manager Certificate (NAME in the operator's namespace, or NAMESPACE/NAME) "
        "whose CA cert-manager's cainjector writes into the webhook configurations "
        "(env WCOW_WEBHOOK_CA_INJECTION_FROM)",
    )
    parser.add_argument(
        "--webhook-owner-clusterrole",
        help="make this ClusterRole (the one granting the webhook permissions) the owner of "
        "the webhook configurations, so the garbage collector deletes them with it on "
        "uninstall; while it is missing nothing is written "
        "(env WCOW_WEBHOOK_OWNER_CLUSTERROLE)",
    )
    parser.add_argument(
        "--shutdown-delay-seconds",
        type=float,
        help="with the webhook: on SIGTERM, report not ready and keep answering admissions this "
        "long before stopping, each answer closing its connection, so the Service drops this "
        "replica first; the API server does not retry a failed webhook call "
        "(env WCOW_SHUTDOWN_DELAY_SECONDS, 0 to 120, default 5; chart "
        "`operator.shutdownDelaySeconds`)",
    )
    _image_flags(parser)
    parser.add_argument(
        "--log-format", choices=("json", "text"), help="env WCOW_LOG_FORMAT, default json"
    )
    parser.add_argument(
        "--log-level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="env WCOW_LOG_LEVEL, default INFO",
    )
    return parser


def parse_settings(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> OperatorSettings:
    env = os.environ if env is None else env
    args = _parser().parse_args(argv)
    namespace = _namespace(args, env)
    defaults = OperatorSettings(namespace=namespace)
    try:
        metrics_port = args.metrics_port or int(
            env.get("WCOW_METRICS_PORT") or defaults.metrics_port
        )
        health_port = args.health_port or int(env.get("WCOW_HEALTH_PORT") or defaults.health_port)
        resync = args.resync_seconds or float(
            env.get("WCOW_RESYNC_SECONDS") or defaults.resync_seconds
        )
    except ValueError as error:
        raise SettingsError(f"invalid number in the environment: {error}") from None
    max_unavailable = _max_unavailable(
        args.max_unavailable or env.get("WCOW_MAX_UNAVAILABLE") or str(defaults.max_unavailable)
    )
    try:
        rollout_timeout = args.rollout_timeout_seconds or float(
            env.get("WCOW_ROLLOUT_TIMEOUT_SECONDS") or defaults.rollout_timeout_seconds
        )
    except ValueError as error:
        raise SettingsError(f"invalid number in the environment: {error}") from None
    if rollout_timeout < 30:
        raise SettingsError(
            f"--rollout-timeout-seconds must be at least 30 (a restart and a canary), "
            f"not {rollout_timeout}"
        )
    if resync < 5:
        raise SettingsError(f"--resync-seconds must be at least 5, not {resync}")
    leader = args.leader_election
    if leader is None:
        leader = _flag(env, "WCOW_LEADER_ELECTION")
    gating = args.require_node_gating
    if gating is None:
        gating = _flag(env, "WCOW_REQUIRE_NODE_GATING")
    wanted = args.drain or env.get("WCOW_DRAIN") or defaults.drain
    drain = next((d for d in DRAINS if d == wanted), None)
    if drain is None:
        raise SettingsError(f"WCOW_DRAIN must be one of {', '.join(DRAINS)}, not {wanted!r}")
    webhook = _webhook_settings(args, env, namespace)
    return OperatorSettings(
        **webhook,
        namespace=namespace,
        metrics_port=metrics_port,
        health_port=health_port,
        resync_seconds=resync,
        leader_election=defaults.leader_election if leader is None else leader,
        require_node_gating=defaults.require_node_gating if gating is None else gating,
        log_format=args.log_format or env.get("WCOW_LOG_FORMAT") or defaults.log_format,
        log_level=args.log_level or env.get("WCOW_LOG_LEVEL") or defaults.log_level,
        max_unavailable=max_unavailable,
        rollout_timeout_seconds=rollout_timeout,
        drain=drain,
        allow_evict=_allow_evict(args, env, drain),
        images=image_settings(args, env),
    )


def _allow_evict(args: argparse.Namespace, env: Mapping[str, str], drain: Drain) -> bool:
    evict = args.allow_evict
    if evict is None:
        evict = _flag(env, "WCOW_ALLOW_EVICT")
    if evict is False and drain == "Evict":
        raise SettingsError("--drain Evict needs eviction allowed: drop --no-allow-evict")
    return bool(evict) or drain == "Evict"


def _namespace(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    namespace = args.namespace or env.get("WCOW_NAMESPACE") or env.get("POD_NAMESPACE")
    if not namespace and SERVICE_ACCOUNT_NAMESPACE.exists():
        namespace = SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip()
    if not namespace:
        raise SettingsError(
            "no namespace for the plan ConfigMap: pass --namespace or set WCOW_NAMESPACE"
        )
    return str(namespace)


def _max_unavailable(value: str) -> int | str:
    """A count of at least 1, or a percentage from 1% to 100%."""
    text = value.strip()
    if text.endswith("%") and text[:-1].isdigit() and 1 <= int(text[:-1]) <= 100:
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise SettingsError(
        f"--max-unavailable must be a count (at least 1) or a percentage from 1% to 100%, "
        f"not {value!r}"
    )


def _webhook_settings(
    args: argparse.Namespace, env: Mapping[str, str], namespace: str
) -> dict[str, Any]:
    try:
        port = args.webhook_port or int(env.get("WCOW_WEBHOOK_PORT") or 0)
    except ValueError as error:
        raise SettingsError(f"invalid WCOW_WEBHOOK_PORT: {error}") from None
    found: dict[str, Any] = {"webhook_port": port}
    try:
        delay = (
            args.shutdown_delay_seconds
            if args.shutdown_delay_seconds is not None
            else float(env.get("WCOW_SHUTDOWN_DELAY_SECONDS") or 5.0)
        )
    except ValueError as error:
        raise SettingsError(f"invalid WCOW_SHUTDOWN_DELAY_SECONDS: {error}") from None
    if not 0 <= delay <= 120:
        raise SettingsError(f"--shutdown-delay-seconds must be 0 to 120, not {delay}")
    found["shutdown_delay_seconds"] = delay
    for name in ("service", "url", "cert_dir", "ca_injection_from", "owner_clusterrole"):
        found[f"webhook_{name}"] = (
            getattr(args, f"webhook_{name}") or env.get(f"WCOW_WEBHOOK_{name.upper()}") or ""
        )
    if not 0 <= port <= 65535:
        raise SettingsError(f"--webhook-port must be 0 (off) to 65535, not {port}")
    if port and bool(found["webhook_service"]) == bool(found["webhook_url"]):
        raise SettingsError(
            "the admission webhook needs exactly one of --webhook-service (in a cluster) "
            "or --webhook-url (an API server on this host)"
        )
    if found["webhook_url"] and not str(found["webhook_url"]).startswith("https://"):
        raise SettingsError(f"--webhook-url must be an https:// URL, not {found['webhook_url']!r}")
    injection = str(found["webhook_ca_injection_from"])
    if injection:
        parts = injection.split("/")
        if len(parts) > 2 or not all(DNS_LABEL.fullmatch(part) for part in parts):
            raise SettingsError(
                "--webhook-ca-injection-from must be a Certificate NAME or NAMESPACE/NAME, "
                f"not {injection!r}"
            )
        if not found["webhook_cert_dir"]:
            raise SettingsError(
                "--webhook-ca-injection-from needs --webhook-cert-dir (the Certificate's "
                "Secret, mounted): the webhook must serve the certificate whose CA is injected"
            )
        if len(parts) == 1:
            found["webhook_ca_injection_from"] = f"{namespace}/{injection}"
    owner = str(found["webhook_owner_clusterrole"])
    if owner and not DNS_SUBDOMAIN.fullmatch(owner):
        raise SettingsError(f"--webhook-owner-clusterrole is not a valid name: {owner!r}")
    return found


HOST_PORT = re.compile(r"[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](:[0-9]{1,5})?")


def _image_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--resolve-images",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the webhook reads each wcow pod's images from their registries: refuses images "
        "of a build the class cannot run (ImageBuildMismatch) and pins Hyper-V pods' images "
        "to their guest build's manifest (env WCOW_RESOLVE_IMAGES, default off)",
    )
    parser.add_argument(
        "--insecure-registry",
        action="append",
        metavar="HOST:PORT",
        help="read this registry over plain HTTP instead of HTTPS (repeatable; env "
        "WCOW_INSECURE_REGISTRIES, comma-separated)",
    )
    parser.add_argument(
        "--registry-secret",
        metavar="NAME",
        help="a kubernetes.io/dockerconfigjson Secret in the operator's namespace with "
        "registry credentials (env WCOW_REGISTRY_SECRET; default: anonymous)",
    )
    parser.add_argument(
        "--unreachable-registry",
        choices=("Admit", "Refuse"),
        help="a pod whose image cannot be read: admitted with a warning, or refused "
        "(ImageUnresolved); a profile's spec.images.unreachableRegistry Refuse also refuses "
        "(env WCOW_UNREACHABLE_REGISTRY, default Admit)",
    )
    parser.add_argument(
        "--allowed-registries",
        action="append",
        metavar="PATTERN",
        help="a registry the image checks may read, as a host[:port] glob (*.example.com, "
        "registry.corp:5000, registry.corp:*); repeatable; with none given, any registry at a "
        "public address; a registry at a private, loopback or link-local address only when "
        "listed here or as insecure (env WCOW_ALLOWED_REGISTRIES, comma-separated)",
    )
    parser.add_argument(
        "--registry-ca-file",
        metavar="FILE",
        help="PEM bundle of the certificate authorities that sign registries' certificates "
        "(a private CA, e.g. an on-premises Harbor), instead of the system's (env "
        "WCOW_REGISTRY_CA_FILE)",
    )
    parser.add_argument(
        "--image-lookup-timeout-seconds",
        type=float,
        help="all of one pod's image lookups together, 0.1 to 1.5 (inside the webhook's 2 s "
        "decision deadline; env WCOW_IMAGE_LOOKUP_TIMEOUT_SECONDS, default 1)",
    )


def image_settings(args: argparse.Namespace, env: Mapping[str, str]) -> ImageSettings:
    resolve = args.resolve_images
    if resolve is None:
        resolve = _flag(env, "WCOW_RESOLVE_IMAGES") or False
    insecure = args.insecure_registry or [
        h.strip() for h in env.get("WCOW_INSECURE_REGISTRIES", "").split(",") if h.strip()
    ]
    for host in insecure:
        if not HOST_PORT.fullmatch(host):
            raise SettingsError(f"--insecure-registry must be HOST or HOST:PORT, not {host!r}")
    secret = args.registry_secret or env.get("WCOW_REGISTRY_SECRET") or ""
    if secret and not DNS_SUBDOMAIN.fullmatch(secret):
        raise SettingsError(f"--registry-secret is not a valid Secret name: {secret!r}")
    unreachable = args.unreachable_registry or env.get("WCOW_UNREACHABLE_REGISTRY") or "Admit"
    if unreachable not in ("Admit", "Refuse"):
        raise SettingsError(f"--unreachable-registry must be Admit or Refuse, not {unreachable!r}")
    try:
        timeout = args.image_lookup_timeout_seconds or float(
            env.get("WCOW_IMAGE_LOOKUP_TIMEOUT_SECONDS") or 1.0
        )
    except ValueError as error:
        raise SettingsError(f"invalid WCOW_IMAGE_LOOKUP_TIMEOUT_SECONDS: {error}") from None
    if not 0.1 <= timeout <= 1.5:
        raise SettingsError(
            f"--image-lookup-timeout-seconds must be 0.1 to 1.5 (the webhook decides each pod "
            f"within 2 s), not {timeout}"
        )
    allowed = args.allowed_registries or [
        h.strip() for h in env.get("WCOW_ALLOWED_REGISTRIES", "").split(",") if h.strip()
    ]
    try:
        patterns = tuple(check_pattern(pattern) for pattern in allowed)
    except ValueError as error:
        raise SettingsError(f"--allowed-registries: {error}") from None
    ca_file = args.registry_ca_file or env.get("WCOW_REGISTRY_CA_FILE") or ""
    if ca_file and not Path(ca_file).is_file():
        raise SettingsError(f"--registry-ca-file {ca_file!r} is not a readable file")
    return ImageSettings(resolve, tuple(insecure), secret, unreachable, timeout, patterns, ca_file)


PIPE = "\\|"  # a | inside a Markdown table cell


def markdown_settings() -> str:
    """The settings table of docs/reference/settings.md, generated from the flag definitions
    above (a test fails when the page drifts from it): one row per flag, its help text as
    ``--help`` prints it."""
    rows = ["| flag | what it does (environment variable, default) |", "| --- | --- |"]
    for action in _parser()._actions:  # argparse has no public list of its actions
        if not action.option_strings or action.dest == "help":
            continue
        name = action.option_strings[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            name = f"--[no-]{name.removeprefix('--')}"
        elif action.choices:
            name = f"{name} {PIPE.join(str(choice) for choice in action.choices)}"
        elif action.metavar:
            name = f"{name} {action.metavar}"
        text = str(action.help or "").replace("%%", "%").replace("|", PIPE)
        rows.append(f"| `{name}` | {text} |")
    return "\n".join(rows) + "\n"
