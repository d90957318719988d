"""Who may open the GPU: the device files, the user the doctor runs as, and the groups on the host.

Paths read, relative to the root: ``dev/kfd`` and ``dev/dri/{card*,renderD*}`` (existence, owner, group and
mode), ``proc/self/status`` (Uid/Gid/Groups), ``etc/passwd`` and ``etc/group``. On a live host
``proc/self`` is this very process, which is exactly what the user's programs get.
"""

from __future__ import annotations

import contextlib
import os
import stat

from cairn.doctor.read.files import Root, int_of, text_of
from cairn.doctor.snapshot import DeviceNode, Identity


def read_devices(r: Root) -> tuple[DeviceNode, ...]:
    paths = ["/dev/kfd"]
    dri = r("dev/dri")
    with contextlib.suppress(OSError):
        paths += sorted(f"/dev/dri/{p.name}" for p in dri.iterdir() if p.name.startswith(("card", "renderD")))
    out = []
    for shown in paths:
        try:
            st = os.stat(r(shown))
        except OSError:
            out.append(DeviceNode(shown, False))
            continue
        out.append(DeviceNode(shown, True, st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), stat.S_ISCHR(st.st_mode)))
    return tuple(out)


def read_identity(r: Root) -> Identity:
    """Real uid/gid and supplementary groups from ``proc/self/status``."""
    fields: dict[str, list[int]] = {}
    for line in text_of(r("proc/self/status")).splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            fields[key] = [int_of(v) for v in value.split()]
    uid = (fields.get("Uid") or [os.getuid() if str(r.base) == "/" else 0])[0]
    gid = (fields.get("Gid") or [0])[0]
    groups = tuple(sorted(set(fields.get("Groups", [])) | {gid}))
    name = ""
    for line in text_of(r("etc/passwd")).splitlines():
        parts = line.split(":")
        if len(parts) > 3 and int_of(parts[2], -1) == uid:
            name = parts[0]
            break
    return Identity(uid, gid, groups, name)


def read_groups(r: Root) -> tuple[dict[int, str], dict[int, tuple[str, ...]]]:
    """Group names by gid, and the users ``etc/group`` lists in each."""
    names: dict[int, str] = {}
    members: dict[int, tuple[str, ...]] = {}
    for line in text_of(r("etc/group")).splitlines():
        parts = line.split(":")
        if len(parts) < 4 or not parts[2].isdigit():
            continue
        gid = int(parts[2])
        names.setdefault(gid, parts[0])
        members[gid] = tuple(m for m in parts[3].split(",") if m)
    return names, members
