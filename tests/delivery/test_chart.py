"""The Helm chart, rendered and linted by real Helm, for the defaults and a matrix of
non-default values: what a user installs, and that the API server would accept it."""

from __future__ import annotations

import re
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml
from deploy.generate import CHART, NAMESPACE, RELEASE

from tests.delivery.helpers import (
    LATEST_KUBE,
    MIN_KUBE,
    MIN_KUBE_POLICY,
    Obj,
    find,
    kinds,
    lint,
    notes,
    render,
    render_by_template,
    validate_object,
)
from wcow_contract.labels import (
    CONTAINERD_LINE_LABEL,
    GUEST_BUILD_LABEL_PREFIX,
    HYPERV_LABEL,
    NODE_LABEL_PREFIX,
    READY_LABEL_PREFIX,
)
from wcow_contract.v1alpha1 import KIND
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION

OPERATOR = f"{RELEASE}-operator"
AGENT = f"{RELEASE}-agent"

# Each case changes what a real installation would: the objects must still lint, render and
# validate, and the case's own check says what the user gets.
MATRIX: dict[str, dict[str, Any]] = {
    "viewer-bound": {
        "viewer": {"subjects": [{"kind": "User", "name": "alice@example.com"}]},
    },
    "ha-operator": {
        "operator": {
            "replicas": 3,
            "leaderElection": True,
            "resources": {
                "requests": {"cpu": "200m", "memory": "256Mi"},
                "limits": {"memory": "1Gi"},
            },
            "nodeSelector": {"example.com/pool": "system"},
            "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "topologyKey": "kubernetes.io/hostname",
                                "labelSelector": {
                                    "matchLabels": {"app.kubernetes.io/component": "operator"}
                                },
                            },
                        }
                    ]
                }
            },
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "operator"}},
                }
            ],
            "priorityClassName": "system-cluster-critical",
            "podAnnotations": {"example.com/team": "platform"},
            "podLabels": {"example.com/tier": "control"},
            "env": [{"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"}],
            "serviceAccount": {"annotations": {"example.com/role": "wcow"}},
        }
    },
    "single-operator-text-logs": {
        "operator": {
            "replicas": 1,
            "leaderElection": False,
            "logFormat": "text",
            "resyncSeconds": 60,
        }
    },
    "crd-installed-separately-with-profiles": {
        "crds": {"enabled": False},
        "profiles": {
            "create": True,
            "hyperv": {
                "builds": ["ltsc2019", "ltsc2022", "ltsc2025", "10.0.26100"],
                "vm": {"processorCount": 4, "memoryMB": 4096, "oversizedPods": "Warn"},
                "overheadPolicy": "WholeVM",
            },
        },
    },
    "crd-not-kept": {"crds": {"keep": False}},
    "operator-only": {"agent": {"enabled": False}},
    "no-admission-policy": {"admissionPolicy": {"enabled": False}},
    "admission-policy-audit": {"admissionPolicy": {"validationActions": ["Warn", "Audit"]}},
    "monitoring": {
        "metrics": {
            "serviceMonitor": {
                "enabled": True,
                "interval": "15s",
                "scrapeTimeout": "5s",
                "labels": {"release": "kube-prometheus-stack"},
            },
            "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
            "dashboard": {"enabled": True, "annotations": {"grafana_folder": "Windows"}},
        }
    },
    "images-by-digest": {
        "imagePullSecrets": [{"name": "registry"}],
        "operator": {
            "image": {
                "repository": "registry.example.com/wcow-operator",
                "digest": "sha256:" + "a" * 64,
                "pullPolicy": "Always",
            }
        },
        "agent": {"image": {"repository": "registry.example.com/wcow-agent", "tag": "0.1.0-rc1"}},
    },
    "agent-tuning": {
        "agent": {
            "updateStrategy": {"maxUnavailable": "10%"},
            "minReadySeconds": 120,
            "containerdConfig": "D:\\containerd\\config.toml",
            "metricsPort": 19551,
            "healthPort": 19552,
            "resyncSeconds": 120,
            "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists"}],
            "nodeSelector": {"node.kubernetes.io/windows-build": "10.0.20348"},
            "env": [{"name": "WCOW_LOG_LEVEL", "value": "DEBUG"}],
            "extraArgs": ["--crictl=C:\\k\\crictl.exe", "--log-level=DEBUG"],
            "pauseImage": "registry.example.com/pause:3.9-ltsc2019",
            "canaryImages": {
                "10.0.17763": "mcr.microsoft.com/windows/nanoserver:1809",
                "10.0.20348": "mcr.microsoft.com/windows/nanoserver:ltsc2022",
            },
        }
    },
    "openshift": {"openshift": {"enabled": True}},
    "rke2-layout": {
        "agent": {
            "distribution": "rke2",
            "containerdConfig": "D:\\rke2\\agent\\etc\\containerd\\config.toml",
            "dropInConfig": "D:\\rke2\\agent\\etc\\containerd\\config-v3.toml.d",
            "configTemplate": "D:\\rke2\\agent\\etc\\containerd\\config-v3.toml.tmpl",
            "restartMode": "none",
            "serviceName": "rke2",
            "containerd": "D:\\rke2\\bin\\containerd.exe",
            "crictl": "D:\\rke2\\bin\\crictl.exe",
        }
    },
    "names-and-labels": {
        "fullnameOverride": "wcow",
        "commonLabels": {"example.com/owner": "platform"},
    },
    "no-webhook": {"webhook": {"enabled": False}},
    "webhook-cert-manager": {"webhook": {"port": 10250, "certManager": {"enabled": True}}},
    "webhook-cert-manager-own-issuer": {
        "webhook": {
            "certManager": {
                "enabled": True,
                "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"},
                "duration": "720h",
                "renewBefore": "240h",
            }
        }
    },
}


