"""The watch-fed cache and the informer loop: what a pass reads when the watches lag, expire
or race the controller's own writes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from wcow_contract.catalog.windows_builds import WINDOWS_BUILD_LABEL, parse_windows_build
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION
from wcow_operator.controller.cache import ClusterCache
from wcow_operator.controller.cluster_api import Page, Watched, WatchExpiredError
from wcow_operator.controller.informer import run_informer
from wcow_operator.reconcile.model import ObservedNode
from wcow_operator.reconcile.nodes import HandlerNeeds, NodeTally, contribution, summarize

PLAN = "wcow-runtime-plan"


def obj(name: str, version: int, **fields: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(version)}, **fields}


def node(
    name: str,
    version: int = 1,
    labels: dict[str, str] | None = None,
    report: dict[str, Any] | None = None,
) -> dict[str, Any]:
    annotations = {} if report is None else {AGENT_STATUS_ANNOTATION: json.dumps(report)}
    return {
        "metadata": {
            "name": name,
            "resourceVersion": str(version),
            "labels": {
                "kubernetes.io/os": "windows",
                WINDOWS_BUILD_LABEL: "10.0.20348",
                **(labels or {}),
            },
            "annotations": annotations,
        }
    }


def report(build: str = "10.0.20348", hyperv: bool = True, **handlers: str) -> dict[str, Any]:
    return {
        "hostBuild": build,
        "hypervAvailable": hyperv,
        "appliedPlanHash": "sha256:current",
        "handlers": {h: {"state": s, "reason": f"R{s}"} for h, s in handlers.items()},
    }


def synced_cache() -> tuple[ClusterCache, list[int]]:
    triggers: list[int] = []
    cache = ClusterCache(on_change=lambda: triggers.append(1))
    for kind in ("profiles", "runtimeclasses", "plan", "rollout", "nodes"):
        cache.replace(kind, [])  # type: ignore[arg-type]
    triggers.clear()
    return cache, triggers


def test_not_synced_until_every_collection_was_listed() -> None:
    cache = ClusterCache()
    for kind in ("profiles", "runtimeclasses", "plan", "rollout"):
        cache.replace(kind, [])  # type: ignore[arg-type]
        assert not cache.synced()
    cache.replace("nodes", [])
    assert cache.synced()


def test_node_changes_matter_only_for_agent_reports_and_ready_labels() -> None:
    cache, triggers = synced_cache()
    cache.apply("nodes", "ADDED", node("n1", 1))
    assert len(triggers) == 1
    heartbeat = node("n1", 2)
    heartbeat["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"] = "0"
    heartbeat["metadata"]["labels"]["example.com/pool"] = "a"
    cache.apply("nodes", "MODIFIED", heartbeat)
    assert len(triggers) == 1  # nothing the controller reads
    cache.apply("nodes", "MODIFIED", node("n1", 3, labels={"runtime.wcow.dev/hv": "ready"}))
    assert len(triggers) == 2
    cache.apply(
        "nodes",
        "MODIFIED",
        node("n1", 4, labels={"runtime.wcow.dev/hv": "ready"}, report=report(hv="Ready")),
    )
    assert len(triggers) == 3
    cache.apply("nodes", "DELETED", node("n1", 5))
    assert len(triggers) == 4
    assert cache.observe(PLAN).tally is not None
    assert cache.observe(PLAN).tally.summary("hv").eligible == 0  # type: ignore[union-attr]


def test_a_write_is_not_undone_by_a_watch_event_from_before_it() -> None:
    """The controller patched a status (the server answered with version 7) while the watch
    was still delivering version 5: the old event must not put the old status back."""
    cache, _ = synced_cache()
    cache.apply("profiles", "ADDED", obj("hv", 5, status={"handler": "old"}))
    cache.wrote("profiles", obj("hv", 7, status={"handler": "new"}))
    cache.apply("profiles", "MODIFIED", obj("hv", 6, status={"handler": "old"}))  # stale
    assert cache.observe(PLAN).profiles[0].status == {"handler": "new"}
    cache.apply("profiles", "MODIFIED", obj("hv", 7, status={"handler": "new"}))  # caught up
    cache.apply("profiles", "MODIFIED", obj("hv", 9, status={"handler": "someone"}))
    assert cache.observe(PLAN).profiles[0].status == {"handler": "someone"}


def test_a_relist_after_a_watch_gap_is_the_truth() -> None:
    """Events lost while the watch was down (a deletion, a new object) are healed by the
    relist, including objects the controller itself wrote."""
    cache, triggers = synced_cache()
    cache.apply("runtimeclasses", "ADDED", obj("gone", 3))
    cache.wrote("runtimeclasses", obj("mine", 10))
    cache.replace("runtimeclasses", [obj("mine", 8), obj("new", 9)])
    assert sorted(cache.observe(PLAN).runtime_classes) == ["mine", "new"]
    assert triggers
    # The relist cleared the write floor: later events at any version apply.
    cache.apply("runtimeclasses", "MODIFIED", obj("mine", 9, handler="x"))
    assert cache.observe(PLAN).runtime_classes["mine"]["handler"] == "x"


def test_deleted_objects_leave_the_cache() -> None:
    cache, _ = synced_cache()
    cache.apply("plan", "ADDED", obj(PLAN, 1, data={"plan.json": "{}"}))
    assert cache.observe(PLAN).plan_config_map is not None
    cache.apply("plan", "DELETED", obj(PLAN, 2))
    assert cache.observe(PLAN).plan_config_map is None


# --- the per-handler tally, node by node ---------------------------------------------------

states = st.sampled_from(["Ready", "Failed", "Pending", "NotEligible", "Conflict"])
BUILDS = ["10.0.17763", "10.0.20348", "10.0.26100"]
node_updates = st.lists(
    st.tuples(
        st.sampled_from([f"n{i}" for i in range(6)]),
        st.one_of(
            st.none(),  # node deleted
            st.tuples(
                st.dictionaries(st.sampled_from(["a", "b", "c"]), states, max_size=3),
                st.sets(st.sampled_from(["a", "b", "c"])),
                st.booleans(),  # has an agent report at all
                st.sampled_from(BUILDS),  # the kubelet's build label
                st.sampled_from(BUILDS),  # the build the agent reports
                st.booleans(),  # Hyper-V, by the agent
            ),
        ),
    ),
    max_size=40,
)
NEEDS = [
    None,
    HandlerNeeds("HyperV", parse_windows_build("ltsc2022"), "sha256:current"),
    HandlerNeeds("Process", parse_windows_build("ltsc2019"), "sha256:current"),
    HandlerNeeds("HyperV", parse_windows_build("ltsc2025"), "sha256:older"),
]


@given(node_updates)
@settings(max_examples=150, deadline=None)
def test_incremental_counts_equal_counting_from_scratch(
    updates: list[tuple[str, tuple[dict[str, str], set[str], bool, str, str, bool] | None]],
) -> None:
    cache, _ = synced_cache()
    current: dict[str, ObservedNode] = {}
    for version, (name, change) in enumerate(updates, start=1):
        if change is None:
            cache.apply("nodes", "DELETED", node(name, version))
            current.pop(name, None)
            continue
        handlers, ready, has_agent, label, reported, hyperv = change
        body = node(
            name,
            version,
            labels={f"runtime.wcow.dev/{h}": "ready" for h in ready} | {WINDOWS_BUILD_LABEL: label},
            report=report(reported, hyperv, **handlers) if has_agent else None,
        )
        cache.apply("nodes", "MODIFIED", body)
        meta = body["metadata"]
        current[name] = ObservedNode(
            name,
            {k: v for k, v in meta["labels"].items() if k.startswith("runtime.wcow.dev/")},
            meta["annotations"].get(AGENT_STATUS_ANNOTATION),
            label,
        )
    tally = cache.observe(PLAN).tally
    assert tally is not None
    for handler in ("a", "b", "c"):
        for needs in NEEDS:
            assert tally.summary(handler, needs) == summarize(handler, current.values(), needs)


def test_failures_listed_are_the_first_by_node_name() -> None:
    tally = NodeTally()
    for index in reversed(range(8)):
        failed = ObservedNode(f"n{index}", {}, json.dumps(report(hv="Failed")), "10.0.20348")
        tally.add(failed.name, contribution(failed))
    summary = tally.summary("hv")
    assert summary.failed == 8
    assert [f.node for f in summary.failures] == ["n0", "n1", "n2", "n3", "n4"]


# --- the informer loop ---------------------------------------------------------------------


class FakeTransport:
    """Pages and watch streams scripted per call; records what was asked."""

    def __init__(self, pages: list[list[Page]], watches: list[list[dict[str, Any] | Exception]]):
        self.pages = pages
        self.watches = watches
        self.lists = 0
        self.watched_from: list[str] = []
        self.page_tokens: list[str | None] = []
        self.done = threading.Event()

    def list_page(self, watched: Watched, continue_token: str | None, limit: int) -> Page:
        self.page_tokens.append(continue_token)
        if continue_token is None:
            self.lists += 1
            self._listing = iter(self.pages.pop(0))
        return next(self._listing)

    def watch(
        self, watched: Watched, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        self.watched_from.append(resource_version)
        if not self.watches:
            self.done.set()
            threading.Event().wait(0.05)
            return
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item


WATCHED = Watched("runtimeclasses", "/apis/node.k8s.io/v1/runtimeclasses", "runtimeclasses")


def run_until_done(transport: FakeTransport, cache: ClusterCache) -> None:
    stop = threading.Event()
    thread = threading.Thread(
        target=run_informer,
        args=(transport, WATCHED, cache, stop),
        kwargs={"retry_seconds": 0.01},
    )
    thread.start()
    assert transport.done.wait(5)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()


def test_informer_pages_then_resumes_watches_without_listing_again() -> None:
    transport = FakeTransport(
        pages=[[Page([obj("a", 1)], "10", "next"), Page([obj("b", 2)], "10", None)]],
        watches=[
            [{"type": "ADDED", "object": obj("c", 11)}],
            [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}],
            [{"type": "DELETED", "object": obj("a", 16)}],
        ],
    )
    cache = ClusterCache()
    run_until_done(transport, cache)
    assert transport.lists == 1
    assert transport.page_tokens == [None, "next"]
    # Each watch resumes where the last ended: a bookmark moves the version on.
    assert transport.watched_from[:4] == ["10", "11", "15", "16"]
    assert sorted(cache.observe(PLAN).runtime_classes) == ["b", "c"]


def test_informer_lists_again_when_the_watch_expired() -> None:
    transport = FakeTransport(
        pages=[[Page([obj("a", 1)], "10", None)], [Page([obj("b", 30)], "30", None)]],
        watches=[[WatchExpiredError("too old resource version: 10 (25)")]],
    )
    cache = ClusterCache()
    run_until_done(transport, cache)
    assert transport.lists == 2
    assert transport.watched_from[:2] == ["10", "30"]
    assert sorted(cache.observe(PLAN).runtime_classes) == ["b"]  # "a" was deleted meanwhile


def test_informer_resumes_after_a_broken_connection_without_listing() -> None:
    transport = FakeTransport(
        pages=[[Page([], "10", None)]],
        watches=[
            [{"type": "ADDED", "object": obj("a", 11)}, ConnectionResetError("reset")],
            [{"type": "ADDED", "object": obj("b", 12)}],
        ],
    )
    cache = ClusterCache()
    run_until_done(transport, cache)
    assert transport.lists == 1
    assert transport.watched_from[:2] == ["10", "11"]  # resumed where it broke
    assert sorted(cache.observe(PLAN).runtime_classes) == ["a", "b"]


def test_a_changed_agent_report_asks_for_the_rollout_decision_at_once() -> None:
    """Only a node's report (what the rollout reads) hands a slot over at once; labels and
    heartbeats do not."""
    cache, _ = synced_cache()
    reported: list[int] = []
    cache.on_report = lambda: reported.append(1)
    cache.apply("nodes", "ADDED", node("n1", 1, report=report(hv="Pending")))
    assert len(reported) == 1
    labelled = node("n1", 2, labels={"runtime.wcow.dev/hv": "ready"}, report=report(hv="Pending"))
    cache.apply("nodes", "MODIFIED", labelled)
    assert len(reported) == 1  # the same report: no hand-over
    done = node("n1", 3, labels={"runtime.wcow.dev/hv": "ready"}, report=report(hv="Ready"))
    cache.apply("nodes", "MODIFIED", done)
    assert len(reported) == 2
    cache.apply("nodes", "DELETED", node("n1", 4))
    assert len(reported) == 3  # a deleted node frees its slot too
