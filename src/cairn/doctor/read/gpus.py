"""The GPUs as the kernel sees them: KFD topology, DRM devices, AMD PCI functions and the amdgpu module.

Paths read, relative to the root: ``sys/class/kfd/kfd/topology/nodes/*/properties`` and
``mem_banks/*/properties`` (KFD agents; CPU nodes report ``gfx_target_version 0``),
``sys/class/drm/{card*,renderD*}/device`` (DRM devices), ``sys/bus/pci/devices/*`` (AMD display controllers
even when no driver bound to them), ``sys/module/amdgpu`` (``version`` exists only for the DKMS module) and
``proc/modules``.
"""

from __future__ import annotations

from pathlib import Path

from cairn.doctor.read.files import Root, int_of, numbered, properties, text_of
from cairn.doctor.snapshot import DrmDevice, KfdNode, PciDevice

AMD_PCI_VENDOR = 0x1002
# PCI base classes that hold GPUs: 0x03 display controller, 0x12 processing accelerator (Instinct parts)
GPU_PCI_CLASSES = (0x03, 0x12)
FB_HEAPS = (1, 2)  # HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC / _PRIVATE


def read_kfd(r: Root) -> tuple[bool, tuple[KfdNode, ...]]:
    topology = r("sys/class/kfd/kfd/topology/nodes")
    present = r("sys/class/kfd/kfd").exists()
    nodes = []
    for node_dir in numbered(topology):
        props = properties(node_dir / "properties")
        if not props:
            continue
        vram = 0
        for bank in numbered(node_dir / "mem_banks"):
            bank_props = properties(bank / "properties")
            if int_of(bank_props.get("heap_type", "0")) in FB_HEAPS:
                vram += int_of(bank_props.get("size_in_bytes", "0"))
        minor = props.get("drm_render_minor")
        nodes.append(
            KfdNode(
                id=int(node_dir.name),
                gfx_target_version=int_of(props.get("gfx_target_version", "0")),
                vendor_id=int_of(props.get("vendor_id", "0")),
                device_id=int_of(props.get("device_id", "0")),
                drm_render_minor=int_of(minor) if minor not in (None, "", "0") else None,
                location_id=int_of(props.get("location_id", "0")),
                domain=int_of(props.get("domain", "0")),
                simd_count=int_of(props.get("simd_count", "0")),
                vram_bytes=vram,
                name=text_of(node_dir / "name").strip(),
            )
        )
    return present, tuple(nodes)


def read_drm(r: Root) -> tuple[DrmDevice, ...]:
    drm = r("sys/class/drm")
    found = []
    entries = sorted(numbered(drm, "card") + numbered(drm, "renderD"), key=lambda p: p.name)
    for entry in entries:
        device = entry / "device"
        if not device.exists():
            continue
        uevent = _uevent(device)
        found.append(
            DrmDevice(
                name=entry.name,
                vendor=int_of(text_of(device / "vendor")),
                device=int_of(text_of(device / "device")),
                pci_slot=uevent.get("PCI_SLOT_NAME", ""),
                driver=uevent.get("DRIVER", ""),
                vram_bytes=int_of(text_of(device / "mem_info_vram_total")),
            )
        )
    return tuple(found)


def read_pci_gpus(r: Root) -> tuple[PciDevice, ...]:
    """AMD display/accelerator PCI functions, with or without a bound driver."""
    base = r("sys/bus/pci/devices")
    try:
        slots = sorted(base.iterdir(), key=lambda p: p.name)
    except OSError:
        return ()
    found = []
    for slot in slots:
        vendor = int_of(text_of(slot / "vendor"))
        pci_class = int_of(text_of(slot / "class"))
        if vendor != AMD_PCI_VENDOR or (pci_class >> 16) not in GPU_PCI_CLASSES:
            continue
        driver = _uevent(slot).get("DRIVER", "")
        found.append(PciDevice(slot.name, vendor, int_of(text_of(slot / "device")), pci_class, driver))
    return tuple(found)


def read_amdgpu(r: Root) -> tuple[bool, str]:
    """Whether the amdgpu module is loaded, and its DKMS version ("" for the in-kernel module)."""
    module = r("sys/module/amdgpu")
    modules = text_of(r("proc/modules"))
    loaded = module.is_dir() or any(line.split(" ", 1)[0] == "amdgpu" for line in modules.splitlines())
    return loaded, text_of(module / "version").strip()


def _uevent(device_dir: Path) -> dict[str, str]:
    out = {}
    for line in text_of(device_dir / "uevent").splitlines():
        key, _, value = line.partition("=")
        out[key] = value
    return out