def _all_cases() -> list[tuple[str, dict[str, Any]]]:
    return [("defaults", {}), *MATRIX.items()]


@pytest.mark.parametrize(("case", "values"), _all_cases(), ids=[c for c, _ in _all_cases()])
def test_chart_lints_strictly(case: str, values: dict[str, Any]) -> None:
    assert lint(values) == [], case


@pytest.mark.parametrize(("case", "values"), _all_cases(), ids=[c for c, _ in _all_cases()])
def test_every_rendered_object_validates(case: str, values: dict[str, Any]) -> None:
    objects = render(values)
    assert objects, case
    policy_kinds = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for obj in objects:
        validate_object(obj, LATEST_KUBE)
        validate_object(obj, MIN_KUBE_POLICY if obj["kind"] in policy_kinds else MIN_KUBE)


def test_defaults_install_the_operator_the_agent_and_their_guard() -> None:
    assert kinds(render()) == sorted(
        [
            "ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding",
            "CustomResourceDefinition", "DaemonSet", "Deployment", "Role", "Role",
            "RoleBinding", "RoleBinding", "Service", "Service", "ServiceAccount",
            "ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
            # the pod admission webhook: its Service, the ClusterRole owning its configurations,
            # the policy that holds the operator's writes to them
            "ClusterRole", "ClusterRoleBinding", "Service",
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
            # two operator replicas by default: a PodDisruptionBudget keeps one
            "PodDisruptionBudget",
            # the policies that hold the operator to its own RuntimeClasses and to its
            # finalizer on profiles, the plan to the operator, and both programs' events to
            # default and their own objects, and the operator's Node patches to a cordon
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
            # kubectl wcow's read-only roles (bound only to viewer.subjects)
            "ClusterRole", "Role",
            # the uninstall hook (pre-delete): its Job and the right to delete profiles
            "ClusterRole", "ClusterRoleBinding", "Job",
        ]
    )  # fmt: skip


GUARDS = {
    f"{AGENT}-node-self-patch",
    f"{OPERATOR}-webhook-guard",
    f"{OPERATOR}-runtimeclass-guard",
    f"{OPERATOR}-profile-guard",
    f"{RELEASE}-plan-writers",
    f"{OPERATOR}-node-cordon",
    f"{RELEASE}-events",
}


@pytest.mark.parametrize(
    ("case", "without"),
    [
        ("defaults", set()),
        ("operator-only", {f"{AGENT}-node-self-patch"}),
        ("no-webhook", {f"{OPERATOR}-webhook-guard"}),
        ("no-admission-policy", GUARDS),
    ],
)
def test_each_part_brings_its_guards(case: str, without: set[str]) -> None:
    """Each policy with its binding, and the operator's (profiles, RuntimeClasses, plan,
    events) whenever the policies are on."""
    objects = render(MATRIX.get(case, {}))
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        assert {o["metadata"]["name"] for o in objects if o["kind"] == kind} == GUARDS - without


def test_one_resource_per_template() -> None:
    values = {"crds": {"enabled": False}, "profiles": {"create": True}}
    values |= MATRIX["monitoring"] | MATRIX["webhook-cert-manager"] | {"operator": {"replicas": 2}}
    for template, objects in render_by_template(values).items():
        if template.endswith("/profiles.yaml"):
            assert {o["kind"] for o in objects} == {KIND}
        else:
            assert len(objects) == 1, f"{template} renders {len(objects)} objects"


def test_helper_names_follow_helm_create() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text(encoding="utf-8")
    for name in ("name", "fullname", "chart", "labels", "selectorLabels"):
        assert f'define "wcow-runtime.{name}"' in helpers


