"""Read everything ``cairn doctor`` judges from one root directory into a frozen ``HostSnapshot``.

This package is the doctor's only contact with the system: the checks, the host interpretation and the
advice are pure functions of the snapshot. Reading from a root directory (``/`` on a real host, a captured
tree in tests) keeps every check testable against real sysfs layouts. One module per kind of data, each
naming the paths it reads: ``gpus`` (KFD topology, DRM, PCI, the amdgpu module), ``access`` (device files,
the user and groups), ``system`` (kernel, OS, container, environment), ``packages`` (Python distributions),
``rocm`` (ROCm installs), ``tool_outputs`` (rocminfo, amd-smi, rocm-smi), ``device_code`` (the audit of
installed device code), ``payloads`` (per-target device-code wheels), ``libraries`` (copies of the HIP
runtime and amd-smi library), ``indexes`` (the package indexes pip and uv install from), ``abi`` (the host's
glibc and libstdc++ versions) and ``probe`` (the HIP runtimes one importing process maps); ``files`` holds the lenient file readers they share.
"""

from __future__ import annotations

from pathlib import Path

from cairn.doctor.read.abi import read_glibc, read_glibcxx
from cairn.doctor.read.access import read_devices, read_groups, read_identity
from cairn.doctor.read.device_code import audit_installed
from cairn.doctor.read.files import Root
from cairn.doctor.read.gpus import read_amdgpu, read_drm, read_kfd, read_pci_gpus
from cairn.doctor.read.indexes import read_indexes
from cairn.doctor.read.libraries import read_library_copies
from cairn.doctor.read.packages import python_version, read_dists, site_dirs
from cairn.doctor.read.payloads import read_payloads
from cairn.doctor.read.probe import read_probe
from cairn.doctor.read.rocm import read_rocm
from cairn.doctor.read.system import read_cmdline, read_container, read_env, read_kernel, read_os_release
from cairn.doctor.read.tool_outputs import read_tools
from cairn.doctor.snapshot import HostSnapshot

__all__ = ["read_snapshot"]


def read_snapshot(root: Path | str = "/", *, audit: bool = True, probe: bool = True) -> HostSnapshot:
    """Everything the checks need, read from ``root``; the device-code audit runs only when a GPU exists, the
    import probe (``read.probe``) only on a live host and when ``probe``."""
    base = Path(root)
    live = base.resolve() == Path("/")
    r = Root(base)
    kfd_present, nodes = read_kfd(r)
    loaded, version = read_amdgpu(r)
    names, members = read_groups(r)
    sites = site_dirs(r, live)
    dists = read_dists(sites)
    rocm = read_rocm(r, dists)
    has_gpu = any(n.is_gpu for n in nodes)
    env = read_env(r)
    ld_path = env.get("LD_LIBRARY_PATH", "")
    glibc, glibc_where = read_glibc(r, live, ld_path)
    glibcxx, glibcxx_where = read_glibcxx(r, ld_path)
    return HostSnapshot(
        root=str(base),
        live=live,
        kernel=read_kernel(r),
        os_release=read_os_release(r),
        kfd_present=kfd_present,
        kfd_nodes=nodes,
        drm=read_drm(r),
        pci_gpus=read_pci_gpus(r),
        amdgpu_loaded=loaded,
        amdgpu_version=version,
        devices=read_devices(r),
        identity=read_identity(r),
        group_names=names,
        group_members=members,
        container=read_container(r),
        env=env,
        python=python_version(sites, live),
        rocm=rocm,
        dists=dists,
        tools=read_tools(r, live),
        audits=audit_installed(dists, rocm, r) if audit and has_gpu else (),
        audited=audit and has_gpu,
        indexes=read_indexes(r, sites),
        libraries=read_library_copies(r, env.get("LD_LIBRARY_PATH", ""), dists),
        payloads=read_payloads(dists),
        glibc=glibc,
        glibc_where=glibc_where,
        glibcxx=glibcxx,
        glibcxx_where=glibcxx_where,
        probe=read_probe(r, live, dists, probe),
        cmdline=read_cmdline(r),
    )
