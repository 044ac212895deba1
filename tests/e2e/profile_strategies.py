"""Hypothesis strategies for WindowsRuntimeProfile documents near the edges of validity.

Every field is mostly a value the model should accept (bounds included) and now and then a
value just past a bound or of the wrong type: strings for numbers and booleans, floats for
integers, null, empty objects, lists where a map belongs, integers past int64, hostile text;
unknown keys turn up beside known ones. The documents are judged twice, by the API server
and by the model, and the verdicts compared, so they are not filtered for validity.

Each choice shrinks towards the good value and towards fewer fields, so a disagreement
shrinks to the one field that causes it.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from wcow_contract.catalog import runhcs_options
from wcow_contract.catalog.windows_builds import BUILD_ALIASES
from wcow_contract.v1alpha1 import API_VERSION, KIND

INT64_MAX = 2**63 - 1

# What any field may get instead of its value: the types and shapes people (and YAML) get
# wrong. 2**53 + 1 and 2**63 sit on the edges of JSON's exact integers and of int64.
WRONG = st.sampled_from(
    [
        *(None, "", "yes", "true", "1", "2", 1.0, 2.5, True, False, 0, -1),
        *([], {}, ["a"], {"x": 1}, 2**53 + 1, 2**63, -(2**63) - 1, "\x00", "é", " 1"),
    ]
)
# Text nobody should trust: quotes, newlines, NUL, a BOM, YAML and TOML syntax.
HOSTILE = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
    st.sampled_from(['"', "a\nb", "]]", "\\", "\x00", "\u2028", "\ufeff", "---", "${X}", "é😀"]),
)
_ABSENT = object()


def sometimes(usual: st.SearchStrategy[Any], rare: st.SearchStrategy[Any], one_in: int = 6) -> Any:
    """``usual``, and once in ``one_in`` draws ``rare`` (shrinking goes to ``usual``)."""
    return st.tuples(st.integers(1, one_in), usual, rare).map(
        lambda drawn: drawn[2] if drawn[0] == one_in else drawn[1]
    )


def field(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any] | None = None) -> Any:
    """A field's value: ``good``, sometimes ``bad`` (near misses), sometimes a wrong type."""
    rare = WRONG if bad is None else st.one_of(bad, WRONG)
    return sometimes(good, rare, 10)


def integers(low: int, high: int) -> st.SearchStrategy[Any]:
    """In ``low..high`` (edges included); past the edges, or as strings and floats."""
    good = st.one_of(st.sampled_from([low, high]), st.integers(low, high))
    bad = st.one_of(
        st.sampled_from([low - 1, high + 1]),
        good.map(str),
        good.map(float),
        good.map(lambda number: number + 0.5),
    )
    return field(good, bad)


def booleans() -> st.SearchStrategy[Any]:
    return field(st.booleans(), st.sampled_from(["yes", "no", "true", "false", "on", 1, 0, "1"]))


def names_of(*values: str) -> st.SearchStrategy[Any]:
    """An enum: its values; their other casings."""
    casings = {variant for value in values for variant in (value.lower(), value.upper())}
    return field(st.sampled_from(values), st.sampled_from(sorted(casings - set(values)) or ["X"]))


def strings(max_length: int, good: list[str], *, free: bool = True) -> st.SearchStrategy[Any]:
    """Text: good examples, and for ``free`` text one at the length bound; past the bound,
    or hostile."""
    at_bound = "a" * max_length
    bad = st.one_of(st.just(at_bound + "a"), HOSTILE)
    return field(st.sampled_from([*good, at_bound] if free else good), bad)


def objects(
    often: dict[str, st.SearchStrategy[Any]],
    sometimes_present: dict[str, st.SearchStrategy[Any]] | None = None,
) -> st.SearchStrategy[Any]:
    """An object: ``often`` fields are mostly there, the others half the time; now and then
    a misspelt key beside them, or a wrong shape for the whole object."""
    keys = [*often, *(sometimes_present or {})]
    misspelt = [*sorted({key.lower() for key in keys} - set(keys)), "extra"]
    present = {name: sometimes(value, st.just(_ABSENT), 12) for name, value in often.items()}
    body = st.fixed_dictionaries(present, optional=sometimes_present or {}).map(
        lambda drawn: {key: value for key, value in drawn.items() if value is not _ABSENT}
    )
    # One draw of the body whatever comes of it: drawing it twice would double the work at
    # every level of nesting.
    return st.tuples(st.integers(1, 10), body, st.sampled_from(misspelt), WRONG).map(_deform)


def _deform(drawn: tuple[int, dict[str, Any], str, Any]) -> Any:
    choice, body, misspelt, wrong = drawn
    if choice == 10:
        return wrong
    if choice == 9:
        return {**body, misspelt: 1}
    return body