@pytest.mark.parametrize(("case", "values"), _all_cases(), ids=[c for c, _ in _all_cases()])
def test_recommended_labels_and_components(case: str, values: dict[str, Any]) -> None:
    for obj in render(values):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm", obj["kind"]
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/name"] == "wcow-runtime"
        assert labels["app.kubernetes.io/part-of"] == "wcow-runtime"
        assert labels["helm.sh/chart"] == "wcow-runtime-0.1.0"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        if obj["kind"] not in ("CustomResourceDefinition", KIND):
            components = ("operator", "node-agent", "viewer", "test", "monitoring", "uninstall")
            assert labels["app.kubernetes.io/component"] in components, obj
        for key, value in values.get("commonLabels", {}).items():
            assert labels[key] == value


def test_workload_selectors_pick_only_their_own_pods() -> None:
    objects = render()
    deployment, daemonset = find(objects, "Deployment"), find(objects, "DaemonSet")
    operator_selector = deployment["spec"]["selector"]["matchLabels"]
    agent_selector = daemonset["spec"]["selector"]["matchLabels"]
    operator_pod = deployment["spec"]["template"]["metadata"]["labels"]
    agent_pod = daemonset["spec"]["template"]["metadata"]["labels"]
    assert operator_selector.items() <= operator_pod.items()
    assert agent_selector.items() <= agent_pod.items()
    assert not operator_selector.items() <= agent_pod.items()
    assert not agent_selector.items() <= operator_pod.items()
    for service in (o for o in objects if o["kind"] == "Service"):
        selector = service["spec"]["selector"]
        assert (selector == operator_selector) != (selector == agent_selector)


def test_service_accounts_have_the_names_the_binaries_expect() -> None:
    objects = render(release="prod")
    names = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    assert names == {"prod-wcow-runtime-operator", "prod-wcow-runtime-agent"}
    assert find(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == (
        "prod-wcow-runtime-operator"
    )
    assert find(objects, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"] == (
        "prod-wcow-runtime-agent"
    )


def test_the_longest_release_name_still_gives_valid_names() -> None:
    release = "r" * 53  # Helm's limit for a release name
    for obj in render(release=release):
        name = obj["metadata"]["name"]
        if obj["kind"] in ("Service", "Deployment", "DaemonSet", "ServiceAccount"):
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name), name
        validate_object(obj, LATEST_KUBE)


def test_namespaced_objects_live_in_the_release_namespace() -> None:
    for obj in render(namespace="windows-runtime"):
        if obj["kind"] in (
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            KIND,
        ) or obj["kind"].startswith("ValidatingAdmissionPolicy"):
            assert "namespace" not in obj["metadata"], obj["kind"]
        else:
            assert obj["metadata"]["namespace"] == "windows-runtime", obj["kind"]


# ---- the operator Deployment ----


def _operator(values: dict[str, Any] | None = None) -> tuple[Obj, Obj]:
    deployment = find(render(values), "Deployment")
    return deployment, deployment["spec"]["template"]["spec"]["containers"][0]


def test_operator_runs_non_root_on_linux_with_a_read_only_root() -> None:
    deployment, container = _operator(MATRIX["ha-operator"])
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "example.com/pool": "system"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    # The only writable place is an emptyDir on /tmp.
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert pod["volumes"][0]["emptyDir"]
    assert container["resources"]["limits"]["memory"] == "1Gi"


def test_operator_os_selector_cannot_be_overridden() -> None:
    deployment, _ = _operator({"operator": {"nodeSelector": {"kubernetes.io/os": "windows"}}})
    assert deployment["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/os"] == "linux"


def test_operator_drain_before_stop_is_set_and_fits_the_grace_period() -> None:
    deployment, container = _operator({"operator": {"shutdownDelaySeconds": 15}})
    assert "--shutdown-delay-seconds=15" in container["args"]
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60
    with pytest.raises(helm_python.HelmRenderError, match=r"must exceed operator\.shutdownDelay"):
        render({"operator": {"shutdownDelaySeconds": 30, "terminationGracePeriodSeconds": 30}})
    with pytest.raises(helm_python.HelmValuesError, match="shutdownDelaySeconds"):
        render({"operator": {"shutdownDelaySeconds": 121}})


def test_operator_probes_and_ports_match_its_flags() -> None:
    _, container = _operator({"operator": {"metricsPort": 9091, "healthPort": 8081}})
    assert "--metrics-port=9091" in container["args"]
    assert "--health-port=8081" in container["args"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 9091, "health": 8081, "webhook": 9443}
    with pytest.raises(helm_python.HelmRenderError, match=r"webhook\.port must differ"):
        render({"operator": {"metricsPort": 9443}})
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    service = find(render({"operator": {"metricsPort": 9091}}), "Service", f"{OPERATOR}-metrics")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_operator_args_are_accepted_by_wcow_operator() -> None:
    """The chart's command line goes through the operator's own parser."""
    from wcow_operator.settings import parse_settings

    for values, leader in (
        (MATRIX["ha-operator"], True),
        (MATRIX["single-operator-text-logs"], False),
    ):
        _, container = _operator(values)
        env = {"POD_NAMESPACE": NAMESPACE, "POD_NAME": "wcow-runtime-operator-abc"}
        settings = parse_settings(container["args"], env)
        assert settings.namespace == NAMESPACE
        assert settings.leader_election is leader
        assert settings.metrics_port == 9090
        assert settings.health_port == 8080
    assert (
        parse_settings(_operator(MATRIX["single-operator-text-logs"])[1]["args"], env).log_format
        == "text"
    )
    env_names = [e["name"] for e in container["env"]]
    assert {"POD_NAMESPACE", "POD_NAME"} <= set(env_names)


