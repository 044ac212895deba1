"""Any string a profile may hold comes back out of the TOML and YAML exactly as it went in,
and never adds a key, table or document (property tests)."""

from __future__ import annotations

import json
import tomllib
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import profile_document
from wcow_contract.catalog.annotation_patterns import pattern_problem
from wcow_contract.catalog.runhcs_options import NCPROXY_PIPE_PATTERN, default_annotations_problem
from wcow_contract.errors import parse_profile
from wcow_contract.v1alpha1 import IMAGE_REFERENCE_PATTERN, RUNTIME_PATH_PATTERN
from wcow_operator.render.configmaps import plan_config_map
from wcow_operator.render.profile_set import render_all
from wcow_operator.render.serialize import dump_yaml_documents

# Everything UTF-8 can carry (no lone surrogates), including quotes, newlines, `]]`, NUL.
text = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40)
hostile = st.one_of(
    text,
    st.sampled_from(
        [
            '"',
            "'''",
            '"""',
            "]]",
            "[x]\nversion = 1",
            "a\nb = 1",
            "\\",
            "#",
            "\x00",
            "\u2028",
            "---\nkind: Secret",
            "{{ x }}",
            "${X}",
            "\ufeff",
            "é\U0001f600",
            'key = "v"\n[t]',
        ]
    ),
)

# Annotation patterns are not free text: only globs some Kubernetes annotation key can match
# are accepted (tests/unit/test_honest_fields.py). These are valid ones with every glob
# construct, escapes and classes included.
_glob_part = st.lists(
    st.sampled_from(
        ["io", "Microsoft", "0", ".", "-", "_", "*", "?", "[a-z]", "[^\\-]", "\\x", "[\\]a]"]
    ),
    min_size=1,
    max_size=8,
).map("".join)
patterns = st.one_of(
    _glob_part,
    st.tuples(st.sampled_from(["example.com/", "a-b.c/", "*/", "?.io/"]), _glob_part).map("".join),
).filter(lambda pattern: pattern_problem(pattern) is None)


# Paths, pipes and images are not free text either (what containerd and hcsshim would run or
# dial: tests/unit/test_node_safety.py); these are every shape the model accepts.
paths = st.from_regex(RUNTIME_PATH_PATTERN, fullmatch=True)
pipes = st.from_regex(NCPROXY_PIPE_PATTERN, fullmatch=True)
images = st.from_regex(IMAGE_REFERENCE_PATTERN, fullmatch=True).filter(lambda i: len(i) <= 512)
keys = st.one_of(hostile, st.just("")).filter(
    lambda key: default_annotations_problem({key: ""}) is None
)


def _profile(image: str, pattern: str, key: str, value: str, path: str, addr: str) -> Any:
    return parse_profile(
        profile_document(
            "hostile",
            annotations={"pod": [pattern], "container": [pattern, pattern.upper()]},
            containerd={
                "runtimePath": path,
                "options": {"DefaultContainerAnnotations": {key: value}, "NCProxyAddr": addr},
            },
            canary={"image": image},
        )
    )


@settings(max_examples=150, deadline=None)
@given(image=images, pattern=patterns, key=keys, value=hostile, path=paths, addr=pipes)
def test_free_text_round_trips_through_toml(
    image: str, pattern: str, key: str, value: str, path: str, addr: str
) -> None:
    rendered = render_all([_profile(image, pattern, key, value, path, addr)])
    for version, document in rendered.containerd_toml.items():
        parsed = tomllib.loads(document)
        assert set(parsed) == {"version", "plugins"}
        assert parsed["version"] == version
        (plugin,) = parsed["plugins"].values()
        assert list(plugin) == ["containerd"]
        assert list(plugin["containerd"]) == ["runtimes"]
        assert list(plugin["containerd"]["runtimes"]) == ["hostile"]
        table = plugin["containerd"]["runtimes"]["hostile"]
        assert set(table) == {
            "runtime_type",
            "runtime_path",
            "pod_annotations",
            "container_annotations",
            "options",
        }
        assert table["runtime_path"] == path
        assert table["pod_annotations"] == [pattern]
        assert table["container_annotations"] == [pattern, pattern.upper()]
        options = table["options"]
        assert options["NCProxyAddr"] == addr
        assert options["DefaultContainerAnnotations"] == {key: value}
        assert len(options) == 7


@settings(max_examples=150, deadline=None)
@given(image=images, pattern=patterns, key=keys, value=hostile, path=paths, addr=pipes)
def test_free_text_round_trips_through_yaml_and_the_plan(
    image: str, pattern: str, key: str, value: str, path: str, addr: str
) -> None:
    rendered = render_all([_profile(image, pattern, key, value, path, addr)])
    documents = [*rendered.runtime_classes, plan_config_map(rendered.plan, "wcow-system")]
    text = dump_yaml_documents(documents)
    loaded = list(yaml.safe_load_all(text))
    assert loaded == documents  # same documents, same keys, same values
    plan = json.loads(loaded[-1]["data"]["plan.json"])
    assert plan == rendered.plan.document()
    runtime = plan["handlers"]["hostile"]["runtime"]
    assert runtime["runtime_path"] == path
    assert runtime["options"]["NCProxyAddr"] == addr
    assert runtime["options"]["DefaultContainerAnnotations"] == {key: value}
    assert plan["handlers"]["hostile"]["canary"]["image"] == image
