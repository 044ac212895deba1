"""Pure reconcile: observed objects in, writes out (no kopf, no kubernetes client)."""