def maps(keys: st.SearchStrategy[Any], values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return field(st.dictionaries(keys, values, max_size=3))


def lists(items: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return field(st.lists(items, max_size=3))


# ---- the values of particular fields ----

_GOOD_LABEL_KEYS = [
    *("example.com/pool", "pool", "node.kubernetes.io/windows-build", "a" * 63),
    f"{'a' * 253}/{'b' * 63}",
]
_BAD_LABEL_KEYS = [
    *("kubernetes.io/os", "kubernetes.io/arch", "runtime.wcow.dev/x"),  # managed or fixed
    *("a" * 64, f"{'a' * 253}/b", f"{'a' * 254}/b", "Example.com/x", "a/b/c", "/x", "x/"),
    *("-x", "x_y", "x y", ""),
]
label_keys = sometimes(
    st.sampled_from(_GOOD_LABEL_KEYS), st.one_of(st.sampled_from(_BAD_LABEL_KEYS), HOSTILE), 3
)
_GOOD_LABEL_VALUES = ["windows", "amd64", "10.0.20348", "", "a" * 63, "x_y.z"]
label_values = field(
    st.sampled_from(_GOOD_LABEL_VALUES),
    st.one_of(st.sampled_from(["arm64", "10.0.17763", "a" * 64, "-x", "a b"]), HOSTILE),
)

windows_builds = field(
    st.sampled_from([*sorted(BUILD_ALIASES), "10.0.20348", "10.0.14393", "10.0.99999"]),
    st.sampled_from(
        [
            *("10.0.14392", "10.0.00001", "10.0.2034", "10.0.20348.1", "LTSC2022", "Ltsc2022"),
            *("21H1", "22h2", "ltsc2022 ", "ltsc2022\n"),
        ]
    ),
)

quantities = field(
    st.sampled_from(["100m", "512Mi", "1", "0", "1.5", ".5", "5.", "+1", "1e3", "1E-3", "2Gi"])
    | st.sampled_from([0, 1, 8, 2**53 + 1, INT64_MAX]),
    st.sampled_from(["-1", "1ki", "1 ", "1.2.3", "m", "", "1Mb", "0x10", "1e", "Inf", "1.5e"])
    | st.sampled_from([-1, 0.5, 1.0, 2**63, 10**30])
    # Past 2^63-1 (the server stores them; the operator refuses them, see the test) and
    # past the length bound.
    | st.sampled_from(["1e20000000", "1e999999999", "10E", "9223372036854775808", "1" * 65]),
)

annotation_patterns = lists(
    field(
        st.sampled_from(
            [
                *("io.microsoft.virtualmachine.*", "io.microsoft.container.*", "*", "a" * 63),
                *("io.microsoft.virtualmachine.computetopology.processor.count", "x.io/?[a-z]*"),
            ]
        ),
        st.one_of(
            st.sampled_from(
                ["a/b/c", "containerd.io/snapshot/*", "[", "x y", "-x", "", "a" * 1025]
            ),
            HOSTILE,
        ),
    )
)

_ALLOWED_OPTIONS = sorted(
    name for name, spec in runhcs_options.RUNHCS_OPTIONS.items() if spec.refusal is None
)
_REFUSED_OPTIONS = sorted(set(runhcs_options.RUNHCS_OPTIONS) - set(_ALLOWED_OPTIONS))
_OPTION_VALUES = {
    "BootFilesRootPath": strings(1024, ["C:\\ContainerPlatform"]),
    "NCProxyAddr": field(
        st.sampled_from(["\\\\.\\pipe\\ncproxy", "\\\\.\\pipe\\ncproxy-ttrpc"]),
        st.sampled_from(["\\\\server\\pipe\\ncproxy", "C:\\ncproxy", "\\\\.\\pipe\\", "a" * 1024]),
    ),
    "ScrubLogs": booleans(),
    "DefaultContainerAnnotations": maps(
        st.sampled_from(
            [
                *("io.microsoft.virtualmachine.computetopology.processor.limit", "x"),
                *("microsoft.com/hostprocess-inherit-user", "microsoft.com/hostprocess-x"),
                *("Microsoft.com/hostprocess-inherit-user", "io.microsoft.wcow.processdumptype"),
                "io.microsoft.virtualmachine.kerneldrivers",
            ]
        ),
        field(st.sampled_from(["50000", ""]), HOSTILE),
    ),
}
runhcs_option_maps = sometimes(
    objects({}, _OPTION_VALUES),
    st.dictionaries(
        st.sampled_from([*_REFUSED_OPTIONS, "ncproxyAddr", "scrubLogs", "Unknown"]),
        st.one_of(*_OPTION_VALUES.values()),
        min_size=1,
        max_size=1,
    ),
    4,
)

_LABEL = r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?"
dns_labels = field(
    st.from_regex(_LABEL, fullmatch=True) | st.sampled_from(["a" * 63]),
    st.sampled_from(["a" * 64, "Upper", "a.b", "-a", "a-", ""]),
)

tolerations = objects(
    {"key": label_keys, "operator": names_of("Exists", "Equal")},
    {
        "value": label_values,
        "effect": names_of("NoSchedule", "PreferNoSchedule", "NoExecute"),
        "tolerationSeconds": integers(-(2**63), INT64_MAX),
    },
)

pod_fixed = objects({}, {"cpu": quantities, "memory": quantities})
policies = names_of("None", "Baseline", "WholeVM")

vm = objects(
    {},
    {
        "processorCount": integers(1, 240),
        "memoryMB": integers(256, 1048576),
        "processorLimit": integers(1, 100000),
        "processorWeight": integers(1, 10000),
        "fullyPhysicallyBacked": booleans(),
        "scaleCpuLimitsToSandbox": booleans(),
        "inheritHostTimezone": booleans(),
        "sizing": names_of("Fixed", "FromPodLimits"),
        "maxProcessorCount": integers(1, 240),
        "maxMemoryMB": integers(256, 1048576),
        "oversizedPods": names_of("Refuse", "Warn"),
    },
)

spec = objects(
    {"isolation": names_of("HyperV", "Process"), "windowsBuild": windows_builds},
    {
        "handler": dns_labels,
        "sandbox": sometimes(
            objects(
                {},
                {
                    "platform": field(
                        st.just("windows/amd64"), st.sampled_from(["windows/arm64", "linux/amd64"])
                    )
                },
            ),
            st.sampled_from(
                [{"image": "mcr.microsoft.com/oss/kubernetes/pause:3.9"}, {"image": ""}]
            ),
        ),
        "vm": vm,
        "overhead": objects({}, {"podFixed": pod_fixed})
        | objects({}, {"policy": policies})
        | st.sampled_from([{"podFixed": {"cpu": "1"}, "policy": "None"}]),
        "scheduling": objects(
            {},
            {
                "nodeSelector": maps(label_keys, label_values),
                "tolerations": lists(tolerations),
                "requireReadyLabel": booleans(),
            },
        ),
        "annotations": objects({}, {"pod": annotation_patterns, "container": annotation_patterns}),
        "containerd": objects(
            {},
            {
                "runtimeType": strings(
                    253, ["io.containerd.runhcs.v1", "io.containerd.x_y.v2"], free=False
                ),
                "runtimePath": strings(1024, ["C:\\Program Files\\containerd\\shim.exe"]),
                "debug": booleans(),
                "debugType": names_of("Npipe", "Etw"),
                "logLevel": names_of("trace", "debug", "info", "warning", "error"),
                "ioRetryTimeoutSeconds": integers(0, 86400),
                "options": runhcs_option_maps,
            },
        ),
        "canary": objects(
            {},
            {
                "enabled": booleans(),
                "timeoutSeconds": integers(10, 1800),
                "image": strings(1024, ["mcr.microsoft.com/windows/nanoserver:ltsc2022"]),
            },
        ),
        "rollout": objects(
            {},
            {
                "maxUnavailable": field(
                    st.sampled_from([1, 3, "10%", "100%", "1%"]),
                    st.sampled_from([0, -1, "0%", "101%", "1", "5", 1.0, "10.5%"]),
                ),
                "drain": names_of("None", "Cordon", "Evict"),
                "drainTimeoutSeconds": integers(30, 86400),
                "evictPodSelector": objects(
                    {},
                    {
                        "matchLabels": maps(label_keys, label_values),
                        "matchExpressions": lists(
                            objects(
                                {
                                    "key": label_keys,
                                    "operator": names_of("In", "NotIn", "Exists", "DoesNotExist"),
                                },
                                {"values": lists(label_values)},
                            )
                        ),
                    },
                ),
            },
        ),
    },
)

names = sometimes(
    st.from_regex(_LABEL, fullmatch=True) | st.sampled_from(["a" * 63, "has.dots", "a" * 253]),
    st.sampled_from(["a" * 64, "a" * 254, "Upper", "a_b", "-a", ""]),
)

metadata = st.fixed_dictionaries(
    {"name": names},
    optional={
        "labels": st.dictionaries(label_keys, label_values, max_size=2),
        "annotations": st.dictionaries(label_keys, HOSTILE, max_size=2),
    },
)


def profiles() -> st.SearchStrategy[dict[str, Any]]:
    """Whole documents, as `kubectl apply` would send them."""
    return st.fixed_dictionaries(
        {
            "apiVersion": st.just(API_VERSION),
            "kind": st.just(KIND),
            "metadata": metadata,
            "spec": spec,
        }
    )
