"""`wcow admit` over workloads: the pod template of each kind is judged as
the pods it will make; the output names the workload and the container; templates are never
changed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.admission.pods import container, pod, write_documents
from wcow_contract.catalog.hcs_annotations import ANNOTATION_MEMORY_MB, ANNOTATION_PROCESSOR_COUNT
from wcow_operator.cli import main
from wcow_operator.webhook.workloads import TEMPLATE_PATHS, pods_in


def _template(runtime_class: str, **limits: str) -> dict[str, Any]:
    body = pod(runtime_class, containers=[container("web", limits=dict(limits))])
    return {"metadata": {"labels": {"app": "web"}}, "spec": body["spec"]}


def workload(kind: str, name: str, template: dict[str, Any]) -> dict[str, Any]:
    """A manifest of ``kind`` as its users write it, its template where the kind keeps it."""
    group = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    document: dict[str, Any] = {
        "apiVersion": group,
        "kind": kind,
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
    }
    holder = document
    for key in TEMPLATE_PATHS[kind][:-1]:
        holder = holder.setdefault(key, {})
    holder[TEMPLATE_PATHS[kind][-1]] = copy.deepcopy(template)
    if kind == "CronJob":
        document["spec"] = {"schedule": "0 3 * * *", **document["spec"]}
    return document


def _admit(profiles: Path, *files: Path) -> int:
    return main(["admit", "--profiles", str(profiles), *map(str, files)])


@pytest.mark.parametrize("kind", sorted(TEMPLATE_PATHS))
def test_each_workload_kind_is_judged_by_its_template(
    kind: str, tmp_path: Path, profiles_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sized = workload(kind, "web", _template("sized", cpu="3", memory="1Gi"))
    written = copy.deepcopy(sized)
    manifests = write_documents(tmp_path / "app.yaml", sized)
    assert _admit(profiles_file, manifests) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert f"# {kind} 'web' (pod template) in {manifests} (document 1)" in out
    (printed,) = yaml.safe_load_all(out)
    assert printed["kind"] == "Pod"
    assert printed["metadata"]["namespace"] == "shop"  # the workload's namespace
    assert printed["metadata"]["labels"] == {"app": "web"}
    assert printed["metadata"]["annotations"] == {
        ANNOTATION_PROCESSOR_COUNT: "3",
        ANNOTATION_MEMORY_MB: str(1024 + 512),
    }
    assert sized == written  # the workload itself is never changed

    too_big = workload(kind, "batch", _template("fixed", memory="3Gi"))
    assert _admit(profiles_file, write_documents(tmp_path / "big.yaml", too_big)) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert f"{kind} 'batch' (pod template) refused (VMTooSmall)" in err
    assert "(web 3Gi; requests where no limit)" in err  # the container it is about


def test_lists_and_multi_document_files(
    tmp_path: Path, profiles_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kubectl get deploy,cronjob,pods -A -o yaml` gives a List whose items carry their
    kind; the API's typed lists (DeploymentList) carry none on their items."""
    listed = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            workload("Deployment", "front", _template("sized", cpu="1")),
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "front"}},
            workload("CronJob", "nightly", _template("fixed", cpu="4")),
            pod("lenient", containers=[container("big", limits={"cpu": "6"})]),
        ],
    }
    typed_item = workload("StatefulSet", "db", _template("sized", memory="2Gi"))
    del typed_item["kind"], typed_item["apiVersion"]
    typed = {"apiVersion": "apps/v1", "kind": "StatefulSetList", "items": [typed_item]}
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    first = write_documents(tmp_path / "live.yaml", listed, config, typed)
    second = tmp_path / "pod.json"  # JSON is YAML too
    second.write_text(json.dumps(pod("sized")), encoding="utf-8")
    assert _admit(profiles_file, first, second) == 1
    out, err = capsys.readouterr()
    printed = list(yaml.safe_load_all(out))
    assert [p["metadata"].get("name") for p in printed] == [None, "p", None, "p"]
    assert "# List item 1: Deployment 'front' (pod template)" in out
    assert "# StatefulSetList item 1: StatefulSet 'db' (pod template)" in out
    assert printed[2]["metadata"]["annotations"][ANNOTATION_MEMORY_MB] == str(2048 + 512)
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith(f"error: {first} (document 1): List item 3: CronJob 'nightly'")
    assert "refused (VMTooSmall)" in lines[0]
    assert lines[1].startswith(f"warning: {first} (document 1): List item 4: pod 'p': VMTooSmall:")
    assert "big 6" in lines[1]


def test_a_warning_alone_exits_0(
    tmp_path: Path, profiles_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifests = write_documents(
        tmp_path / "d.yaml", workload("Job", "j", _template("lenient", cpu="3"))
    )
    assert _admit(profiles_file, manifests) == 0
    out, err = capsys.readouterr()
    assert "Job 'j' (pod template): VMTooSmall:" in err
    assert "oversizedPods is Warn" in err
    assert next(yaml.safe_load_all(out))["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "3"
    }


def test_a_template_of_the_wrong_shape_is_named_not_a_traceback(
    tmp_path: Path, profiles_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = [
        {"kind": "Deployment", "metadata": {"name": "a"}, "spec": {"template": "web"}},
        {"kind": "CronJob", "metadata": {"name": "b"}, "spec": {"jobTemplate": {"spec": []}}},
        {"kind": "Job", "metadata": {"name": "c"}},
        {"kind": "DaemonSet", "metadata": {"name": "d"}, "spec": {"template": {"metadata": 1}}},
    ]
    assert _admit(profiles_file, write_documents(tmp_path / "bad.yaml", *broken)) == 1
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert lines[0].endswith("Deployment 'a' (pod template): spec.template is 'web', not an object")
    assert lines[1].endswith("spec.jobTemplate.spec is a list, not an object")
    assert lines[2].endswith("Job 'c' (pod template): spec is absent")
    assert lines[3].endswith("spec.template.metadata is 1, not an object")


def test_pods_in_reads_only_what_makes_pods() -> None:
    assert pods_in(None) == []
    assert pods_in({"kind": "Service"}) == []
    assert pods_in({"kind": "List", "items": "x"}) == []
    assert pods_in({"kind": "List", "items": [1, {"kind": "Secret"}]}) == []
    (only,) = pods_in({"kind": "ReplicaSet", "spec": {"template": {"spec": {}}}})
    assert only.what == "ReplicaSet (no name) (pod template)"
    assert only.pod == {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}}
