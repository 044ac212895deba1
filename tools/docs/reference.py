"""Regenerate docs/reference/ from the code.

    .venv/bin/python tools/docs/reference.py          # write (`make crds` runs this)
    .venv/bin/python tools/docs/reference.py --check  # exit 1 and name the stale files

Writes:

- ``crd.md``: the WindowsRuntimeProfile fields (``wcow crd --reference``, from the same
  schema as the CRD);
- ``settings.md``: the operator's flags and environment variables
  (``wcow_operator.settings.markdown_settings``, from its argument parser);
- ``conditions.md``: the status conditions and their reasons (``wcow crd --conditions``);
- ``metrics.md``: every metric the operator (with its webhook) and the node agent export,
  read from their own Prometheus registries.

Each generated table sits between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` markers;
``tests/delivery/test_reference_docs.py`` fails when a page differs from what this script
would write.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from wcow_agent.loop.metrics import Metrics as AgentMetrics
from wcow_contract.condition_table import markdown_table as conditions_table
from wcow_contract.reference import markdown_reference
from wcow_operator.controller.metrics import Metrics as OperatorMetrics
from wcow_operator.settings import markdown_settings
from wcow_operator.webhook.metrics import AdmissionMetrics

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
GENERATED = "Generated from the code by `make crds` (`tools/docs/reference.py`); do not edit."
# What Prometheus stores for each metric type (prometheus_client names a counter without it).
EXPORTED_SUFFIX = {"counter": "_total", "gauge": "", "histogram": ""}


def marked(name: str, text: str) -> str:
    """``text`` between the markers the drift tests look for."""
    return f"<!-- {name}:start -->\n{text}<!-- {name}:end -->\n"


def _page(title: str, intro: str, name: str, table: str) -> str:
    return f"# {title}\n\n{GENERATED}\n\n{intro}\n\n{marked(name, table)}"


def _label_names(owners: Iterable[object]) -> dict[str, tuple[str, ...]]:
    """Label names by metric name. prometheus_client's registry reports a labelled metric
    with no series yet without its labels, so they are read from the metric objects."""
    found: dict[str, tuple[str, ...]] = {}
    for owner in owners:
        for value in vars(owner).values():
            if isinstance(value, MetricWrapperBase):
                found[value._name] = tuple(value._labelnames)
    return found


def metrics_table(registry: CollectorRegistry, owners: Iterable[object]) -> str:
    """One row per metric of ``registry``, sorted by name; ``owners`` hold its metrics."""
    labels = _label_names(owners)
    rows = ["| metric | type | labels | what it counts |", "| --- | --- | --- | --- |"]
    for metric in sorted(registry.collect(), key=lambda m: m.name):
        name = metric.name + EXPORTED_SUFFIX[metric.type]
        names = ", ".join(f"`{label}`" for label in labels.get(metric.name, ()))
        text = metric.documentation.replace("|", "\\|")
        rows.append(f"| `{name}` | {metric.type} | {names} | {text} |")
    return "\n".join(rows) + "\n"


def metrics_page() -> str:
    operator = OperatorMetrics()
    admission = AdmissionMetrics(operator.registry)
    agent = AgentMetrics()
    return (
        "# Metrics\n\n"
        f"{GENERATED}\n\n"
        "Read from the programs' own Prometheus registries. A histogram is exported as\n"
        "`NAME_bucket`, `NAME_sum` and `NAME_count`. What to alert on, and the runbooks:\n"
        "[runbooks.md](../runbooks.md).\n\n"
        "## The operator (`:9090/metrics`)\n\n"
        "Every replica exports them; the admission webhook's (`wcow_admission_*`) count the\n"
        "pods this replica decided.\n\n"
        + marked("operator-metrics", metrics_table(operator.registry, (operator, admission)))
        + "\n## The node agent (`:9551/metrics`)\n\n"
        "One agent per Windows node; what each state and reason means:\n"
        "[agent.md](../agent.md#metrics-9551metrics).\n\n"
        + marked("agent-metrics", metrics_table(agent.registry, (agent,)))
    )


def pages() -> dict[Path, str]:
    return {
        REFERENCE / "crd.md": _page(
            "WindowsRuntimeProfile fields",
            "`runtime.wcow.dev/v1alpha1`, cluster-scoped, short name `wrp`: every field of the\n"
            "CRD, from the pydantic model the CRD in `crds/` is generated from. How a profile\n"
            "becomes a RuntimeClass and a containerd handler: [profiles.md](../profiles.md).",
            "crd-reference",
            markdown_reference(),
        ),
        REFERENCE / "settings.md": _page(
            "Operator settings",
            "The flags of `wcow-operator`, from its argument parser. Flags win over the\n"
            "environment, the environment over the defaults. The chart sets them from its\n"
            "values (`charts/wcow-runtime/values.yaml`).",
            "settings-reference",
            markdown_settings(),
        ),
        REFERENCE / "conditions.md": _page(
            "Status conditions",
            "The conditions of a profile's `status.conditions` and every reason each can\n"
            "carry (a test checks that the operator gives exactly these). What they mean,\n"
            "and what GitOps tools make of them: [profiles.md](../profiles.md#conditions).",
            "conditions",
            conditions_table(),
        ),
        REFERENCE / "metrics.md": metrics_page(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale pages")
    args = parser.parse_args(argv)
    stale = []
    for path, text in pages().items():
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path.relative_to(ROOT).as_posix())
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print("stale (run `make crds`): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
