"""The whole loop at small N on kmock, the in-process API emulator (``make test``, no
cluster): the operator process plus 5 simulated Windows nodes and two without Hyper-V.

Also the paced rollout at N=5: a good change two nodes at a time, a bad one halted.

What kmock lacks (tests/smoke/kube_apiserver.py) and why the loop still holds here: label
selectors are ignored, so the operator's Windows-node watch sees every Node; this cluster
holds only Windows Nodes. Field selectors on the name are honoured by our layer: the agents
watch the plan and the rollout ConfigMaps by name, side by side in one namespace. There is
no garbage collector: the operator deletes the RuntimeClass itself. No Table rendering:
``kubectl get wrp`` columns are checked on the real control plane only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.e2e.operator_harness import CRD_FILE
from tests.fleet.harness import whole_loop
from tests.fleet.paced import good_then_bad_change

pytest.importorskip("kmock", reason="kmock (the API emulator) is not installed")

from kubernetes import config

from tests.smoke.kube_apiserver import running_apiserver, write_kubeconfig

NAMESPACE = "wcow-system"
NODES = 5


def test_whole_loop_on_a_simulated_fleet_against_kmock(tmp_path: Path) -> None:
    crd = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    with running_apiserver(crd) as (apiserver, url):
        for ns in (NAMESPACE, "default"):
            apiserver.add_object("v1/namespaces", None, {"metadata": {"name": ns}})
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        api = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            # kmock has no garbage collector: a deleted profile's RuntimeClass stays there
            whole_loop(api, kubeconfig, tmp_path, NAMESPACE, "km", NODES, garbage_collector=False)
        finally:
            api.close()


def test_paced_rollout_good_then_bad_change_against_kmock(tmp_path: Path) -> None:
    """(a) and (b) of tests/fleet/test_fleet_rollout.py at N=5, two at a time."""
    crd = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    with running_apiserver(crd) as (apiserver, url):
        for ns in (NAMESPACE, "default"):
            apiserver.add_object("v1/namespaces", None, {"metadata": {"name": ns}})
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        api = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            good_then_bad_change(api, kubeconfig, tmp_path, NAMESPACE, "km", NODES, limit=2)
        finally:
            api.close()
