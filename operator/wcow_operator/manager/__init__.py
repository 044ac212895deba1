"""The operator's long-lived parts, each in threads of one ``Supervisor`` (as a kubebuilder
Manager owns its runnables): the reconcile loop and the leader election it waits for, the
watches, the admission webhook's server and keepers, and the probe and metrics endpoints.
``wcow_operator.main`` wires them."""
