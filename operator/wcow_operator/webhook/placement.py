"""Where a pod may run: a HostProcess container cannot start in a Hyper-V utility VM, and a
process-isolated pod pinned to Windows builds must be able to run on one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wcow_contract.catalog.windows_builds import (
    WINDOWS_BUILD_LABEL,
    WindowsBuild,
    parse_windows_build,
    process_can_run,
)
from wcow_contract.text import shown
from wcow_contract.v1alpha1 import WindowsRuntimeProfile
from wcow_operator.webhook.decision import (
    MALFORMED_POD,
    POD_TOO_LARGE,
    WINDOWS_BUILD_MISMATCH,
    Refusal,
)
from wcow_operator.webhook.pod_shape import (
    MAX_SELECTOR_ITEMS,
    all_containers,
    container_name,
    mapping,
    objects,
    pod_spec,
    sequence,
)


def host_process(spec: Mapping[str, Any]) -> str | None:
    """Where the pod asks for a HostProcess container, or None."""

    def flag(holder: Mapping[str, Any], where: str) -> bool:
        context = mapping(holder, "securityContext", where)
        options = mapping(context, "windowsOptions", f"{where}.securityContext")
        return options.get("hostProcess") is True

    if flag(spec, "spec"):
        return "spec.securityContext.windowsOptions.hostProcess"
    for field, items in all_containers(spec).items():
        for i, container in enumerate(items):
            where = f"spec.{field}[{container_name(container, i)}]"
            if flag(container, where):
                return f"{where}.securityContext.windowsOptions.hostProcess"
    return None


_REQUIRED = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _pinned_builds(spec: Mapping[str, Any]) -> tuple[str, list[list[str]]] | None:
    """How the pod pins node.kubernetes.io/windows-build: (where, allowed values per
    alternative). None when it does not pin (some alternative lets any build through)."""
    selector = mapping(spec, "nodeSelector", "spec")
    pinned = selector.get(WINDOWS_BUILD_LABEL)
    if isinstance(pinned, str):
        return "spec.nodeSelector", [[pinned]]
    node = mapping(mapping(spec, "affinity", "spec"), "nodeAffinity", "spec.affinity")
    required = mapping(node, "requiredDuringSchedulingIgnoredDuringExecution",
                        "spec.affinity.nodeAffinity")  # fmt: skip
    terms = objects(required, "nodeSelectorTerms", _REQUIRED)
    if not terms:
        return None
    walked = len(terms)
    alternatives: list[list[str]] = []
    for t, term in enumerate(terms):
        where = f"{_REQUIRED}.nodeSelectorTerms[{t}]"
        expressions = objects(term, "matchExpressions", where)
        walked += len(expressions)
        sets: list[set[str]] = []
        for e, expression in enumerate(expressions):
            if expression.get("key") != WINDOWS_BUILD_LABEL or expression.get("operator") != "In":
                continue
            values = sequence(expression, "values", f"{where}.matchExpressions[{e}]")
            walked += len(values)
            _within_selector_bound(walked)
            if not all(isinstance(v, str) for v in values):
                raise Refusal(MALFORMED_POD, f"{where}.matchExpressions[{e}].values: "
                                              "every value must be a string")  # fmt: skip
            sets.append(set(values))
        _within_selector_bound(walked)
        if not sets:
            return None  # this alternative lets any build through
        alternatives.append(sorted(set.intersection(*sets)))
    return _REQUIRED, alternatives


def _within_selector_bound(walked: int) -> None:
    if walked > MAX_SELECTOR_ITEMS:
        raise Refusal(
            POD_TOO_LARGE,
            f"{_REQUIRED} has more than {MAX_SELECTOR_ITEMS} terms, expressions and values; a "
            "pod of a wcow RuntimeClass may have at most that many",
        )


def _build_runs(value: str, guest: WindowsBuild) -> bool:
    try:
        host = parse_windows_build(value)
    except ValueError:
        return False
    return value == host.label_value and process_can_run(host, guest)


def check_process(pod: Mapping[str, Any], profile: WindowsRuntimeProfile) -> None:
    guest = profile.spec.guest_build
    pinned = _pinned_builds(pod_spec(pod))
    if guest is None or pinned is None:
        return
    where, alternatives = pinned
    if any(_build_runs(v, guest) for values in alternatives for v in values):
        return
    asked = sorted({v for values in alternatives for v in values})
    listed = ", ".join(shown(v) for v in asked[:8]) + (" ..." if len(asked) > 8 else "")
    raise Refusal(
        WINDOWS_BUILD_MISMATCH,
        f"{where} pins {WINDOWS_BUILD_LABEL} to {listed or 'no value'}, but "
        f"RuntimeClass {profile.name!r} runs process-isolated containers built for "
        f"{guest.label_value} ({profile.spec.windows_build}), which no such host can run: "
        f"pin {guest.label_value}, drop the pin, or use a Hyper-V RuntimeClass",
    )


def placement(pod: Mapping[str, Any]) -> tuple[object, object]:
    spec = pod.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    return spec.get("nodeSelector"), spec.get("affinity")
