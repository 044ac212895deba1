"""The model and the API server judge every profile alike, both ways.

Hypothesis generates profiles near the edges of validity (tests/e2e/profile_strategies.py);
each goes to the real API server as a server-side dry-run create, with strict field
validation as `kubectl apply` sends it, and through the model as `wcow validate` judges it
(parse, then render). A profile one side accepts and the other refuses is a failure that
prints the profile and both verdicts: either a GitOps pipeline goes green on `wcow validate`
and then `kubectl apply` fails, or the server stores what the operator will refuse.

Two kinds of refusal are the operator's alone, and only those are let through:
- an annotation glob with a character class or an escape ('[', '\\') that no annotation key
  can match. Whether one can is a search through the glob
  (contract/wcow_contract/catalog/annotation_patterns.py) that no regular expression of a
  reasonable size decides, so the CRD checks the globs without either exactly;
- an overhead quantity above 2^63-1 (``1e20000000``, ``10E``): the CRD's pattern and length
  bound apply, but a value bound needs CEL's quantity library, which CRD rules on the oldest
  supported Kubernetes (1.28) lack.
The operator refuses both (Valid=False, naming the field and the value).

The seed is fixed and nothing is remembered between runs, so every run sends the same
profiles.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.operator_harness import GROUP, PLURAL, VERSION, installed_crd
from tests.e2e.profile_strategies import profiles
from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_contract.quantity import QuantityError, parse_quantity
from wcow_operator.render.profile_set import render_all

pytestmark = pytest.mark.e2e

BATCH = 16  # profiles per example, sent to the server at once
EXAMPLES = 250  # 4,000 profiles: about a minute on two cores at rest


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    why: str = ""
    problems: tuple[tuple[str, Any], ...] = ()  # the model's: (field, value)


@pytest.fixture(scope="module")
def custom(kube: client.ApiClient) -> Iterator[client.CustomObjectsApi]:
    with installed_crd(kube):
        yield client.CustomObjectsApi(kube)


@pytest.fixture(scope="module")
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8) as executor:  # the client keeps 10 connections
        yield executor


def server_verdict(custom: client.CustomObjectsApi, document: dict[str, Any]) -> Verdict:
    try:
        custom.create_cluster_custom_object(
            GROUP, VERSION, PLURAL, document, dry_run="All", field_validation="Strict"
        )
    except ApiException as error:
        if error.status not in (400, 422):  # 400: not decodable or unknown fields; 422: invalid
            raise
        return Verdict(False, str(json.loads(error.body or "{}").get("message", error.body)))
    return Verdict(True)


def model_verdict(document: dict[str, Any]) -> Verdict:
    try:
        render_all([parse_profile(document)])
    except ProfileInvalidError as invalid:
        return Verdict(
            False,
            str(invalid),
            tuple((problem.field, problem.value) for problem in invalid.problems),
        )
    return Verdict(True)


def _operator_only(server: Verdict, model: Verdict) -> bool:
    """The two refusals the server cannot make: an unmatchable glob with '[' or '\\', and a
    quantity above 2^63-1."""
    return (
        server.accepted
        and bool(model.problems)
        and all(
            _unmatchable_glob(field, value) or _huge_quantity(field, value)
            for field, value in model.problems
        )
    )


def _unmatchable_glob(field: str, value: object) -> bool:
    return (
        field.startswith(("spec.annotations.pod[", "spec.annotations.container["))
        and isinstance(value, str)
        and ("[" in value or "\\" in value)
    )


def _huge_quantity(field: str, value: object) -> bool:
    """A quantity the server's schema cannot bound (no quantity library in CRD rules on
    1.28) and the operator refuses: its value is above 2^63-1."""
    if not field.startswith("spec.overhead.podFixed."):
        return False
    try:
        parse_quantity(value)
    except QuantityError as error:
        return "above 2^63-1" in str(error)
    return False


def _report(document: dict[str, Any], server: Verdict, model: Verdict) -> str:
    def verdict(which: Verdict) -> str:
        return "accepts" if which.accepted else f"refuses: {which.why:.600}"

    return (
        f"{json.dumps(document, ensure_ascii=True)}\n"
        f"  API server {verdict(server)}\n  model      {verdict(model)}"
    )


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    phases=(Phase.generate, Phase.shrink),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(batch=st.lists(profiles(), min_size=BATCH, max_size=BATCH))
def test_model_and_api_server_agree_on_every_profile(
    custom: client.CustomObjectsApi, pool: ThreadPoolExecutor, batch: list[dict[str, Any]]
) -> None:
    # JSON round trip: what the server receives is what the model judges (no tuples, no
    # shared sub-objects).
    documents = [json.loads(json.dumps(document)) for document in batch]
    servers = list(pool.map(lambda document: server_verdict(custom, document), documents))
    disagreements = [
        _report(document, server, model)
        for document, server in zip(documents, servers, strict=True)
        for model in [model_verdict(document)]
        if server.accepted != model.accepted and not _operator_only(server, model)
    ]
    assert not disagreements, "the model and the API server disagree on:\n" + "\n".join(
        disagreements
    )
