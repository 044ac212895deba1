"""The chart's read-only roles for ``kubectl wcow`` (``<fullname>-viewer``): the rules of
``rbac.VIEWER_*`` exactly, bound only to the subjects given. Their effect on a real API
server: tests/e2e/test_kubectl_wcow.py."""

from __future__ import annotations

from typing import Any

from tests.delivery.helpers import find, render
from tests.delivery.test_chart import MATRIX
from wcow_operator import rbac

SUBJECTS = [
    {"kind": "Group", "name": "platform-oncall", "apiGroup": "rbac.authorization.k8s.io"},
    {"kind": "ServiceAccount", "name": "support-bot", "namespace": "tools"},
]


def viewer_objects(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [o for o in render(values) if o["metadata"]["name"] == "wcow-runtime-viewer"]


def test_viewer_roles_carry_exactly_the_plugins_rules_and_no_binding_by_default() -> None:
    objects = viewer_objects()
    assert sorted(o["kind"] for o in objects) == ["ClusterRole", "Role"]
    assert find(objects, "ClusterRole")["rules"] == rbac.VIEWER_CLUSTER_RULES
    role = find(objects, "Role")
    assert role["rules"] == rbac.VIEWER_NAMESPACE_RULES
    assert role["metadata"]["namespace"] == "wcow-system"
    assert "aggregationRule" not in find(objects, "ClusterRole")
    labels = find(objects, "ClusterRole")["metadata"]["labels"]
    assert not any(k.startswith("rbac.authorization.k8s.io/aggregate-to") for k in labels)


def test_subjects_are_bound_to_both_roles() -> None:
    objects = viewer_objects({"viewer": {"subjects": SUBJECTS}})
    cluster = find(objects, "ClusterRoleBinding")
    namespaced = find(objects, "RoleBinding")
    assert cluster["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
        "name": "wcow-runtime-viewer",
    }  # fmt: skip
    assert namespaced["roleRef"]["kind"] == "Role"
    assert cluster["subjects"] == namespaced["subjects"] == SUBJECTS


def test_viewer_can_be_left_out() -> None:
    assert viewer_objects({"viewer": {"create": False, "subjects": SUBJECTS}}) == []


def test_matrix_covers_bound_viewers() -> None:
    # test_chart's lint and schema checks run over every MATRIX case.
    assert any("viewer" in values for values in MATRIX.values())
