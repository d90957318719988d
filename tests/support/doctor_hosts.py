"""Write captured host trees for ``cairn doctor --root``: sysfs, /dev, /proc, /etc and site-packages.

The layouts are the real ones (KFD topology ``properties`` files with decimal values, mem_banks, DRM
``card*``/``renderD*`` entries symlinked to PCI device directories, ``/proc/self/status``, NUL-separated
``/proc/self/environ``), and the tool outputs are written in the formats rocminfo, amd-smi and rocm-smi
print. Hardware facts below (PCI device ids, VRAM sizes, CU counts) describe real products; gfx facts come
from the target registry so this file never spells out which target is which KFD version.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from cairn.model.targets import load_registry

AMD = 0x1002
RENDER_GID, VIDEO_GID = 110, 44


@dataclass(frozen=True)
class GpuSpec:
    """One GPU as the hardware reports it."""

    target: str
    device_id: int
    vram_bytes: int
    simd_count: int
    market_name: str
    series: str  # rocm-smi's "Card Series"
    pci_class: int = 0x030000
    features: str = ""  # rocminfo's ISA suffix, e.g. ":sramecc+:xnack-"


MI300X = GpuSpec("gfx942", 0x74A1, 206141652992, 1216, "AMD Instinct MI300X", "AMD Instinct MI300X OAM", 0x120000,
                 ":sramecc+:xnack-")
MI250X_GCD = GpuSpec("gfx90a", 0x740C, 68702699520, 440, "AMD Instinct MI250X", "Aldebaran/MI200 [Instinct MI250X]",
                     0x038000, ":sramecc+:xnack-")
RX7900XTX = GpuSpec("gfx1100", 0x744C, 25753026560, 192, "Radeon RX 7900 XTX",
                    "Navi31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]")
RX6800XT = GpuSpec("gfx1030", 0x73BF, 17163091968, 144, "AMD Radeon RX 6800 XT", "Navi21 [Radeon RX 6800/6800 XT / 6900 XT]")
RX7800XT = GpuSpec("gfx1101", 0x747E, 17163091968, 120, "AMD Radeon RX 7800 XT", "Navi32 [Radeon RX 7700 XT / 7800 XT]")
RX6600 = GpuSpec("gfx1032", 0x73FF, 8573157376, 56, "AMD Radeon RX 6600", "Navi23 [Radeon RX 6600/6600 XT/6600M]")
RX9070XT = GpuSpec("gfx1201", 0x7550, 17095983104, 128, "AMD Radeon RX 9070 XT", "Navi48 [Radeon RX 9070/9070 XT/9070 GRE]")
RAPHAEL_IGPU = GpuSpec("gfx1036", 0x164E, 536870912, 4, "AMD Radeon Graphics", "Raphael")
PHOENIX_780M = GpuSpec("gfx1103", 0x15BF, 536870912, 24, "AMD Radeon 780M Graphics", "Phoenix1")
STRIX_HALO = GpuSpec("gfx1151", 0x1586, 68719476736, 80, "AMD Radeon 8060S Graphics", "Strix Halo [Radeon Graphics]")


@dataclass
class HostTree:
    """A host under construction; each method writes one real layout below ``root``."""

    root: Path
    gpus: list[tuple[int, GpuSpec, str]] = field(default_factory=list)  # (node, spec, pci slot)
    groups: dict[str, tuple[int, list[str]]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def path(self, rel: str) -> Path:
        target = self.root / rel.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def write(self, rel: str, text: str) -> Path:
        target = self.path(rel)
        target.write_text(text)
        return target

    # -- system ------------------------------------------------------------------------------------------
    def os(self, pretty: str, ident: str, version: str) -> HostTree:
        self.write("etc/os-release", f'PRETTY_NAME="{pretty}"\nNAME="{pretty.split()[0]}"\nID={ident}\nVERSION_ID="{version}"\n')
        return self

    def kernel(self, release: str) -> HostTree:
        self.write("proc/sys/kernel/osrelease", release + "\n")
        self.write("proc/version", f"Linux version {release} (buildd@lcy02) (gcc 13.2.0) #1 SMP PREEMPT_DYNAMIC\n")
        return self

    def amdgpu(self, dkms_version: str = "") -> HostTree:
        self.write("sys/module/amdgpu/initstate", "live\n")
        if dkms_version:
            self.write("sys/module/amdgpu/version", dkms_version + "\n")
        self.write("proc/modules", "amdgpu 19152896 12 - Live 0x0000000000000000\ndrm_exec 12288 1 amdgpu, Live 0x0000000000000000\n")
        return self

    def cmdline(self, line: str) -> HostTree:
        self.write("proc/cmdline", line + "\n")
        return self

    def runtimes(self, glibc: str, glibcxx: str, directory: str = "usr/lib/x86_64-linux-gnu") -> HostTree:
        """Stand-in ``libc.so.6`` and ``libstdc++.so.6``: real ELF shared objects (gcc, a version script) that
        define the symbol versions of the given glibc and GLIBCXX, as the real libraries' .gnu.version_d do."""
        glibc_minor = int(glibc.split(".")[1])
        cxx_patch = int(glibcxx.split(".")[2])
        _versioned_library(self.path(f"{directory}/libc.so.6"), ["GLIBC_2.2.5", *(f"GLIBC_2.{m}" for m in range(3, glibc_minor + 1))])
        _versioned_library(self.path(f"{directory}/libstdc++.so.6"), ["GLIBCXX_3.4", *(f"GLIBCXX_3.4.{p}" for p in range(1, cxx_patch + 1))])
        return self

    def container(self, kind: str = "docker") -> HostTree:
        if kind == "docker":
            self.write(".dockerenv", "")
        else:
            self.write("run/.containerenv", 'engine="podman-4.9.3"\n')
        self.write("proc/1/cgroup", f"0::/system.slice/{kind}-3f2a9c1e.scope\n")
        return self

    # -- KFD topology, DRM, PCI ---------------------------------------------------------------------------
    def cpu_node(self, node: int = 0, cores: int = 96, memory: int = 1623497601024) -> HostTree:
        base = f"sys/class/kfd/kfd/topology/nodes/{node}"
        self.write(f"{base}/name", "\n")
        self.write(f"{base}/properties", _properties(cpu_cores_count=cores, simd_count=0, mem_banks_count=1, caches_count=0,
                                                     io_links_count=1, gfx_target_version=0, vendor_id=0, device_id=0,
                                                     location_id=0, domain=0, drm_render_minor=0, num_xcc=0))
        self.write(f"{base}/mem_banks/0/properties", _properties(heap_type=0, size_in_bytes=memory, flags=0, width=72,
                                                                 mem_clk_max=4800))
        self.write("sys/class/kfd/kfd/topology/generation_id", "1\n")
        self.write("sys/class/kfd/kfd/topology/system_properties", "platform_oem 0\nplatform_id 0\nplatform_rev 0\n")
        return self

    def gpu(self, spec: GpuSpec, *, node: int, bus: int, card: int, render: int, dev_nodes: bool = True) -> HostTree:
        kfd_version = load_registry().target(spec.target).kfd_version
        slot = f"0000:{bus:02x}:00.0"
        base = f"sys/class/kfd/kfd/topology/nodes/{node}"
        self.write(f"{base}/name", "ip discovery\n")
        self.write(f"{base}/properties", _properties(
            cpu_cores_count=0, simd_count=spec.simd_count, mem_banks_count=1, caches_count=540, io_links_count=1,
            p2p_links_count=0, max_waves_per_simd=8 if spec.features else 16, lds_size_in_kb=64, wave_front_size=64 if spec.features else 32,
            array_count=32, simd_arrays_per_engine=1, cu_per_simd_array=10, simd_per_cu=4 if spec.features else 2,
            gfx_target_version=kfd_version, vendor_id=AMD, device_id=spec.device_id, location_id=bus << 8, domain=0,
            drm_render_minor=render, hive_id=0, num_sdma_engines=2, num_cp_queues=24, max_engine_clk_fcompute=2100,
            local_mem_size=0, fw_version=155, capability=746324608, unique_id=0x3A1B2C3D00000000 + node, num_xcc=1,
        ))
        self.write(f"{base}/mem_banks/0/properties", _properties(heap_type=1, size_in_bytes=spec.vram_bytes, flags=0,
                                                                 width=8192, mem_clk_max=1300))
        pci = f"sys/devices/pci0000:00/0000:00:01.1/{slot}"
        self.write(f"{pci}/vendor", f"0x{AMD:04x}\n")
        self.write(f"{pci}/device", f"0x{spec.device_id:04x}\n")
        self.write(f"{pci}/class", f"0x{spec.pci_class:06x}\n")
        self.write(f"{pci}/mem_info_vram_total", f"{spec.vram_bytes}\n")
        self.write(f"{pci}/uevent", f"DRIVER=amdgpu\nPCI_CLASS={spec.pci_class:X}\nPCI_ID=1002:{spec.device_id:04X}\n"
                                    f"PCI_SUBSYS_ID=1002:0E0D\nPCI_SLOT_NAME={slot}\nMODALIAS=pci:v00001002d0000{spec.device_id:04X}\n")
        for name in (f"card{card}", f"renderD{render}"):
            self.write(f"{pci}/drm/{name}/dev", "226:0\n")
            _symlink(self.path(f"sys/class/drm/{name}"), f"../../devices/pci0000:00/0000:00:01.1/{slot}/drm/{name}")
            _symlink(self.path(f"{pci}/drm/{name}/device"), "../..")
            if dev_nodes:
                self.device(f"dev/dri/{name}", RENDER_GID if name.startswith("render") else VIDEO_GID)
        _symlink(self.path(f"sys/bus/pci/devices/{slot}"), f"../../../devices/pci0000:00/0000:00:01.1/{slot}")
        self.gpus.append((node, spec, slot))
        return self

    def pci_gpu_without_driver(self, spec: GpuSpec, bus: int) -> HostTree:
        slot = f"0000:{bus:02x}:00.0"
        pci = f"sys/devices/pci0000:00/0000:00:01.1/{slot}"
        self.write(f"{pci}/vendor", f"0x{AMD:04x}\n")
        self.write(f"{pci}/device", f"0x{spec.device_id:04x}\n")
        self.write(f"{pci}/class", f"0x{spec.pci_class:06x}\n")
        self.write(f"{pci}/uevent", f"PCI_CLASS={spec.pci_class:X}\nPCI_ID=1002:{spec.device_id:04X}\nPCI_SLOT_NAME={slot}\n")
        _symlink(self.path(f"sys/bus/pci/devices/{slot}"), f"../../../devices/pci0000:00/0000:00:01.1/{slot}")
        return self

    def device(self, rel: str, gid: int, mode: int = 0o660) -> HostTree:
        target = self.write(rel, "")
        os.chown(target, 0, gid)
        target.chmod(mode)
        return self

    def kfd(self, gid: int = RENDER_GID, mode: int = 0o660) -> HostTree:
        return self.device("dev/kfd", gid, mode)

    # -- users and environment ----------------------------------------------------------------------------
    def user(self, name: str, uid: int, *, session_groups: tuple[str, ...], listed_in: tuple[str, ...] | None = None,
             extra_groups: dict[str, int] | None = None) -> HostTree:
        """``session_groups``: what the process has; ``listed_in``: what /etc/group says (default the same)."""
        table = {"root": 0, "video": VIDEO_GID, "render": RENDER_GID, name: uid, **(extra_groups or {})}
        listed = set(listed_in if listed_in is not None else session_groups)
        self.write("etc/group", "".join(f"{g}:x:{gid}:{name if g in listed and g != name else ''}\n" for g, gid in table.items()))
        self.write("etc/passwd", f"root:x:0:0:root:/root:/bin/bash\n{name}:x:{uid}:{uid}::/home/{name}:/bin/bash\n")
        gids = " ".join(str(table[g]) for g in (name, *session_groups) if g in table)
        self.write("proc/self/status", f"Name:\tpython3\nUmask:\t0022\nState:\tR (running)\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                                       f"Gid:\t{uid}\t{uid}\t{uid}\t{uid}\nFDSize:\t64\nGroups:\t{gids} \n")
        return self

    def root_user(self, groups: dict[str, int] | None = None) -> HostTree:
        table = {"root": 0, **(groups or {})}
        self.write("etc/group", "".join(f"{g}:x:{gid}:\n" for g, gid in table.items()))
        self.write("etc/passwd", "root:x:0:0:root:/root:/bin/bash\n")
        self.write("proc/self/status", "Name:\tpython3\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t0 \n")
        return self

    def environ(self, **variables: str) -> HostTree:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/user", "LANG": "C.UTF-8", **variables}
        self.write("proc/self/environ", "".join(f"{k}={v}\0" for k, v in env.items()))
        return self

    # -- ROCm and Python --------------------------------------------------------------------------------------
    def rocm_opt(self, version: str, build: str = "120") -> HostTree:
        self.write(f"opt/rocm-{version}/.info/version", f"{version}-{build}\n")
        self.path(f"opt/rocm-{version}/lib").mkdir(parents=True, exist_ok=True)
        _symlink(self.path("opt/rocm"), f"rocm-{version}")
        return self

    def dpkg(self, package: str, version: str) -> HostTree:
        self.write("var/lib/dpkg/status", f"Package: {package}\nStatus: install ok installed\nPriority: optional\n"
                                          f"Architecture: amd64\nVersion: {version}\nDescription: ROCm\n\n")
        return self

    def site(self, python: str = "3.12") -> Path:
        site = self.path(f"usr/local/lib/python{python}/dist-packages/.keep").parent
        return site

    def wheel(self, site: Path, name: str, version: str, *, requires: tuple[str, ...] = (),
              files: dict[str, bytes] | None = None, tag: str = "") -> HostTree:
        """An installed distribution: METADATA, RECORD, WHEEL (with ``tag``) and its files, as pip leaves them."""
        dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
        dist.mkdir(parents=True, exist_ok=True)
        if tag:
            (dist / "WHEEL").write_text(f"Wheel-Version: 1.0\nGenerator: bdist_wheel (0.45.1)\nRoot-Is-Purelib: false\nTag: {tag}\n\n")
        meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
        (dist / "METADATA").write_text("\n".join(meta) + "\n\nLong description.\n")
        records = []
        for rel, data in (files or {}).items():
            target = site / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            records.append(f"{rel},sha256=-,{len(data)}")
        records += [f"{dist.name}/METADATA,,", f"{dist.name}/RECORD,,"]
        (dist / "RECORD").write_text("\n".join(records) + "\n")
        return self

    def pip_conf(self, index_url: str, rel: str = "etc/pip.conf") -> HostTree:
        self.write(rel, f"[global]\nindex-url = {index_url}\ntimeout = 60\n")
        return self

    def ld_so_conf(self, name: str, *dirs: str) -> HostTree:
        """Debian's layout: ``/etc/ld.so.conf`` includes ``/etc/ld.so.conf.d/*.conf``."""
        self.write("etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n\n")
        self.write(f"etc/ld.so.conf.d/{name}.conf", "# added by the installer\n" + "".join(f"{d}\n" for d in dirs))
        return self

    def shared_library(self, directory: str, real_name: str, *links: str) -> HostTree:
        """A shared library file and its soname/development links in one directory, as ldconfig leaves them."""
        self.write(f"{directory}/{real_name}", "\x7fELF")
        for link in links:
            _symlink(self.path(f"{directory}/{link}"), real_name)
        return self

    # -- tool outputs ---------------------------------------------------------------------------------------
    def tool(self, name: str, text: str) -> HostTree:
        self.write(f".cairn-doctor/{name}.txt", text)
        return self

    def rocminfo(self, *, spoof: str = "", runtime: str = "1.14") -> HostTree:
        return self.tool("rocminfo", rocminfo_text(self.gpus, spoof=spoof, runtime=runtime))

    def amd_smi(self) -> HostTree:
        return self.tool("amd-smi", amd_smi_text(self.gpus))

    def rocm_smi(self) -> HostTree:
        return self.tool("rocm-smi", rocm_smi_text(self.gpus))


def _versioned_library(out: Path, versions: list[str]) -> None:
    """A shared object defining ``versions`` (each a version node of a GNU version script), built by gcc."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        source, script = Path(work) / "v.c", Path(work) / "v.map"
        source.write_text("int cairn_stand_in(void) { return 0; }\n")
        script.write_text("".join(f"{v} {{ {'global: cairn_stand_in; ' if i == 0 else ''}}};\n" for i, v in enumerate(versions))
                          + "")
        subprocess.run(["gcc", "-shared", "-fPIC", "-nostdlib", f"-Wl,--version-script={script}", "-o", str(out), str(source)],
                       check=True, capture_output=True)


def _properties(**values: int) -> str:
    return "".join(f"{k} {v}\n" for k, v in values.items())


def _symlink(link: Path, target: str) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(target)


# -- tool output texts -------------------------------------------------------------------------------------
def rocminfo_text(gpus: list[tuple[int, GpuSpec, str]], *, spoof: str = "", runtime: str = "1.14") -> str:
    """``rocminfo`` as ROCm prints it: a CPU agent, then one agent per GPU (``spoof`` = overridden target)."""
    out = [f"ROCk module version 6.10.5 is loaded\n=====================    \nHSA System Attributes    \n=====================    \n"
           f"Runtime Version:         {runtime}\nRuntime Ext Version:     1.6\nSystem Timestamp Freq.:  1000.000000MHz\n"
           "Machine Model:           LARGE\nSystem Endianness:       LITTLE\nMwaitx:                  DISABLED\n"
           "DMAbuf Support:          YES\n\n==========               \nHSA Agents               \n==========               \n"
           "*******                  \nAgent 1                  \n*******                  \n"
           "  Name:                    AMD EPYC 9654 96-Core Processor    \n  Uuid:                    CPU-XX\n"
           "  Marketing Name:          AMD EPYC 9654 96-Core Processor    \n  Vendor Name:             CPU\n"
           "  Feature:                 None specified\n  Profile:                 FULL_PROFILE\n"
           "  Device Type:             CPU\n  Node:                    0\n  ISA Info:                \n"]
    for n, (node, spec, _slot) in enumerate(gpus, start=2):
        target = spoof or spec.target
        isa = target + (spec.features if not spoof else "")
        out.append(
            f"*******                  \nAgent {n}                  \n*******                  \n"
            f"  Name:                    {target}                             \n"
            f"  Uuid:                    GPU-5e1c2a7b{node:08x}\n"
            f"  Marketing Name:          {spec.market_name}\n  Vendor Name:             AMD\n"
            "  Feature:                 KERNEL_DISPATCH\n  Profile:                 BASE_PROFILE\n"
            "  Float Round Mode:        NEAR\n  Max Queue Number:        128(0x80)\n  Queue Min Size:          64(0x40)\n"
            f"  Device Type:             GPU\n  Cache Info:              \n    L1:                      32(0x20) KB\n"
            f"  Chip ID:                 {spec.device_id}(0x{spec.device_id:x})\n  Node:                    {node}\n"
            f"  Compute Unit:            {spec.simd_count // 4}\n  Pool Info:               \n    Pool 1                   \n"
            "      Segment:                 GLOBAL; FLAGS: COARSE GRAINED\n"
            f"      Size:                    {spec.vram_bytes // 1024}({spec.vram_bytes // 1024:#x}) KB\n"
            "  ISA Info:                \n    ISA 1                    \n"
            f"      Name:                    amdgcn-amd-amdhsa--{isa}\n"
            "      Machine Models:          HSA_MACHINE_MODEL_LARGE\n"
        )
    out.append("*** Done ***             \n")
    return "".join(out)


def amd_smi_text(gpus: list[tuple[int, GpuSpec, str]]) -> str:
    """``amd-smi static --asic --driver`` text output (ROCm 10.1 has amd-smi and no rocm-smi)."""
    out = []
    for index, (_node, spec, slot) in enumerate(gpus):
        out.append(
            f"GPU: {index}\n    ASIC:\n        MARKET_NAME: {spec.market_name}\n        VENDOR_ID: 0x1002\n"
            "        VENDOR_NAME: Advanced Micro Devices Inc. [AMD/ATI]\n        SUBVENDOR_ID: 0x1002\n"
            f"        DEVICE_ID: 0x{spec.device_id:04x}\n        SUBSYSTEM_ID: 0x0c34\n        REV_ID: 0x00\n"
            "        ASIC_SERIAL: 0x3A1B2C3D4E5F6071\n        OAM_ID: N/A\n"
            f"        NUM_COMPUTE_UNITS: {spec.simd_count // 4}\n        TARGET_GRAPHICS_VERSION: {spec.target}\n"
            f"    DRIVER:\n        NAME: amdgpu\n        VERSION: 6.10.5\n    BUS:\n        BDF: {slot}\n\n"
        )
    return "".join(out)


def rocm_smi_text(gpus: list[tuple[int, GpuSpec, str]]) -> str:
    """``rocm-smi --showproductname`` (ROCm ≤ 7.x)."""
    bar = "=" * 28
    out = [f"\n{bar} ROCm System Management Interface {bar}\n{'=' * 38} Product Info {'=' * 38}\n"]
    for index, (node, spec, _slot) in enumerate(gpus):
        out += [f"GPU[{index}]\t\t: Card Series: \t\t{spec.series}\n", f"GPU[{index}]\t\t: Card Model: \t\t0x{spec.device_id:04x}\n",
                f"GPU[{index}]\t\t: Card Vendor: \t\tAdvanced Micro Devices, Inc. [AMD/ATI]\n",
                f"GPU[{index}]\t\t: Card SKU: \t\tD7070100\n", f"GPU[{index}]\t\t: Node ID: \t\t{node}\n",
                f"GPU[{index}]\t\t: GFX Version: \t\t{spec.target}\n"]
    out.append(f"{'=' * 90}\n{'=' * 36} End of ROCm SMI Log {'=' * 36}\n")
    return "".join(out)


ROCMINFO_NO_DRIVER = "ROCk module is NOT loaded, possibly no GPU devices\n"


# -- the fixture hosts the tests use ---------------------------------------------------------------------------
def mi300x_node(root: Path) -> HostTree:
    """An 8× MI300X server: DKMS amdgpu, ROCm in /opt, user in render and video, amd-smi (ROCm 10.1: no rocm-smi)."""
    host = HostTree(root).os("Ubuntu 22.04.5 LTS", "ubuntu", "22.04").kernel("5.15.0-119-generic").amdgpu("6.10.5")
    host.cpu_node(0, cores=192)
    for i in range(8):
        host.gpu(MI300X, node=i + 1, bus=0x0C + 0x10 * i, card=i + 1, render=128 + i)
    host.kfd().user("ml", 1000, session_groups=("video", "render")).environ()
    host.rocm_opt("10.1.0", "25").site("3.12")
    return host.rocminfo().amd_smi()


def rx7900xtx_desktop(root: Path) -> HostTree:
    """A desktop with an RX 7900 XTX on Ubuntu 24.04's in-tree amdgpu and ROCm 6.4.1 (rocm-smi era)."""
    host = HostTree(root).os("Ubuntu 24.04.1 LTS", "ubuntu", "24.04").kernel("6.8.0-45-generic").amdgpu()
    host.cpu_node(0, cores=16, memory=68719476736).gpu(RX7900XTX, node=1, bus=0x03, card=1, render=128)
    host.kfd().user("alice", 1000, session_groups=("video", "render")).environ()
    host.rocm_opt("6.4.1", "83")
    return host.rocminfo(runtime="1.15").rocm_smi()


def strix_halo_laptop(root: Path, kernel: str = "6.18.5-200.fc42.x86_64") -> HostTree:
    """A Strix Halo laptop (gfx1151) where someone set HSA_OVERRIDE_GFX_VERSION=11.0.0 (gfx1100); its kernel meets
    the 6.18.4 minimum gfx1151 declares unless ``kernel`` says otherwise."""
    host = HostTree(root).os("Fedora Linux 42 (Workstation Edition)", "fedora", "42").kernel(kernel).amdgpu()
    host.cpu_node(0, cores=32, memory=137438953472).gpu(STRIX_HALO, node=1, bus=0xC3, card=1, render=128)
    spoof = load_registry().target("gfx1100").override_version
    host.kfd().user("sam", 1000, session_groups=("video", "render")).environ(HSA_OVERRIDE_GFX_VERSION=spoof)
    host.rocm_opt("7.14.0", "1")
    return host.rocminfo(spoof="gfx1100").amd_smi()


def container_without_kfd(root: Path) -> HostTree:
    """A Docker container on an MI250X host started without --device: sysfs shows the GPUs, /dev does not."""
    host = HostTree(root).os("Ubuntu 24.04.1 LTS", "ubuntu", "24.04").kernel("6.8.0-45-generic").amdgpu("6.10.5").container()
    host.cpu_node(0).gpu(MI250X_GCD, node=1, bus=0x29, card=1, render=128, dev_nodes=False)
    host.gpu(MI250X_GCD, node=2, bus=0x2C, card=2, render=129, dev_nodes=False)
    host.root_user().environ().rocm_opt("6.4.1")
    return host.tool("rocminfo", "hsa api call failure at: /src/rocminfo/rocminfo.cc:1306\n"
                                 "Call returned HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary "
                                 "resources.\nUnable to open /dev/kfd read-write: No such file or directory\n")


def desktop_not_in_render(root: Path, *, relogin: bool = False) -> HostTree:
    """The RX 7900 XTX desktop whose user is not in render (``relogin``: added, but the session predates it)."""
    host = rx7900xtx_desktop(root)
    listed = ("video", "render") if relogin else ("video",)
    host.user("alice", 1000, session_groups=("video",), listed_in=listed)
    return host.tool("rocminfo", "Unable to open /dev/kfd read-write: Permission denied\n"
                                 "alice is not member of \"render\" group, the default DRM access group. "
                                 "Users must be a member of the \"render\" group or another DRM access group in order "
                                 "for ROCm applications to run successfully.\n")


def desktop_with_foreign_torch(root: Path) -> HostTree:
    """The desktop (ROCm 6.4.1) with a torch wheel built for ROCm 7.14.0 pip-installed into it."""
    host = rx7900xtx_desktop(root)
    site = host.site("3.12")
    host.wheel(site, "torch", "2.12.0+rocm7.14.0", requires=("filelock", "rocm[libraries]==7.14.0"),
               files={"torch/__init__.py": b"", "torch/version.py": b"hip = '7.14.0'\n"})
    host.wheel(site, "torchvision", "0.22.1+rocm6.4", requires=("torch==2.7.1",), files={"torchvision/__init__.py": b""})
    return host


def bare_host(root: Path) -> HostTree:
    """A machine with no AMD GPU at all (like the CI runner)."""
    host = HostTree(root).os("Debian GNU/Linux 12 (bookworm)", "debian", "12").kernel("6.1.0-27-amd64")
    host.root_user().environ().dpkg("libamdhip64-5", "5.2.3-3")
    return host.tool("rocminfo", ROCMINFO_NO_DRIVER)


def workstation_two_gpus(root: Path, second: GpuSpec = RX6800XT) -> HostTree:
    """A workstation with an RX 7900 XTX (gfx1100) and a second card, by default an RX 6800 XT (gfx1030): two
    families, two payloads."""
    host = HostTree(root).os("Ubuntu 24.04.1 LTS", "ubuntu", "24.04").kernel("6.8.0-45-generic").amdgpu()
    host.cpu_node(0, cores=24, memory=137438953472).gpu(RX7900XTX, node=1, bus=0x03, card=1, render=128)
    host.gpu(second, node=2, bus=0x0A, card=2, render=129)
    host.kfd().user("alice", 1000, session_groups=("video", "render")).environ()
    return host.rocminfo(runtime="1.15").amd_smi()


def workstation_two_rdna3(root: Path) -> HostTree:
    """A workstation with an RX 7900 XTX (gfx1100) and an RX 7800 XT (gfx1101): one family, two targets."""
    return workstation_two_gpus(root, second=RX7800XT)


def desktop_with_two_hip_runtimes(root: Path) -> HostTree:
    """The RX 7900 XTX desktop: ROCm 6.4.1 in /opt (in ld.so.conf, and on LD_LIBRARY_PATH) and a rocm-sdk-core
    wheel with its own HIP runtime in the user's site-packages."""
    host = rx7900xtx_desktop(root)
    host.shared_library("opt/rocm-6.4.1/lib", "libamdhip64.so.6.4.60401", "libamdhip64.so.6", "libamdhip64.so")
    host.shared_library("opt/rocm-6.4.1/lib", "libamd_smi.so.25.5", "libamd_smi.so.25", "libamd_smi.so")
    host.ld_so_conf("rocm", "/opt/rocm/lib", "/opt/rocm/lib64").environ(LD_LIBRARY_PATH="/opt/rocm-6.4.1/lib")
    site = host.site("3.12")
    host.wheel(site, "rocm-sdk-core", "7.2.4", files={"_rocm_sdk_core/lib/libamdhip64.so.7": b"\x7fELF",
                                                     "_rocm_sdk_core/lib/libhsa-runtime64.so.1": b"\x7fELF"})
    return host


def libraries_wheel(host: HostTree, family: str, targets: tuple[str, ...], version: str = "7.2.4") -> HostTree:
    """Cairn's rocm-sdk-libraries-<family> wheel, with the libraries.json its build writes."""
    info = json.dumps({"family": family, "targets": list(targets), "version": version}).encode()
    return host.wheel(host.site("3.12"), f"rocm-sdk-libraries-{family}", version, requires=(f"rocm-sdk-core=={version}",),
                      files={"_rocm_sdk_libraries/share/cairn/libraries.json": info})


def desktop_with_igpu(root: Path, *, igpu: GpuSpec = RAPHAEL_IGPU, dgpu: GpuSpec = RX9070XT, **env: str) -> HostTree:
    """A Ryzen desktop whose CPU's iGPU (KFD node 1) sits beside an RX 9070 XT (node 2): ROCr numbers the iGPU
    device 0 — the layout of llamacpp-rocm #96 (a segfault on R9700 with the gfx1036 iGPU visible)."""
    host = HostTree(root).os("Ubuntu 24.04.1 LTS", "ubuntu", "24.04").kernel("6.14.0-33-generic").amdgpu()
    host.cpu_node(0, cores=16, memory=68719476736).gpu(igpu, node=1, bus=0x7C, card=1, render=128)
    host.gpu(dgpu, node=2, bus=0x03, card=2, render=129)
    host.kfd().user("alice", 1000, session_groups=("video", "render")).environ(**env)
    return host.rocminfo(runtime="1.15").amd_smi()


def single_gpu_desktop(root: Path, spec: GpuSpec, **env: str) -> HostTree:
    """A desktop with one GPU ``spec`` on Ubuntu 24.04's in-tree amdgpu."""
    host = HostTree(root).os("Ubuntu 24.04.1 LTS", "ubuntu", "24.04").kernel("6.14.0-33-generic").amdgpu()
    host.cpu_node(0, cores=8, memory=34359738368).gpu(spec, node=1, bus=0x03, card=1, render=128)
    host.kfd().user("alice", 1000, session_groups=("video", "render")).environ(**env)
    return host.rocminfo(runtime="1.15").amd_smi()
