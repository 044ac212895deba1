"""``kubectl wcow``: status and diagnostics for people, read-only (docs/install.md)."""
