"""The one retry/backoff helper both binaries use."""

from __future__ import annotations

import itertools

import pytest

from wcow_support.retry import NO_DELAY, Backoff, retry


def test_delays_grow_to_their_cap_and_start_again_from_a_fresh_sequence() -> None:
    backoff = Backoff(initial=1, maximum=60)
    assert list(itertools.islice(backoff.delays(), 8)) == [1, 2, 4, 8, 16, 32, 60, 60]
    assert next(backoff.delays()) == 1
    assert list(itertools.islice(Backoff(5, 5, factor=1).delays(), 3)) == [5, 5, 5]


def test_jitter_spreads_each_delay_within_its_bounds() -> None:
    delays = list(itertools.islice(Backoff(0.5, 8, jitter=0.2).delays(), 200))
    caps = [min(0.5 * 2**n, 8) for n in range(200)]
    assert all(0.8 * cap <= d <= 1.2 * cap for d, cap in zip(delays, caps, strict=True))
    assert len({round(d, 6) for d in delays[10:]}) > 1  # spread, not one value


@pytest.mark.parametrize(
    "policy",
    [{"initial": -1}, {"initial": 2, "maximum": 1}, {"factor": 0.5}, {"jitter": 1.0}],
)
def test_a_policy_that_is_no_backoff_is_refused(policy: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="not a backoff"):
        Backoff(**policy)


class Flaky:
    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def test_retryable_errors_are_retried_with_the_backoffs_delays() -> None:
    sleeps: list[float] = []
    told: list[tuple[int, str, float]] = []
    call = Flaky(OSError("a"), OSError("b"))
    result = retry(
        call,
        attempts=4,
        backoff=Backoff(0.5, 8),
        retryable=lambda e: isinstance(e, OSError),
        on_retry=lambda n, e, w: told.append((n, str(e), w)),
        sleep=sleeps.append,
    )
    assert result == "done"
    assert call.calls == 3
    assert sleeps == [0.5, 1.0]
    assert told == [(2, "a", 0.5), (3, "b", 1.0)]


def test_the_servers_hint_replaces_the_delay_but_the_sequence_moves_on() -> None:
    sleeps: list[float] = []
    hints = iter([3.0, None])
    retry(
        Flaky(OSError(), OSError()),
        attempts=3,
        backoff=Backoff(0.5, 8),
        retryable=lambda _e: True,
        wait_hint=lambda _e: next(hints),
        sleep=sleeps.append,
    )
    assert sleeps == [3.0, 1.0]


def test_an_error_not_worth_retrying_is_raised_at_once() -> None:
    sleeps: list[float] = []
    call = Flaky(KeyError("no"))
    with pytest.raises(KeyError):
        retry(call, attempts=4, backoff=NO_DELAY, retryable=lambda e: isinstance(e, OSError),
              sleep=sleeps.append)  # fmt: skip
    assert (call.calls, sleeps) == (1, [])


def test_the_last_error_is_raised_after_the_last_attempt() -> None:
    sleeps: list[float] = []
    call = Flaky(*(OSError(str(n)) for n in range(10)))
    with pytest.raises(OSError, match=r"^3$"):
        retry(call, attempts=4, backoff=NO_DELAY, retryable=lambda _e: True, sleep=sleeps.append)
    assert (call.calls, sleeps) == (4, [0.0, 0.0, 0.0])


def test_without_a_sleep_of_its_own_it_uses_time_sleep_as_patched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)
    retry(Flaky(OSError()), attempts=2, backoff=Backoff(0.25, 1), retryable=lambda _e: True)
    assert sleeps == [0.25]


def test_no_attempt_at_all_is_a_mistake() -> None:
    with pytest.raises(ValueError, match="at least one attempt"):
        retry(lambda: None, attempts=0, backoff=NO_DELAY, retryable=lambda _e: True)
