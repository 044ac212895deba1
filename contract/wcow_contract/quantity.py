"""Kubernetes quantities (``resource.Quantity``): the one parser for profiles and pods.

What apimachinery accepts (k8s.io/apimachinery v0.35.4, the version tools/control-plane pins:
``pkg/api/resource/quantity.go`` ParseQuantity and parseQuantityString, ``suffix.go``):

- ``<sign><number><suffix>``; the number is ``digits``, ``digits.digits``, ``digits.`` or
  ``.digits``; the suffix is one of ``Ki Mi Gi Ti Pi Ei`` (powers of 1024), ``n u m k M G T P E``
  or none (powers of 1000), or ``e``/``E`` and a signed integer (parsed as int64, then cast to
  int32);
- values are rounded up to a multiple of 1n (``inf.RoundUp`` at nano scale);
- "no quantity may represent a number greater than 2^63-1" (the type's doc comment):
  BinarySI values are capped there, and ``Value()``/``MilliValue()`` overflow past it. A
  decimal or exponent value beyond it is kept as a big decimal: the API server accepts a pod
  memory limit of ``1e20000000`` (and expands it, in 0.6 s).

This parser takes that grammar, without signs (every quantity here must be non-negative),
with at least one digit, at most 64 characters, and refuses values above 2^63-1: no VM and
no node comes near, and deciding "too large" from the digit count and the exponent, before
any arithmetic, keeps every value decided in microseconds, whatever its exponent. Values are
held exactly as integer nano-units (what apimachinery keeps, and no decimal context to
configure); a value within bounds has at most 28 digits of them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, Literal

from wcow_contract.text import shown

MAX_QUANTITY: Final = 2**63 - 1
MAX_QUANTITY_TEXT: Final = 64
NANO: Final = 10**9

BINARY_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
DECIMAL_SUFFIXES: Final = {
    "n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}  # fmt: skip
_DECIMAL_SUFFIX_OF = {exponent: suffix for suffix, exponent in DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIX_OF = {bits: suffix for suffix, bits in BINARY_SUFFIXES.items()}

# The grammar, also the CRD's pattern for quantity fields: one definition for both.
QUANTITY_PATTERN: Final = (
    r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
_GRAMMAR = re.compile(
    r"\+?(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)

Format = Literal["BinarySI", "DecimalSI", "DecimalExponent"]


class QuantityError(ValueError):
    """Not a quantity this project accepts; the message shows the value bounded."""


@dataclass(frozen=True)
class Quantity:
    """A non-negative quantity: ``nanos`` is its value in units of 10^-9, rounded up as
    apimachinery rounds; ``format`` is the suffix family it was written in."""

    nanos: int
    format: Format

    @property
    def value(self) -> Decimal:
        """The exact value (cores, bytes)."""
        return Decimal(self.nanos).scaleb(-9)

    def ceil(self) -> int:
        """The value rounded up to a whole number (whole processors, whole bytes)."""
        return -(-self.nanos // NANO)

    def canonical(self) -> str:
        """As the API server stores it (apimachinery ``Quantity.String()``): 2048Mi -> 2Gi,
        1000m -> 1, 0.5 -> 500m, 1.5Gi -> 1536Mi. Rendering this form keeps GitOps diffs and
        the controller's compare-before-write quiet."""
        if self.nanos == 0:
            return "0"
        if self.format == "BinarySI" and self.nanos % NANO == 0 and self.nanos >= 1024 * NANO:
            count, bits = self.nanos // NANO, 0
            while count % 1024 == 0 and bits < 60:
                count, bits = count // 1024, bits + 10
            return f"{count}{_BINARY_SUFFIX_OF.get(bits, '')}"
        mantissa, exponent = self.nanos, -9
        while mantissa % 1000 == 0 and exponent < 18:
            mantissa, exponent = mantissa // 1000, exponent + 3
        if self.format == "DecimalExponent":
            return f"{mantissa}e{exponent}" if exponent else str(mantissa)
        return f"{mantissa}{_DECIMAL_SUFFIX_OF[exponent]}"


def _text(value: object) -> str:
    """YAML gives ``cpu: 1`` as an int and the API takes int-or-string; JSON may carry a bare
    number (apimachinery's UnmarshalJSON accepts one). Anything else is not a quantity."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_QUANTITY:
        return str(value)
    if isinstance(value, float) and math.isfinite(value) and 0 <= value <= MAX_QUANTITY:
        return repr(value)
    raise QuantityError(f"{shown(value)} is not a non-negative Kubernetes quantity{_EXAMPLE}")


_EXAMPLE = " (e.g. 250m, 1, 512Mi)"


def parse_quantity(value: object) -> Quantity:
    """``value`` as a quantity, or QuantityError saying why not (the value shown bounded).

    The magnitude is judged from the count of digits and the exponent before anything is
    multiplied out, so ``1e20000000`` or ``1e999999999`` is refused as fast as ``1``."""
    text = _text(value)
    if len(text) > MAX_QUANTITY_TEXT:
        raise QuantityError(
            f"{shown(text)} is longer than {MAX_QUANTITY_TEXT} characters: not a quantity "
            f"this operator accepts{_EXAMPLE}"
        )
    match = _GRAMMAR.fullmatch(text)
    if match is None or not (match["whole"] or match["fraction"]):
        raise QuantityError(f"{shown(text)} is not a non-negative Kubernetes quantity{_EXAMPLE}")
    fraction = match["fraction"] or ""
    mantissa = int((match["whole"] or "") + fraction)  # at most 64 digits
    suffix = match["suffix"] or ""
    bits, exponent, form = 0, -len(fraction), "DecimalSI"
    if suffix in BINARY_SUFFIXES:
        bits, form = BINARY_SUFFIXES[suffix], "BinarySI"
    elif suffix in DECIMAL_SUFFIXES:
        exponent += DECIMAL_SUFFIXES[suffix]
    else:  # e<int>: at most 63 digits, so int() is cheap
        exponent, form = exponent + int(suffix[1:]), "DecimalExponent"
    if mantissa == 0:
        return Quantity(0, form)  # type: ignore[arg-type]
    # mantissa * 10^exponent * 2^bits lies in [10^(magnitude-1), 10^magnitude) * 2^bits
    magnitude = len(str(mantissa)) + exponent
    # (0.301 < log10(2) < 0.302: each bound errs on its safe side)
    if magnitude - 1 + bits * 0.301 > 19:  # at least 10^19 > 2^63-1: never expanded
        raise _too_large(text)
    if magnitude + bits * 0.302 < -10:  # below 10^-10: apimachinery rounds it up to 1n
        return Quantity(1, form)  # type: ignore[arg-type]
    # Here -93 < exponent < 21: the integers below have at most ~110 digits.
    scaled = exponent + 9
    numerator = mantissa << bits
    nanos = numerator * 10**scaled if scaled >= 0 else -(-numerator // 10**-scaled)
    if nanos > MAX_QUANTITY * NANO:
        raise _too_large(text)
    return Quantity(nanos, form)  # type: ignore[arg-type]


def _too_large(text: str) -> QuantityError:
    return QuantityError(
        f"{shown(text)} is above 2^63-1 (9223372036854775807), the largest quantity "
        "Kubernetes represents; no VM or node has that much"
    )


def is_quantity(value: object) -> bool:
    try:
        parse_quantity(value)
    except QuantityError:
        return False
    return True


def canonical_quantity(value: object) -> str:
    """The API server's form of a quantity (see ``Quantity.canonical``); QuantityError
    when it is not one."""
    return parse_quantity(value).canonical()
