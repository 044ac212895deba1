"""docs/reference/ is what the code generates (`make crds`, tools/docs/reference.py): the
CRD's fields, the operator's settings, the conditions and the metrics."""

from __future__ import annotations

from tools.docs.reference import REFERENCE, metrics_page, pages

from tests.conftest import ROOT
from wcow_agent.loop.metrics import Metrics as AgentMetrics
from wcow_contract.condition_table import markdown_table as conditions_table
from wcow_contract.reference import markdown_reference
from wcow_operator.controller.metrics import Metrics as OperatorMetrics
from wcow_operator.settings import _parser, markdown_settings
from wcow_operator.webhook.metrics import AdmissionMetrics


def _between(page: str, name: str) -> str:
    """The text of ``docs/reference/<page>`` between its ``<!-- NAME:start/end -->`` markers."""
    text = (REFERENCE / page).read_text(encoding="utf-8")
    start = f"<!-- {name}:start -->\n"
    return text[text.index(start) + len(start) : text.index(f"<!-- {name}:end -->")]


def test_every_reference_page_is_what_make_crds_writes() -> None:
    stale = [
        path.relative_to(ROOT).as_posix()
        for path, text in pages().items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    assert stale == [], f"stale: {stale}; run `make crds`"


def test_crd_reference_is_current() -> None:
    assert _between("crd.md", "crd-reference") == markdown_reference(), (
        "docs/reference/crd.md is stale: regenerate it with `make crds`"
    )


def test_reference_lists_every_spec_field() -> None:
    for field in (
        "spec.isolation",
        "spec.vm.memoryMB",
        "spec.containerd.options",
        "spec.scheduling.requireReadyLabel",
        "status.conditions[].reason",
    ):
        assert f"| `{field}` |" in markdown_reference()


def test_settings_table_is_current() -> None:
    assert _between("settings.md", "settings-reference") == markdown_settings(), (
        "docs/reference/settings.md is stale: regenerate it with `make crds`"
    )


def test_settings_table_has_every_flag_and_its_environment_variable() -> None:
    table = markdown_settings()
    for action in _parser()._actions:
        if action.dest == "help":
            continue
        flag = action.option_strings[0].removeprefix("--")
        row = next((line for line in table.splitlines() if f"{flag}" in line.split("|")[1]), "")
        assert row, f"--{flag} is missing from the Settings table"
        # Each flag's help names the environment variable that sets it (the convention the
        # table relies on): WCOW_ + the flag's name.
        assert "WCOW_" in row, f"--{flag}'s help does not name its environment variable"
    for flag in ("--max-unavailable", "--rollout-timeout-seconds", "--webhook-port"):
        assert f"`{flag}`" in table


def test_conditions_table_is_current() -> None:
    """docs/reference/conditions.md holds the generated table (`make crds`)."""
    assert _between("conditions.md", "conditions") == conditions_table(), (
        "conditions.md: stale; run `make crds`"
    )
    for type_ in ("RolledOut", "Reconciling", "Stalled"):
        assert f"| `{type_}` |" in conditions_table()


def test_metrics_page_lists_every_exported_metric() -> None:
    operator = OperatorMetrics()
    AdmissionMetrics(operator.registry)
    suffix = {"counter": "_total", "gauge": "", "histogram": ""}
    names = {
        metric.name + suffix[metric.type]
        for registry in (operator.registry, AgentMetrics().registry)
        for metric in registry.collect()
    }
    page = metrics_page()
    assert {
        "wcow_reconcile_total",
        "wcow_admission_refused_total",
        "wcow_agent_applies_total",
    } <= names
    assert [name for name in sorted(names) if f"| `{name}` |" not in page] == []
    assert "| `wcow_rollout_nodes` | gauge | `state` |" in page
