"""spec.containerd: the handler's containerd runtime entry (pinned to the runhcs shim) and
the runhcs options a profile may set."""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema, field_validator

from wcow_contract.catalog import runhcs_options
from wcow_contract.v1alpha1.defaults import DEFAULT_RUNTIME_TYPE
from wcow_contract.v1alpha1.fields import FieldError, Model, without_nulls
from wcow_contract.v1alpha1.schema import OPTION_DESCRIPTIONS, options_schema

# containerd runs the handler's shim as its own account (SYSTEM): runtime_type names the
# binary (containerd-shim-<name>-<version>.exe, looked up beside containerd.exe and on PATH)
# and runtime_path, when set, replaces that lookup with any absolute path, a UNC share's
# included (containerd runtime/v2/manager.go resolveRuntimePath, v1.7.34; the same in 2.x).
# So both are pinned to the runhcs shim: the options table is runhcs.Options, which only it
# reads, and a path may only name that shim under Program Files, which only administrators
# can write to.
SHIM_BINARY: Final = "containerd-shim-runhcs-v1.exe"
RUNTIME_PATH_PATTERN: Final = (
    r"^[A-Za-z]:\\Program Files\\([A-Za-z0-9_()+-][A-Za-z0-9 ._()+-]{0,63}\\){0,8}"
    r"containerd-shim-runhcs-v1\.exe$"
)
_RUNTIME_PATH = re.compile(RUNTIME_PATH_PATTERN)


def _runtime_type(value: object) -> object:
    if value != DEFAULT_RUNTIME_TYPE:
        raise ValueError(
            f"is not supported: only {DEFAULT_RUNTIME_TYPE}. The handler's "
            "options are runhcs options, which only the runhcs shim reads, and another "
            "runtime type makes containerd run another binary as SYSTEM"
        )
    return value


def _runtime_path(value: str) -> str:
    if not _RUNTIME_PATH.fullmatch(value):
        raise ValueError(
            "is not a runhcs shim under Program Files: write "
            f"<drive>:\\Program Files\\<folders>\\{SHIM_BINARY} (folders of letters, "
            "digits, spaces and ._()+-, not starting with a dot). containerd runs this file as "
            "SYSTEM, so it may only be the runhcs shim in a folder only administrators can write"
        )
    return value


class ContainerdSpec(Model):
    runtime_type: Annotated[Literal["io.containerd.runhcs.v1"], BeforeValidator(_runtime_type)] = (
        DEFAULT_RUNTIME_TYPE
    )
    """containerd runtime_type of the handler: only io.containerd.runhcs.v1 (the shim the
    runhcs options are for)."""
    runtime_path: (
        Annotated[
            str,
            AfterValidator(_runtime_path),
            WithJsonSchema({"type": "string", "maxLength": 600, "pattern": RUNTIME_PATH_PATTERN}),
        ]
        | None
    ) = None
    """Absolute path of the runhcs shim (runtime_path), when it is not next to
    containerd.exe: <drive>:\\Program Files\\...\\containerd-shim-runhcs-v1.exe (containerd
    runs it as SYSTEM, so no other file and no other folder)."""
    debug: bool = False
    """Shim debug logging (runhcs option Debug)."""
    debug_type: Literal["Npipe", "Etw"] | None = None
    """Where shim debug output goes (runhcs option DebugType). File is not offered: the
    shim panics on it."""
    log_level: Literal["trace", "debug", "info", "warning", "error", "fatal", "panic"] | None = None
    """Shim log level (runhcs option LogLevel); overrides debug."""
    io_retry_timeout_seconds: Annotated[int, Field(ge=0, le=86400)] | None = None
    """How long shims retry their stdio pipes while containerd restarts (runhcs option
    IoRetryTimeoutInSec); 0 retries forever, which is hcsshim's default."""
    options: Annotated[dict[str, Any], WithJsonSchema(options_schema())] | None = None
    """Further runhcs options by their exact Go field name (NCProxyAddr, ScrubLogs,
    DefaultContainerAnnotations). Unknown or misspelt names are unknown
    fields, refused by wcow validate and by kubectl apply (containerd would silently ignore
    them), and so are other casings (containerd 2.x decodes any casing, 1.x only
    lower-first and lowercase, so they would act on some nodes only). ScrubLogs is written
    only when set. Unset: shims of hcsshim up to v0.15.0-rc.1 do not scrub their logs,
    v0.15.0-rc.2 and later do. true: scrubbing on (containerd 1.7+;
    1.6 drops the key). false: off, but a v0.15.0-rc.2+ shim sees it only when containerd's
    own hcsshim has the optional field (containerd 2.4+)."""

    @field_validator("options")
    @classmethod
    def _known_options(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        checked: dict[str, Any] = {}
        for key, option in value.items():
            if key in OPTION_DESCRIPTIONS and option is None:
                continue  # a declared field: the API server drops its null
            if key in OPTION_DESCRIPTIONS and isinstance(option, dict):
                option = without_nulls(option)  # noqa: PLW2901 - the map as the server keeps it
            try:
                checked[key] = runhcs_options.check_option(key, option)
            except ValueError as error:
                raise FieldError(key, str(error)) from None
        return checked
