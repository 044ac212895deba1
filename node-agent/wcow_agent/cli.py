"""``wcow-agent``: the Windows node agent (issue: the Windows node agent)."""

from __future__ import annotations

import sys


def main() -> int:
    print("wcow-agent: the node agent is not implemented yet.", file=sys.stderr)
    return 1
