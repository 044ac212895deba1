"""The whole loop at small N on kmock, the in-process API emulator (``make test``, no
cluster): the operator process plus 5 simulated Windows nodes and two without Hyper-V.

What kmock lacks (tests/smoke/kube_apiserver.py) and why the loop still holds here: label
and field selectors are ignored, so the operator's Windows-node watch and the agents' watch
of the plan ConfigMap by name see every object of their kind; this cluster holds only
Windows Nodes and only the plan ConfigMap in its namespace. There is no garbage collector:
the operator deletes the RuntimeClass itself. No Table rendering: ``kubectl get wrp``
columns are checked on the real control plane only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.e2e.operator_harness import CRD_FILE
from tests.fleet.harness import whole_loop

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
            whole_loop(api, kubeconfig, tmp_path, NAMESPACE, "km", NODES)
        finally:
            api.close()
