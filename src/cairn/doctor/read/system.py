"""The system around the GPU: kernel release, OS, the container the doctor runs in, and its environment.

Paths read, relative to the root: ``proc/sys/kernel/osrelease``, ``proc/cmdline`` (the kernel's boot
parameters: ``nomodeset`` keeps amdgpu from driving the GPU), ``etc/os-release``, ``.dockerenv``,
``run/.containerenv``, ``proc/1/cgroup`` and ``proc/self/environ``.
"""

from __future__ import annotations

from cairn.doctor.read.files import Root, text_of

# environment variables the doctor keeps (nothing else leaves the host in --json output)
ENV_PREFIXES = ("HSA_", "HIP_", "ROCR_", "ROCM_", "GPU_DEVICE_ORDINAL", "AMD_", "PYTORCH_ROCM_ARCH", "LD_LIBRARY_PATH")


def read_kernel(r: Root) -> str:
    return text_of(r("proc/sys/kernel/osrelease")).strip()


def read_cmdline(r: Root) -> tuple[str, ...]:
    """The kernel's boot parameters, one word each (``nomodeset``, ``amdgpu.modeset=0``, ``amd_iommu=off``)."""
    return tuple(text_of(r("proc/cmdline")).split())


def read_os_release(r: Root) -> dict[str, str]:
    out = {}
    for line in text_of(r("etc/os-release")).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return out


def read_container(r: Root) -> str:
    """The container the doctor runs in (docker, podman, kubernetes, containerd, lxc); "" on a plain host."""
    if r(".dockerenv").exists():
        return "docker"
    if r("run/.containerenv").exists():
        return "podman"
    cgroup = text_of(r("proc/1/cgroup"))
    for marker, name in (("kubepods", "kubernetes"), ("libpod", "podman"), ("docker", "docker"),
                         ("containerd", "containerd"), ("lxc", "lxc")):
        if marker in cgroup:
            return name
    return ""


def read_env(r: Root) -> dict[str, str]:
    """The ROCm-related variables of the doctor's own environment (``ENV_PREFIXES``), sorted by name."""
    raw = text_of(r("proc/self/environ"))
    env = {}
    for item in raw.split("\0"):
        key, sep, value = item.partition("=")
        if sep and key.startswith(ENV_PREFIXES):
            env[key] = value
    return dict(sorted(env.items()))
