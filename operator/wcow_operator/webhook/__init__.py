"""The pod admission webhook: its decisions (pure: ``decide`` and what it calls, the image
checks) beside its server (kopf, ``server``), certificates and configurations."""
