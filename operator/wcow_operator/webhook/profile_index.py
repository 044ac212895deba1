"""The profiles the webhook judges pods by, from the controller's watch-fed cache."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_contract.v1alpha1 import WindowsRuntimeProfile


class ProfileIndex:
    """Valid profiles by RuntimeClass name, parsed once per resourceVersion. A profile whose
    spec turned invalid keeps being judged by its last valid spec, as its RuntimeClass and plan
    entry keep their last good state (the operator reports it Valid=False); one that was never
    valid while this replica ran (it restarted since) cannot be judged: its pods pass unchanged,
    with a warning. ``classes`` names every profile, valid or not, so the webhook
    configurations do not depend on what a replica happens to remember."""

    def __init__(self, source: Callable[[], Iterable[dict[str, Any]]]) -> None:
        self._source = source
        self._lock = threading.Lock()
        self._key: tuple[tuple[str, str], ...] = ()
        self._profiles: dict[str, WindowsRuntimeProfile] = {}
        self._last_valid: dict[str, WindowsRuntimeProfile] = {}  # by uid
        self._names: tuple[str, ...] = ()

    def current(self) -> dict[str, WindowsRuntimeProfile]:
        bodies = list(self._source())
        key = tuple(
            sorted(
                (str(b["metadata"]["name"]), str(b["metadata"].get("resourceVersion", "")))
                for b in bodies
            )
        )
        with self._lock:
            if key == self._key:
                return self._profiles
        parsed: dict[str, WindowsRuntimeProfile] = {}
        valid: dict[str, WindowsRuntimeProfile] = {}
        names: list[str] = []
        for body in bodies:
            metadata = body.get("metadata") or {}
            if metadata.get("deletionTimestamp"):
                continue
            names.append(str(metadata.get("name", "")))
            uid = str(metadata.get("uid", ""))
            try:
                profile = parse_profile(body)
            except ProfileInvalidError:
                last_good = self._last_valid.get(uid)
                if last_good is None:
                    continue
                profile = last_good
            valid[uid] = profile
            parsed[profile.name] = profile
        with self._lock:
            self._key, self._profiles, self._last_valid = key, parsed, valid
            self._names = tuple(sorted(names))
        return parsed

    def classes(self) -> tuple[str, ...]:
        """Every profile's RuntimeClass (a profile's class has its name), valid or not."""
        self.current()
        with self._lock:
            return self._names
