"""e2e tests (and tests/fleet) run against a real API server: the cluster KUBECONFIG points
at, or else the project's local control plane (tests/control_plane.py), started once per
session.

`make e2e` builds the control plane when missing and sets WCOW_E2E_REQUIRED=1, so a missing
cluster fails the run instead of skipping it. A plain `pytest` skips these tests with the
reason when there is neither a KUBECONFIG nor built binaries.

The fixtures (``kubeconfig``, ``kube``, ``prefix``) live in tests/conftest.py, so the fleet
tests share the one control plane of the session. The tests create their own objects under
a unique prefix and remove them. On a shared cluster, run them with no other wcow-operator
running.
"""
