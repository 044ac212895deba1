"""What the whole-number CEL rule on the status's integers cost each status write: the
operator's status PUT timed against the CRD as generated (no rule on the status) and against
the same CRD with the rule on every status integer (as it was before this release), alternated on
one control plane so the host's drift falls on both.

    .venv/bin/python benchmarks/status_rules.py [--profiles 250] [--repeats 4]

Runs against the local control plane (started for the duration; its pids file is what lets
it count CPU by process). Each repeat, for each CRD (in ABBA order): replaces the CRD in
place, waits until a status observedGeneration of 1.0 is refused under the rule and taken
without it (so the CRD measured is the one in force), creates N profiles, then PUTs each
one's status (the body the operator's reconcile renders, through the operator's own client)
and counts kube-apiserver's CPU over the PUTs alone; deletes the profiles. Prints each
measurement and the medians with the spread, in CPU milliseconds per status write.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.converge import cpu_by_process, rendered_writes, specs
from tests.control_plane import cluster_kubeconfig
from tests.e2e.operator_harness import CRD_FILE, GROUP, PLURAL, VERSION, installed_crd, wait_for

from wcow_contract.crd import WHOLE_NUMBER_RULE
from wcow_operator.controller.controller import status_update
from wcow_operator.k8s.kubernetes_api import KubernetesApi
from wcow_operator.reconcile.model import Write


def with_status_rule(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD with the whole-number rule on every integer of the status."""
    variant = copy.deepcopy(crd)

    def add(node: dict[str, Any]) -> None:
        if node.get("type") == "integer":
            node["x-kubernetes-validations"] = [
                WHOLE_NUMBER_RULE,
                *node.get("x-kubernetes-validations", []),
            ]
        for child in node.get("properties", {}).values():
            add(child)
        if isinstance(node.get("items"), dict):
            add(node["items"])
        if isinstance(node.get("additionalProperties"), dict):
            add(node["additionalProperties"])

    add(variant["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"])
    return variant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=int, default=250)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    with cluster_kubeconfig() as kubeconfig:
        run(args, kubeconfig)


def run(args: argparse.Namespace, kubeconfig: Path) -> None:
    config.load_kube_config(str(kubeconfig))
    kube = client.ApiClient()
    custom = client.CustomObjectsApi(kube)
    generated = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    variants = {"as generated": generated, "with the status rule": with_status_rule(generated)}
    api = KubernetesApi(kube)
    found: dict[str, list[float]] = {label: [] for label in variants}
    with installed_crd(kube):
        probe = custom.create_cluster_custom_object(
            GROUP, VERSION, PLURAL, specs(f"rules-probe-{uuid.uuid4().hex[:6]}", 1)[0]
        )["metadata"]["name"]
        try:
            for repeat in range(args.repeats):
                # ABBA: neither CRD always runs first
                order = list(variants) if repeat % 2 == 0 else list(reversed(variants))
                for label in order:
                    # Replaced in place (the outer one installed it), and left so on exit.
                    with installed_crd(kube, variants[label]):
                        enforced(custom, probe, refused=label == "with the status rule")
                        time.sleep(3)  # the CRD handler's rebuild of its storage settles
                        milliseconds = status_writes(kubeconfig, custom, api, args.profiles)
                    found[label].append(milliseconds)
                    print(f"repeat {repeat + 1}, {label}: {milliseconds:.2f} ms", flush=True)
        finally:
            custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, probe)
    medians = {label: statistics.median(values) for label, values in found.items()}
    for label, median in medians.items():
        print(
            f"kube-apiserver CPU per status write, {label}: {median:.2f} ms (median;"
            f" {min(found[label]):.2f} to {max(found[label]):.2f})"
        )
    saved = 1 - medians["as generated"] / medians["with the status rule"]
    print(f"the rule's share of a status write's kube-apiserver CPU: {100 * saved:.0f}%")


def enforced(custom: client.CustomObjectsApi, probe: str, *, refused: bool) -> None:
    """Wait until the server validates with the CRD just put in place: a status
    observedGeneration of 1.0 is refused under the rule and taken without it."""

    def as_expected() -> bool:
        current = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, probe)
        body = {
            "apiVersion": current["apiVersion"],
            "kind": current["kind"],
            "metadata": {
                "name": probe,
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
            "status": {"observedGeneration": 1.0},
        }
        try:
            custom.replace_cluster_custom_object_status(GROUP, VERSION, PLURAL, probe, body)
        except client.ApiException as error:
            if error.status not in (409, 422):
                raise
            return refused and error.status == 422
        return not refused

    wait_for(f"the CRD {'with' if refused else 'without'} the status rule in force", as_expected)


def status_writes(
    kubeconfig: Path, custom: client.CustomObjectsApi, api: KubernetesApi, count: int
) -> float:
    """kube-apiserver's CPU milliseconds per status PUT over ``count`` new profiles."""
    bodies = specs(f"rules-{uuid.uuid4().hex[:6]}", count)
    rendered = rendered_writes(bodies)
    created = [custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, b) for b in bodies]
    time.sleep(1)  # the creates' watch fan-out and garbage-collector work settle first
    before = cpu_by_process(kubeconfig)
    for observed in created:
        name = observed["metadata"]["name"]
        status = Write("update-status", name, rendered[name]["update-status"], observed=observed)
        api.update_profile_status(name, status_update(status))
    after = cpu_by_process(kubeconfig)
    if before is None or after is None:
        raise SystemExit("needs the local control plane (its pids file): unset KUBECONFIG")
    for body in bodies:
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, body["metadata"]["name"])
    time.sleep(2)
    return 1000 * (after["kube-apiserver"] - before["kube-apiserver"]) / count


if __name__ == "__main__":
    main()
