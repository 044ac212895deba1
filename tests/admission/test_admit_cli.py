"""`wcow admit --profiles PATH POD.yaml...`: the webhook's decisions offline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.admission.pods import FROM_LIMITS, container, pod, write_documents
from tests.conftest import SAMPLES, profile_document
from wcow_contract.catalog.hcs_annotations import ANNOTATION_MEMORY_MB, ANNOTATION_PROCESSOR_COUNT
from wcow_operator.cli import main


def test_admitted_pods_are_printed_sized_others_unchanged(
    tmp_path: Path, profiles_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sized = pod("sized", containers=[container(limits={"cpu": "3", "memory": "4Gi"})])
    fixed = pod("fixed", containers=[container(limits={"cpu": "2"})])  # fits its VM
    plain = pod(None)
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    pods = write_documents(tmp_path / "pods.yaml", sized, fixed, config, plain)
    assert main(["admit", "--profiles", str(profiles_file), str(pods)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    documents = list(yaml.safe_load_all(out))
    assert len(documents) == 3  # the ConfigMap is not a pod
    annotations = documents[0]["metadata"]["annotations"]
    assert annotations == {ANNOTATION_PROCESSOR_COUNT: "3", ANNOTATION_MEMORY_MB: "4608"}
    assert documents[1:] == [fixed, plain]


def test_a_refused_pod_goes_to_stderr_with_exit_1(
    tmp_path: Path, profiles_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = pod("sized", containers=[container(limits={"cpu": "12"})])
    big["metadata"]["name"] = "big"
    ok = pod("sized")
    pods = write_documents(tmp_path / "pods.yaml", big, ok)
    assert main(["admit", "--profiles", str(profiles_file), str(pods)]) == 1
    out, err = capsys.readouterr()
    assert "pod 'big' refused (VMTooLarge)" in err
    assert "12 cores" in err
    assert "maxProcessorCount 8" in err
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(out)] == ["p"]


def test_profiles_folder_and_usage_errors(tmp_path: Path) -> None:
    pods = write_documents(tmp_path / "pods.yaml", pod("hyperv-ltsc2022"))
    command = [sys.executable, "-m", "wcow_operator.cli", "admit", "--profiles", str(SAMPLES)]
    done = subprocess.run([*command, str(pods)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    missing = subprocess.run(
        [*command, str(tmp_path / "nope.yaml")], capture_output=True, text=True, check=False
    )
    assert missing.returncode == 2
    assert "no such file" in missing.stderr
    empty = write_documents(tmp_path / "empty.yaml", {"kind": "ConfigMap"})
    none = subprocess.run([*command, str(empty)], capture_output=True, text=True, check=False)
    assert none.returncode == 1
    assert (
        "no Pod or workload (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, "
        "CronJob) found" in none.stderr
    )


def test_malformed_and_hostile_pods_are_refusals_not_tracebacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each of these raised in `wcow admit` (AttributeError, TypeError,
    OverflowError, ValueError) or took seconds; each is now one line on stderr."""
    documents = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": "p", "spec": pod("sized")["spec"]},
        {**pod("proc"), "metadata": {"name": "affinity"}},
        {**pod("sized", containers=[container(limits={"cpu": "1e400"})]),
         "metadata": {"name": "exponent"}},
        {**pod("sized", annotations={ANNOTATION_PROCESSOR_COUNT: "9\n" * 125_000}),
         "metadata": {"name": "flood", "annotations": {ANNOTATION_PROCESSOR_COUNT:
                                                       "9\n" * 125_000}}},
    ]  # fmt: skip
    documents[1]["spec"]["affinity"] = {"nodeAffinity": [["x"]]}
    pods = write_documents(tmp_path / "pods.yaml", *documents)
    profiles_file = write_documents(
        tmp_path / "profiles.yaml",
        profile_document("sized", vm=FROM_LIMITS),
        profile_document("proc", isolation="Process", windowsBuild="ltsc2019"),
    )
    assert main(["admit", "--profiles", str(profiles_file), str(pods)]) == 1
    out, err = capsys.readouterr()
    assert out.strip() in ("", "[]", "{}")
    lines = err.strip().splitlines()
    assert len(lines) == 4, err[:2000]
    assert "MalformedPod" in lines[0]
    assert "MalformedPod" in lines[1]
    assert "spec.affinity.nodeAffinity" in lines[1]
    assert "InvalidQuantity" in lines[2]
    assert "AnnotationInvalid" in lines[3]
    assert all(len(line) < 600 for line in lines)
