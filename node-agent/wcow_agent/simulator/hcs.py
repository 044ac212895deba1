"""HCS on a simulated node: the compute systems a sandbox makes (a ``VirtualMachine``
``<id>@vm`` only for Hyper-V isolation) and the utility VM's size as hcsshim picks it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wcow_agent.host.interfaces import HcsError

if TYPE_CHECKING:
    from wcow_agent.simulator.node import SimulatedNode

HCS_E_SYSTEM_NOT_FOUND = 0x8037010E
DEFAULT_VM_MEMORY_MB = 1024
MEMORY_ANNOTATION = "io.microsoft.virtualmachine.computetopology.memory.sizeinmb"
PROCESSOR_ANNOTATION = "io.microsoft.virtualmachine.computetopology.processor.count"


@dataclass(frozen=True)
class VmSize:
    processors: int
    memory_mb: int


def vm_size(options: Mapping[str, Any], logical_processors: int) -> VmSize:
    """The utility VM hcsshim creates: pod annotation, else runtime option, else default;
    memory rounded up to an even MB, vCPUs capped at the host's logical processors."""
    annotations = options.get("DefaultContainerAnnotations") or {}

    def number(annotation: str, option: str) -> int:
        try:
            value = int(annotations.get(annotation, 0))
        except ValueError:  # hcsshim logs an unparsable annotation and keeps the default
            value = 0
        return value or int(options.get(option) or 0)

    default_processors = 1 if logical_processors == 1 else 2
    processors = number(PROCESSOR_ANNOTATION, "VmProcessorCount") or default_processors
    memory = number(MEMORY_ANNOTATION, "VmMemorySizeInMb") or DEFAULT_VM_MEMORY_MB
    return VmSize(min(processors, logical_processors), (memory + 1) & ~1)


class SimulatedHcs:
    def __init__(self, node: SimulatedNode) -> None:
        self.node = node

    def enumerate_compute_systems(
        self, query: Mapping[str, Any], timeout: float
    ) -> list[dict[str, Any]]:
        ids, types, owners = (query.get(k) for k in ("Ids", "Types", "Owners"))
        with self.node.lock:
            systems = list(self.node.systems.values())
        return [
            {k: v for k, v in s.items() if not k.startswith("_")}
            for s in systems
            if (ids is None or s["Id"] in ids)
            and (types is None or s["SystemType"] in types)
            and (owners is None or s["Owner"] in owners)
        ]

    def compute_system_properties(
        self, system_id: str, property_types: Sequence[str], timeout: float
    ) -> dict[str, Any]:
        system = self.node.systems.get(system_id)
        if system is None:
            raise HcsError(
                f"HcsOpenComputeSystem {system_id}: A virtual machine or container with the "
                "specified identifier does not exist.",
                HCS_E_SYSTEM_NOT_FOUND,
            )
        document = {k: v for k, v in system.items() if not k.startswith("_")}
        size: VmSize | None = system.get("_size")
        if "Memory" in property_types and size is not None:
            # Physically backed or fully touched: AssignedMemory in 4 KiB pages.
            document["Memory"] = {
                "VirtualNodeCount": 1,
                "VirtualMachineMemory": {"AssignedMemory": size.memory_mb * 256},
            }
        return document

    def service_properties(self, property_types: Sequence[str]) -> dict[str, Any]:
        count = self.node.settings.logical_processors
        return {"Properties": [{"LogicalProcessorCount": count}]}
