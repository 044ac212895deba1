"""Small helpers both binaries share: retry with backoff, the health server, the supervisor
of long-lived threads. Standard library only, and no knowledge of either side nor of the
contract (import-linter holds all three)."""
