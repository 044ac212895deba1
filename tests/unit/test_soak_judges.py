"""The soak's judges (benchmarks/soak_parts.py): what counts as an error in a log, a failed
admission, an apply without the rollout's permission. Each figure the soak prints is one of
these over what it recorded."""

from __future__ import annotations

import datetime
from pathlib import Path

from benchmarks.soak import longest
from benchmarks.soak_parts import Incarnation, failed_admissions, log_errors, unpermitted

from tests.fleet.paced import Window


def _at(text: str) -> float:
    return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S").timestamp()


def test_log_errors_counts_error_records_and_stray_tracebacks_once(tmp_path: Path) -> None:
    log = tmp_path / "soak-a.1.log"
    log.write_text(
        "2026-11-27 19:00:00,001 INFO wcow_operator.main started\n"
        "2026-11-27 19:00:01,002 ERROR wcow_operator.controller pass failed\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "urllib3.exceptions.MaxRetryError: Connection refused\n"
        "2026-11-27 19:00:02,003 WARNING wcow_operator.k8s retrying\n"
        "Traceback (most recent call last):\n"
        '  File "y.py", line 2, in run\n'
        "KeyError: 'x'\n"
        "2026-11-27 19:00:03,004 INFO wcow_operator.main fine\n"
    )
    found = log_errors(log)
    assert [(e.time, e.text.rsplit(" | ", 1)[-1]) for e in found] == [
        (_at("2026-11-27 19:00:01"), "urllib3.exceptions.MaxRetryError: Connection refused"),
        (_at("2026-11-27 19:00:02"), "KeyError: 'x'"),
    ]
    assert found[0].text.startswith("2026-11-27 19:00:01,002 ERROR wcow_operator.controller")


def test_a_failed_admission_is_excused_only_inside_an_outage_and_never_unsized() -> None:
    outages = [(100.0, 120.0)]
    outcomes = [
        (90.0, 91.0, "sized"),
        (99.0, 101.0, "no answer: MaxRetryError"),  # overlaps the outage
        (119.0, 125.0, "500 Internal error"),  # overlaps its end
        (130.0, 131.0, "500 failed calling webhook"),  # after: counted
        (110.0, 111.0, "unsized"),  # admitted without the webhook: never excused
    ]
    assert failed_admissions(outcomes, outages) == [
        (130.0, "500 failed calling webhook"),
        (110.0, "unsized"),
    ]


def test_an_apply_is_permitted_when_a_rollout_around_it_names_its_node() -> None:
    versions = [
        (10.0, frozenset({"a"})),
        (50.0, frozenset({"a", "b"})),
        (53.0, frozenset({"b"})),
    ]
    windows = [
        Window("b", 51.0, 52.0),  # let in at 50
        Window("a", 30.0, 31.0),  # the version in force since 10 names it
        Window("c", 52.0, 53.0),  # nobody ever let c in
        Window("a", 70.0, 71.0),  # a was let go at 53: applying again at 70 is not allowed
    ]
    assert unpermitted(windows, versions) == [windows[2], windows[3]]


def test_the_figures_are_of_the_replica_that_ran_longest_the_leader_on_a_tie() -> None:
    def ran(identity: str, started: float, last: float) -> Incarnation:
        samples = [(t, 90.0, 19, 18) for t in range(int(started), int(last) + 1, 15)]
        return Incarnation("slot", identity, None, 0, started, None, None, samples)  # type: ignore[arg-type]

    history = [ran("a-1", 0, 600), ran("b-1", 5, 610), ran("a-2", 300, 610)]
    # Warm-up: 120 s after the soak's start (100) or the replica's, whichever is later.
    assert longest(history, 100.0, 120.0, holder="b-1").identity == "b-1"
    assert longest(history, 100.0, 120.0, holder="a-1").identity == "a-1"  # same minutes
    chosen = longest(history, 100.0, 120.0, holder=None)
    assert chosen is not None
    assert chosen.samples[0][0] >= 220  # from the warm-up on
    assert longest([ran("c-1", 500, 610)], 100.0, 120.0, holder="c-1") is None
