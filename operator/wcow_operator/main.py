"""``wcow-operator``: the cluster controller (issue: the cluster controller)."""

from __future__ import annotations

import sys


def main() -> int:
    print(
        "wcow-operator: the cluster controller is not implemented yet; use `wcow render` "
        "to produce RuntimeClasses and the plan offline.",
        file=sys.stderr,
    )
    return 1
