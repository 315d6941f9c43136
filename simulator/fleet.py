"""The simulated fleet: VM names, identities and placement derived deterministically from the scenario."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from simulator.protocol import VmView
from simulator.scenario import FleetSpec, GroupSpec

_NAMESPACE = uuid.UUID("5b0e2f43-6a2e-4f4c-9a57-0c1e7d3f9b10")


@dataclass(frozen=True)
class Vm:
    """One simulated VM: its instance metadata and the group whose events it sees."""

    view: VmView
    group: str
    group_kind: str

    @property
    def name(self) -> str:
        return self.view.name

    @property
    def fault_domain(self) -> int:
        return self.view.fault_domain

    @property
    def fault_set(self) -> str:
        """The set its fault domain belongs to: its availability set or scale set; a standalone VM is its own."""
        return self.name if self.group_kind == "standalone" else self.group


def _vm_name(group: GroupSpec, index: int) -> str:
    # Scale-set instances are named <set>_<n> by Azure; availability-set VMs are free names.
    return f"{group.name}_{index}" if group.kind == "scale-set" else f"{group.name}-{index}"


def vm_names(spec: FleetSpec) -> list[str]:
    """Every VM name of the fleet, group by group."""
    return [_vm_name(g, i) for g in spec.groups for i in range(g.size)]


def _resource_id(spec: FleetSpec, group: GroupSpec, index: int, name: str) -> str:
    base = f"/subscriptions/{spec.subscription_id}/resourceGroups/{spec.resource_group}/providers/Microsoft.Compute"
    if group.kind == "scale-set":
        return f"{base}/virtualMachineScaleSets/{group.name}/virtualMachines/{index}"
    return f"{base}/virtualMachines/{name}"


def build_fleet(spec: FleetSpec) -> tuple[Vm, ...]:
    """The VMs of the fleet; fault and update domains round-robin within each group, as Azure spreads them (a
    standalone VM is in fault and update domain 0 of its own)."""
    vms: list[Vm] = []
    counter = 0
    for group in spec.groups:
        for i in range(group.size):
            name = _vm_name(group, i)
            counter += 1
            alone = group.kind == "standalone"
            view = VmView(
                vm_id=str(uuid.uuid5(_NAMESPACE, f"{spec.subscription_id}/{spec.resource_group}/{name}")),
                name=name,
                location=spec.location,
                zone=group.zone,
                fault_domain=0 if alone else i % group.fault_domains,
                update_domain=0 if alone else i % group.update_domains,
                scale_set=group.name if group.kind == "scale-set" else "",
                subscription_id=spec.subscription_id,
                resource_group=spec.resource_group,
                resource_id=_resource_id(spec, group, i, name),
                vm_size=group.vm_size,
                private_ip=f"10.0.{counter // 250}.{counter % 250 + 4}",
                mac=f"000D3A{counter:06X}",
            )
            vms.append(Vm(view=view, group=group.name, group_kind=group.kind))
    return tuple(vms)
