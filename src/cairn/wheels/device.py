"""``rocm-sdk-device-<gfx>``: the expansion libraries cut to one gfx target, made from the family's wheel.

A user with one RX 7900 XTX needs gfx1100's code objects, not those of every GPU of its family: this wheel
carries exactly what ``rocm-sdk-libraries-<family>`` carries, with every fat binary split again to the one
target and the other targets' kernel files (Tensile, MIOpen) left out. It installs into the same
``_rocm_sdk_libraries/`` as the family wheel, so everything linked against the family wheel (the ``rocm_sdk``
runtime, engine and framework wheels, whose RPATHs name that directory) loads it unchanged.

Why the host code comes along: Debian's HIP runtime reads device code only from the ``.hip_fatbin`` section of
the library that registers it. A split into a host-only library plus separate code-object files needs a
runtime built to find them (TheRock's kpack, ``ROCM_KPACK_ENABLED``), which Debian's 7.2.4 runtime is not.
The same reason makes device wheels of two targets replace each other's files: a host with GPUs of two
targets of one family installs the family wheel (``rocm-sdk[<family>]``).

Each device wheel is written twice: as ``rocm-sdk-device-<gfx>`` (the extra's) and as the PEP 825 variant
``rocm-sdk-device-…-<gfx>.whl`` (``cairn.wheels.variants``), same files: the twin copies the plain wheel's
compressed members (``write_twin``), so the payload is deflated and hashed once.

Made from the family wheel, not from the SDK tree: the family's split has already dropped every other
family's code, so this split reads a fraction of the bytes, and a single-target family is repacked as it is.
"""

from __future__ import annotations

import json
import shutil
import stat
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from cairn.errors import CairnError
from cairn.wheels import variants
from cairn.wheels.sdk import LIBRARIES, ROOTS, FamilySplit, scratch_dir, write_report
from cairn.wheels.wheelfile import Member, Metadata, parse_filename, write_twin, write_wheel

ROOT = ROOTS[LIBRARIES] + "/"
INFO = ROOT + "share/cairn/libraries.json"


def device_name(target: str) -> str:
    """The distribution name users type (``rocm-sdk[device-gfx1100]`` pulls ``rocm-sdk-device-gfx1100``)."""
    return f"rocm-sdk-device-{target}"


def build_device_wheel(out: Path, family_tree: Path, inputs: dict[str, Any], log: IO[str]) -> Path:
    """``rocm-sdk-device-<target>`` and its variant from the family wheel in ``family_tree/wheels`` into
    ``out/wheels``; returns the plain one."""
    family, target, version = inputs["family"], inputs["target"], inputs["sdk_version"]
    family_wheel = _the_wheel(family_tree, family)
    single = tuple(inputs["family_targets"]) == (target,)
    with scratch_dir(out) as scratch_name:
        scratch = Path(scratch_name)
        split = FamilySplit(target, (target,), log, name=device_name(target))
        members, licences = _cut(family_wheel, scratch, split, single, log)
        audit = split.coverage()
        info = scratch / "libraries.json"
        info.write_text(json.dumps({"family": family, "target": target, "targets": [target], "version": version,
                                    "audit": audit}, indent=2, sort_keys=True) + "\n")
        members.append(Member(INFO, source=info))
        summary = f"ROCm expansion libraries with the device code of {target} alone ({family})"
        missing = audit["partial"].get(target, [])
        if missing:
            summary += " — partial"
        metadata = Metadata(name=device_name(target), version=version, summary=summary,
                            requires_dist=(f"rocm-sdk-core=={version}",), requires_python=">=3.8",
                            license="Various (see .dist-info/licenses)",
                            description=f"{summary}.\n\nBuilt by Cairn from {inputs['release']} {version}: "
                                        f"{family_wheel.name} cut to {target}."
                                        + (f"\n\nPartial: no {target} code in {', '.join(missing)}." if missing else ""))
        tag = parse_filename(family_wheel.name)[2]
        wheel = write_wheel(out / "wheels", metadata, tag, members, source_date_epoch=inputs["source_date_epoch"],
                            extra_dist_info=licences)
        # the same payload as the PEP 825 variant of rocm-sdk-device that AMD's provider selects on this target,
        # its compressed members copied from the plain wheel rather than deflated a second time
        variant = write_twin(wheel, out / "wheels", replace(metadata, name=variants.DISTRIBUTION), tag,
                             source_date_epoch=inputs["source_date_epoch"], label=variants.variant_label(target),
                             extra_dist_info=[*licences, Member("variant.json", data=variants.dumps(variants.variant_json(target)))])
    write_report(out, [wheel, variant], {"part": "device", "family": family, "target": target, "sdk_version": version,
                                "audit": audit, "from": family_wheel.name,
                                "platform": {"tag": tag, "reason": f"as {family_wheel.name}"}})
    return wheel


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == b"\x7fELF"


def _the_wheel(tree: Path, family: str) -> Path:
    found = sorted((tree / "wheels").glob("*.whl"))
    if len(found) != 1:
        raise CairnError(f"package:rocm-sdk-libraries@{family} holds {len(found)} wheels, expected one — rebuild it")
    return found[0]


def _cut(wheel: Path, scratch: Path, split: FamilySplit, single: bool, log: IO[str]) -> tuple[list[Member], list[Member]]:
    """The family wheel's library files for the one target (split copies in ``scratch``), and its licences."""
    members: list[Member] = []
    licences: list[Member] = []
    with zipfile.ZipFile(wheel) as archive:
        for entry in archive.infolist():
            name = entry.filename
            if entry.is_dir() or name == INFO:
                continue
            if ".dist-info/licenses/" in name:
                licences.append(Member(name.split(".dist-info/", 1)[1], data=archive.read(entry)))
                continue
            if not name.startswith(ROOT):
                continue  # the family wheel's own dist-info
            rel = name.removeprefix(ROOT)
            if split.drops(rel):
                continue
            executable = bool((entry.external_attr >> 16) & stat.S_IXUSR)
            source = scratch / f"{len(members)}.orig"
            with archive.open(entry) as src, open(source, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            if not _is_elf(source):
                pass
            elif not single:
                copy = scratch / f"{len(members)}.split"
                if split.split_into(rel, source, copy):
                    source.unlink()
                    source = copy
            elif split.audit_only(rel, source):
                log.write(f"kept {rel} as it is: {split.family} is its family's only target\n")
            members.append(Member(name, source=source, executable=executable))
    return members, licences