def test_more_than_one_replica_needs_leader_election() -> None:
    with pytest.raises(helm_python.HelmRenderError, match=r"needs operator\.leaderElection=true"):
        render({"operator": {"replicas": 2, "leaderElection": False}})
    _, container = _operator({"operator": {"replicas": 2}})
    assert "--leader-election" in container["args"]


# ---- the agent DaemonSet ----


def _agent(values: dict[str, Any] | None = None) -> tuple[Obj, Obj]:
    daemonset = find(render(values), "DaemonSet")
    return daemonset, daemonset["spec"]["template"]["spec"]["containers"][0]


def _tolerates(tolerations: list[Obj], taint: Obj) -> bool:
    """Kubernetes' toleration matching (core/v1 Toleration.ToleratesTaint)."""
    for toleration in tolerations:
        if toleration.get("effect") not in (None, "", taint["effect"]):
            continue
        if toleration.get("operator", "Equal") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint["key"]:
                return True
        elif toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get(
            "value", ""
        ):
            return True
    return False


def test_agent_is_a_hostprocess_system_daemonset_on_windows_nodes_only() -> None:
    daemonset, container = _agent(MATRIX["agent-tuning"])
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "kubernetes.io/os": "windows",
        "kubernetes.io/arch": "amd64",  # the agent image carries amd64 Python
        "node.kubernetes.io/windows-build": "10.0.20348",
    }
    assert pod["hostNetwork"] is True
    assert pod["securityContext"]["windowsOptions"] == {
        "hostProcess": True,
        "runAsUserName": "NT AUTHORITY\\SYSTEM",
    }
    assert "securityContext" not in container  # HostProcess: all containers inherit the pod's
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["WCOW_PLAN_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert container["args"][0] == "run"
    assert "--config=D:\\containerd\\config.toml" in container["args"]


def test_agent_rolls_out_a_few_nodes_at_a_time() -> None:
    daemonset, _ = _agent()
    assert daemonset["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1},
    }
    assert daemonset["spec"]["minReadySeconds"] > 0
    tuned, _ = _agent(MATRIX["agent-tuning"])
    assert tuned["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "10%"


@pytest.mark.parametrize(
    "taint",
    [
        {"key": "os", "value": "windows", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/os", "value": "windows", "effect": "NoSchedule"},
        {"key": "kubernetes.io/os", "value": "windows", "effect": "NoSchedule"},
    ],
    ids=lambda t: f"{t['key']}={t['value']}:{t['effect']}",
)
def test_agent_tolerates_common_windows_taints(taint: Obj) -> None:
    daemonset, _ = _agent()
    assert _tolerates(daemonset["spec"]["template"]["spec"]["tolerations"], taint)


def test_agent_does_not_tolerate_arbitrary_taints_by_default() -> None:
    daemonset, _ = _agent()
    taint = {"key": "example.com/maintenance", "value": "true", "effect": "NoExecute"}
    assert not _tolerates(daemonset["spec"]["template"]["spec"]["tolerations"], taint)


def test_agent_probes_and_ports_match_its_flags() -> None:
    _, container = _agent(MATRIX["agent-tuning"])
    assert "--metrics-port=19551" in container["args"]
    assert "--health-port=19552" in container["args"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "metrics": 19551,
        "health": 19552,
    }
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}


def test_a_pause_image_rollout_waits_on_readiness_without_restarting_the_agent() -> None:
    """A pause image change is paced by the agent's readiness (docs/agent.md, "Pacing a pause
    image change"): the rolling update must wait on /readyz, and nothing may kill the agent
    while it is held there for minutes (pull, restart, canaries) or after a failure."""
    from wcow_agent.cycle.transaction import Timeouts

    daemonset, container = _agent(MATRIX["agent-tuning"])
    spec = daemonset["spec"]
    rolling = spec["updateStrategy"]["rollingUpdate"]
    # A surge pod would start beside the old one on the same host ports (host network) and
    # could never serve /readyz: the update must replace, not surge.
    assert rolling.get("maxSurge", 0) in (0, "0%")
    assert spec["minReadySeconds"] >= 0
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # Liveness asks the loop, not readiness: a held /readyz must never restart the pod, and
    # no startup probe may put a deadline on the first (possibly pause-changing) cycle.
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "startupProbe" not in container
    # An agent stopped by the rolling update may be mid-restart: it gets the time for a
    # restart and a rollback (the agent's --restart-timeout each).
    grace = spec["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= 2 * Timeouts().restart
    args = container["args"]
    assert "--pause-image=registry.example.com/pause:3.9-ltsc2019" in args


def test_agent_args_are_accepted_by_wcow_agent() -> None:
    from wcow_agent.cli import build_parser

    parser = build_parser()
    run = next(
        choice
        for action in parser._actions
        if hasattr(action, "choices") and isinstance(action.choices, dict)
        for name, choice in action.choices.items()
        if name == "run"
    )
    if not any("--metrics-port" in a.option_strings for a in run._actions):
        pytest.skip("`wcow-agent run` does not take its flags yet (node agent issue)")
    _, container = _agent(MATRIX["agent-tuning"])
    args = parser.parse_args(container["args"])
    assert args.command == "run"
    assert args.crictl == "C:\\k\\crictl.exe"  # agent.extraArgs reach the agent
    assert args.log_level == "DEBUG"
    assert args.pause_image == "registry.example.com/pause:3.9-ltsc2019"
    assert sorted(args.canary_image) == [  # agent.canaryImages reach the agent
        ("10.0.17763", "mcr.microsoft.com/windows/nanoserver:1809"),
        ("10.0.20348", "mcr.microsoft.com/windows/nanoserver:ltsc2022"),
    ]


def test_operator_only_install_has_no_agent_objects() -> None:
    objects = render(MATRIX["operator-only"])
    assert not [
        o
        for o in objects
        if o["metadata"]["labels"].get("app.kubernetes.io/component") == "node-agent"
    ]
    assert "DaemonSet" not in kinds(objects)


# ---- CRD, profiles, monitoring, images ----


def test_crd_is_kept_on_uninstall_unless_asked() -> None:
    crd = find(render(), "CustomResourceDefinition")
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    crd = find(render(MATRIX["crd-not-kept"]), "CustomResourceDefinition")
    assert "annotations" not in crd["metadata"]
    assert "CustomResourceDefinition" not in kinds(render({"crds": {"enabled": False}}))


def test_default_profiles_are_valid_and_survive_uninstall() -> None:
    profiles = [
        o for o in render(MATRIX["crd-installed-separately-with-profiles"]) if o["kind"] == KIND
    ]
    names = sorted(p["metadata"]["name"] for p in profiles)
    assert names == [
        "hyperv-10-0-26100",
        "hyperv-ltsc2019",
        "hyperv-ltsc2022",
        "hyperv-ltsc2025",
        "wcow-process",
    ]
    for profile in profiles:
        assert profile["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        validate_object(profile, LATEST_KUBE)  # the operator's model accepts it
        tolerations = profile["spec"]["scheduling"]["tolerations"]
        assert _tolerates(tolerations, {"key": "os", "value": "windows", "effect": "NoSchedule"})
    hyperv = next(p for p in profiles if p["metadata"]["name"] == "hyperv-ltsc2022")
    assert hyperv["spec"]["vm"] == {"processorCount": 4, "memoryMB": 4096, "oversizedPods": "Warn"}
    assert hyperv["spec"]["overhead"] == {"policy": "WholeVM"}


def test_profiles_wait_for_the_crd_when_the_release_installs_it() -> None:
    """Helm cannot create objects of a CRD it installs in the same step: on the first install
    the profiles are left out and NOTES.txt says to upgrade once more."""
    values = {"profiles": {"create": True}}
    assert KIND not in kinds(render(values))
    assert "default profiles were NOT created" in notes(values)
    assert "NOT created" not in notes()


def test_notes_tell_the_pod_security_label_and_the_uninstall_order() -> None:
    text = notes()
    assert (
        f"kubectl label namespace {NAMESPACE} pod-security.kubernetes.io/enforce=privileged" in text
    )
    assert "delete the profiles" in text


def test_service_monitors_scrape_the_metrics_services() -> None:
    objects = render(MATRIX["monitoring"])
    for component, name in (("operator", OPERATOR), ("node-agent", AGENT)):
        monitor = find(objects, "ServiceMonitor", name)
        service = find(objects, "Service", f"{name}-metrics")
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert (
            monitor["spec"]["selector"]["matchLabels"].items()
            <= service["metadata"]["labels"].items()
        )
        assert (
            monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == component
        )
        assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
        assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert "ServiceMonitor" not in kinds(render())


def test_images_default_to_the_app_version_and_accept_digests() -> None:
    _, operator = _operator()
    _, agent = _agent()
    assert operator["image"] == "ghcr.io/wcow-runtime/wcow-operator:0.1.0"
    assert agent["image"] == "ghcr.io/wcow-runtime/wcow-agent:0.1.0"
    objects = render(MATRIX["images-by-digest"])
    operator = find(objects, "Deployment")["spec"]["template"]["spec"]
    assert (
        operator["containers"][0]["image"]
        == "registry.example.com/wcow-operator@sha256:" + "a" * 64
    )
    assert operator["imagePullSecrets"] == [{"name": "registry"}]
    agent = find(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert agent["containers"][0]["image"] == "registry.example.com/wcow-agent:0.1.0-rc1"


@pytest.mark.parametrize(
    "values",
    [
        {},
        MATRIX["operator-only"],
        MATRIX["no-webhook"],
        {"agent": {"enabled": False}, "webhook": {"enabled": False}},
    ],
    ids=["defaults", "operator-only", "no-webhook", "neither-agent-nor-webhook"],
)
@pytest.mark.parametrize("old", ["v1.28.15", "v1.29.0"])
def test_admission_policies_need_kubernetes_1_30(
    values: dict[str, Any], old: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """On 1.28/1.29 (ValidatingAdmissionPolicy v1 not served) the chart stops with a message
    saying what would be left unguarded, whichever parts are on: no silent gap, no install
    failing on an unknown kind. `helm lint` reports template `fail` calls only on stderr
    (Helm's lint mode keeps going), so read it there; `helm install` stops on the same call."""
    capfd.readouterr()
    lint(values, kube_version=old)
    err = capfd.readouterr().err
    assert "needs Kubernetes 1.30 or later" in err
    assert "admissionPolicy.enabled=false" in err
    assert "the plan ConfigMap is writable by anyone" in err
    lint(values | {"admissionPolicy": {"enabled": False}}, kube_version=old)
    lint(values, kube_version="v1.30.0")
    assert "needs Kubernetes" not in capfd.readouterr().err


def test_without_the_policies_the_notes_say_what_is_unguarded() -> None:
    values = MATRIX["no-admission-policy"]
    assert not [o for o in render(values) if o["kind"].startswith("ValidatingAdmissionPolicy")]
    text = notes(values)
    assert "WARNING: admissionPolicy.enabled=false" in text
    assert "may write the plan" in text
    assert "WARNING" not in notes()


def test_chart_minimum_kubernetes_is_what_its_crd_needs() -> None:
    """The CRD's validation rules use fieldPath (Kubernetes 1.28): Chart.yaml says so."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["kubeVersion"] == f">={MIN_KUBE}.0-0"
    crd = find(render(), "CustomResourceDefinition")
    validate_object(crd, MIN_KUBE)
    with pytest.raises(kubernetes_validate.ValidationError, match="fieldPath"):
        validate_object(crd, "1.27")


def test_agent_owned_keys_share_the_policy_prefix() -> None:
    policy = find(render(), "ValidatingAdmissionPolicy", f"{RELEASE}-agent-node-self-patch")
    prefix_rules = [
        v["expression"] for v in policy["spec"]["validations"] if "startsWith" in v["expression"]
    ]
    assert prefix_rules
    for rule in prefix_rules:
        assert f"startsWith('{READY_LABEL_PREFIX}')" in rule
    assert AGENT_STATUS_ANNOTATION.startswith(READY_LABEL_PREFIX)
    # Capability and guest-build labels: a label prefix of their own, allowed for labels only.
    label_rule, annotation_rule = prefix_rules
    assert f"startsWith('{NODE_LABEL_PREFIX}')" in label_rule
    assert NODE_LABEL_PREFIX not in annotation_rule
    for key in (HYPERV_LABEL, CONTAINERD_LINE_LABEL, GUEST_BUILD_LABEL_PREFIX):
        assert key.startswith(NODE_LABEL_PREFIX)


# ---- the pod admission webhook ----

WEBHOOK = f"{RELEASE}-operator-webhook"


def test_webhook_is_served_through_its_service_and_owned_by_its_cluster_role() -> None:
    """What the operator is told matches the objects the chart makes: the Service it names
    exists and reaches its webhook port, the ClusterRole it names as owner exists, grants the
    webhook calls and the read of itself, and is bound to the operator's ServiceAccount."""
    from wcow_operator import rbac
    from wcow_operator.settings import parse_settings

    objects = render({"webhook": {"port": 10443}})
    deployment, container = _operator({"webhook": {"port": 10443}})
    settings = parse_settings(container["args"], {"POD_NAMESPACE": NAMESPACE})
    assert settings.webhook_port == 10443
    assert settings.webhook_service == WEBHOOK
    assert settings.webhook_owner_clusterrole == WEBHOOK
    assert settings.webhook_cert_dir == ""  # the operator's own CA: no Secret, no volume
    assert {"name": "webhook", "containerPort": 10443, "protocol": "TCP"} in container["ports"]
    service = find(objects, "Service", WEBHOOK)
    assert service["spec"]["ports"] == [
        {"name": "https-webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    role = find(objects, "ClusterRole", WEBHOOK)
    assert role["rules"] == rbac.operator_webhook_rules(WEBHOOK)
    binding = find(objects, "ClusterRoleBinding", WEBHOOK)
    assert binding["roleRef"]["name"] == WEBHOOK
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{RELEASE}-operator", "namespace": NAMESPACE}
    ]


def test_without_the_webhook_the_operator_has_no_webhook_port_service_or_permission() -> None:
    values = MATRIX["no-webhook"]
    objects = render(values)
    _, container = _operator(values)
    assert not [a for a in container["args"] if a.startswith("--webhook")]
    assert "webhook" not in {p["name"] for p in container["ports"]}
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("Service", WEBHOOK) not in names
    assert ("ClusterRole", WEBHOOK) not in names
    # The viewer's read of the configurations (kubectl wcow diagnose) is no permission of
    # the operator's, and reads nothing when there are none.
    operator = [
        o for o in objects if o["metadata"]["labels"].get("app.kubernetes.io/component") != "viewer"
    ]
    assert not any("admissionregistration" in str(o.get("rules")) for o in operator)


def test_cert_manager_issues_a_certificate_for_the_service_from_a_ca_of_the_release() -> None:
    values = MATRIX["webhook-cert-manager"]
    objects = render(values)
    deployment, container = _operator(values)
    settings = parse_settings_for(container)
    certificate = find(objects, "Certificate", WEBHOOK)
    # The API server checks the serving certificate against <service>.<namespace>.svc.
    assert f"{WEBHOOK}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    assert settings.webhook_ca_injection_from == f"{NAMESPACE}/{WEBHOOK}"
    secret = certificate["spec"]["secretName"]
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if "secret" in v)
    assert volume["secret"]["secretName"] == secret
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert mount["readOnly"] is True
    assert settings.webhook_cert_dir == mount["mountPath"]
    # The chain: a self-signed Issuer signs a long-lived CA, whose Issuer signs the certificate.
    ca_issuer = certificate["spec"]["issuerRef"]
    assert ca_issuer["kind"] == "Issuer"
    ca_secret = find(objects, "Issuer", ca_issuer["name"])["spec"]["ca"]["secretName"]
    ca = next(
        o for o in objects if o["kind"] == "Certificate" and o["spec"]["secretName"] == ca_secret
    )
    assert ca["spec"]["isCA"] is True
    assert "selfSigned" in find(objects, "Issuer", ca["spec"]["issuerRef"]["name"])["spec"]


def test_cert_manager_with_an_issuer_of_yours_makes_no_ca() -> None:
    objects = render(MATRIX["webhook-cert-manager-own-issuer"])
    cert_manager_objects = [o for o in objects if o["apiVersion"] == "cert-manager.io/v1"]
    assert [o["kind"] for o in cert_manager_objects] == ["Certificate"]
    assert cert_manager_objects[0]["spec"]["issuerRef"] == {
        "name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"
    }  # fmt: skip
    assert cert_manager_objects[0]["spec"]["duration"] == "720h"


def test_several_replicas_keep_the_webhook_through_node_drains() -> None:
    assert not [
        o for o in render({"operator": {"replicas": 1}}) if o["kind"] == "PodDisruptionBudget"
    ]
    assert find(render(), "Deployment")["spec"]["replicas"] == 2  # the default: no single point
    deployment, _ = _operator({"operator": {"replicas": 3}})
    budget = find(render({"operator": {"replicas": 3}}), "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]


def parse_settings_for(container: Obj) -> Any:
    from wcow_operator.settings import parse_settings

    return parse_settings(container["args"], {"POD_NAMESPACE": NAMESPACE})


def test_notes_tell_that_the_webhook_is_on_and_where_its_certificate_comes_from() -> None:
    assert f"Service {WEBHOOK}, 443 -> 9443" in notes()
    assert "get certificate" in notes(MATRIX["webhook-cert-manager"])
    assert "webhook" not in notes(MATRIX["no-webhook"])


def test_a_private_registry_ca_and_an_allow_list_reach_the_operator() -> None:
    """webhook.images.caBundle becomes a ConfigMap mounted into the operator and its
    --registry-ca-file; allowedRegistries become --allowed-registries, one each."""
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
    values = {
        "webhook": {
            "enabled": True,
            "images": {
                "enabled": True,
                "caBundle": pem,
                "allowedRegistries": ["harbor.corp.example", "*.azurecr.io"],
            },
        }
    }
    assert lint(values) == []
    objects = render(values)
    config_map = next(
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-registry-ca")
    )
    assert config_map["data"]["ca.crt"].strip() == pem
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--registry-ca-file=/etc/wcow-operator/registry-ca/ca.crt" in args
    assert "--allowed-registries=harbor.corp.example" in args
    assert "--allowed-registries=*.azurecr.io" in args
    mounted = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounted["registry-ca"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["registry-ca"]["configMap"]["name"] == config_map["metadata"]["name"]
    # Without a bundle: neither the ConfigMap nor the flag.
    plain = render({"webhook": {"enabled": True, "images": {"enabled": True}}})
    assert not [o for o in plain if o["metadata"]["name"].endswith("-registry-ca")]


@pytest.mark.parametrize(
    ("operator", "evicts"),
    [({}, False), ({"allowEvict": True}, True), ({"drain": "Evict"}, True),
     ({"drain": "Cordon"}, False)],
)  # fmt: skip
def test_the_operator_reads_pods_only_where_eviction_is_allowed(
    operator: dict[str, object], evicts: bool
) -> None:
    objects = render({"operator": operator})
    roles = [o for o in objects if o["kind"] in ("ClusterRole", "Role")]
    operator_sa = [
        o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(s["name"].endswith("-operator") for s in o["subjects"])
    ]  # fmt: skip
    bound = {b["roleRef"]["name"] for b in operator_sa}
    pod_rules = [
        r for role in roles if role["metadata"]["name"] in bound
        for r in role.get("rules") or [] if "pods" in r["resources"]
    ]  # fmt: skip
    assert bool(pod_rules) is evicts, pod_rules
    args = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert ("--allow-evict" in args) is evicts


def _run_args(values: dict[str, Any] | None = None) -> Any:
    from wcow_agent.cli import build_parser

    _, container = _agent(values)
    return build_parser().parse_args(container["args"])


def test_agent_is_said_to_be_a_windows_pod() -> None:
    """spec.os.name: the API server validates the pod as a Windows pod, and OpenShift's SCC
    admission (apiserver-library-go sccadmission shouldIgnore) leaves it alone."""
    daemonset, _ = _agent()
    assert daemonset["spec"]["template"]["spec"]["os"] == {"name": "windows"}


def test_agent_layout_values_reach_the_agent() -> None:
    args = _run_args()
    assert args.distribution == "auto"
    assert (args.config, args.drop_in_config, args.config_template) == (None, None, None)
    assert (args.restart_mode, args.service_name, args.containerd, args.crictl) == (None,) * 4
    args = _run_args(MATRIX["rke2-layout"])
    assert args.distribution == "rke2"
    assert args.config == "D:\\rke2\\agent\\etc\\containerd\\config.toml"
    assert args.drop_in_config.endswith("config-v3.toml.d")
    assert args.config_template.endswith("config-v3.toml.tmpl")
    assert (args.restart_mode, args.service_name) == ("none", "rke2")
    assert args.containerd == "D:\\rke2\\bin\\containerd.exe"
    assert args.crictl == "D:\\rke2\\bin\\crictl.exe"


@pytest.mark.parametrize(
    ("value", "fails"),
    [({"distribution": "k3s"}, True), ({"restartMode": "signal"}, True), ({}, False)],
)
def test_schema_refuses_unknown_layouts(value: dict[str, Any], fails: bool) -> None:
    if fails:
        with pytest.raises(Exception, match="agent"):
            render({"agent": value})
    else:
        render({"agent": value})


def test_openshift_takes_wmco_layout_and_lets_the_operator_run_as_its_user() -> None:
    values = MATRIX["openshift"]
    assert _run_args(values).distribution == "openshift"
    explicit = _run_args({"openshift": {"enabled": True}, "agent": {"distribution": "kubeadm"}})
    assert explicit.distribution == "kubeadm"  # a named distribution stands
    objects = render(values)
    role = next(
        o
        for o in objects
        if o["kind"] == "Role" and o["metadata"]["name"].endswith("-openshift-scc")
    )
    assert role["rules"] == [
        {
            "apiGroups": ["security.openshift.io"],
            "resources": ["securitycontextconstraints"],
            "resourceNames": ["nonroot-v2"],
            "verbs": ["use"],
        }
    ]
    binding = next(
        o
        for o in objects
        if o["kind"] == "RoleBinding" and o["metadata"]["name"] == role["metadata"]["name"]
    )
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    subjects = {s["name"] for s in binding["subjects"]}
    operator_pod = find(objects, "Deployment")["spec"]["template"]["spec"]
    assert operator_pod["serviceAccountName"] in subjects
    assert operator_pod["securityContext"]["runAsUser"] != 0  # nonroot-v2: any user but root
    assert f"{RELEASE}-test" in subjects  # the helm test pod's
    assert "scc.podSecurityLabelSync=false" in notes(values)


def test_without_openshift_no_scc_is_asked_for() -> None:
    names = [o["metadata"]["name"] for o in render() if o["kind"] in ("Role", "RoleBinding")]
    assert not [n for n in names if "openshift" in n]
    assert "scc.podSecurityLabelSync" not in notes()
