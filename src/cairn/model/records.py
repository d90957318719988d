"""The records one stage writes into its output tree for the next: ``image.json``, ``push.json``, ``report.json``.

An image build records what it built (``image.json``: digest, layers, tags), its push where the registry holds it
(``push.json``: the reference every gate and build container pulls), a wheel build what it wrote and what the audit
found (``report.json``: files, platform tag, the targets a family's libraries lack). Every stage that reads one —
the gates, the image build on a parent, the bundle, the index, ``cairn image list`` — reads it through the record
here, never as a raw dict (the wheels stage itself aside, below): the fields are declared once with the ``Table``/``Field`` of the manifest reader
(``cairn.model.json_reader`` checks a file against them, ``cairn.model.schema`` exports each as a JSON Schema under
``schemas/``), and a damaged record is one ``InputError`` line naming the file and the key, not a ``KeyError`` deep
in a runner.

Each record writes itself (``write``) with exactly the keys and bytes its writer always wrote (indented, sorted
keys), so moving the writers here changed no output tree and no action's output digest. The wheels stage is the
exception: it still writes (``cairn.wheels.sdk.write_report``) and, for its index, reads ``report.json`` itself,
because the code of ``wheels/`` is part of every wheel action's key (``cairn.digest.STAGE_CODE``) and switching it
to the record would rebuild every wheel of a store for the same bytes; what it writes is a ``WheelReport`` to the
byte (tests/model/test_records.py, tests/wheels/test_device_wheels.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.model import json_reader
from cairn.model.json_reader import JsonSection
from cairn.model.reader import Field, Table

IMAGE_SCHEMA = "cairn.image/v1"
PUSH_SCHEMA = "cairn.push/v1"
WHEELS_SCHEMA = "cairn.wheels/v1"
IMAGE_FILE, PUSH_FILE, REPORT_FILE = "image.json", "push.json", "report.json"
WHEEL_PARTS = ("core", "devel", "libraries", "device", "meta", "meta-target", "engine", "mirror", "framework",
               "hip-extension")

_DIGEST = r"^sha256:[0-9a-f]{64}$"
_SHA256 = r"^[0-9a-f]{64}$"
_FIX = "it is written by cairn build: rebuild the action that wrote it (cairn build --only ACTION)"


def _dump(data: Mapping[str, Any]) -> str:
    """Every record's bytes: indented, keys sorted, one trailing newline (as the writers always wrote them)."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _text(doc: str = "", **extra: Any) -> Field:
    return Field("string", doc=doc, **extra)


def _required(doc: str = "", **extra: Any) -> Field:
    return Field("string", doc=doc, required=True, **extra)


def _digest(doc: str) -> Field:
    return Field("string", doc=doc, required=True, pattern=_DIGEST, nonempty=True)


# -- image.json ---------------------------------------------------------------------------------------------------
LAYER = Table({
    "digest": Field("string", required=True, pattern=_DIGEST, doc="the sha256:… digest of the compressed layer blob"),
    "diff_id": Field("string", required=True, pattern=_DIGEST, doc="the sha256:… digest of the uncompressed layer (its DiffID)"),
    "size": Field("integer", required=True, minimum=0, doc="bytes of the compressed blob"),
    "uncompressed_size": Field("integer", required=True, minimum=0, doc="bytes of the layer tar"),
}, what="layer")
IMAGE_WHEEL = Table({
    "project": _required(), "version": _required(), "filename": _required(),
    "sha256": Field("string", required=True, pattern=_SHA256, doc="a sha256 of 64 hex digits"), "size": Field("integer", required=True, minimum=0),
}, what="wheel")
IMAGE_RECORD = Table({
    "schema": Field("string", required=True, enum=(IMAGE_SCHEMA,), doc=IMAGE_SCHEMA),
    "name": Field("string", required=True, nonempty=True, doc="the container recipe: base, runtime, smoke, …"),
    "repo": Field("string", required=True, nonempty=True, doc="the registry repository the image is pushed to"),
    "tags": Field("strings", required=True, doc="the tags the OCI layout names it by"),
    "target": _required("the gfx target it was built for; empty for a target-neutral image (base, toolchain)"),
    "family": _required("the target's family; empty for a target-neutral image"),
    "digest": _digest("the sha256:… digest of the image manifest (what a push preserves and a gate judges)"),
    "config_digest": _digest("the sha256:… digest of the image config"),
    "layers": Field("tables", required=True, table=LAYER, doc="its layers, base first"),
    "labels": Field("table", required=True, table=Table(values=Field("string")), doc="the OCI labels it carries"),
    "packages": Field("integer", minimum=0, doc="base image: how many Debian packages its rootfs installs"),
    "parent": _text("built image: the pushed parent it was built FROM (repo@digest)"),
    "rocm": _text("built image: the release's ROCm version"),
    "kind": _text("built image: the recipe's kind (runtime, smoke, engine, framework, …)"),
    "wheels": Field("tables", table=IMAGE_WHEEL, doc="built image: the wheels of the index it installs, pinned"),
}, what="image record", doc="image.json: one image an image-base or image-build action wrote as an OCI layout")


@dataclass(frozen=True)
class ImageLayer:
    digest: str
    diff_id: str
    size: int
    uncompressed_size: int

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "diff_id": self.diff_id, "size": self.size, "uncompressed_size": self.uncompressed_size}


@dataclass(frozen=True)
class ImageRecord:
    """``image.json``: what an image action built. A base image records its package count; a built image its
    parent, ROCm version, recipe kind and pinned wheels (``None``: not written, as the base never writes them)."""

    name: str
    repo: str
    tags: tuple[str, ...]
    target: str
    family: str
    digest: str
    config_digest: str
    layers: tuple[ImageLayer, ...]
    labels: Mapping[str, str]
    packages: int | None = None
    parent: str | None = None
    rocm: str | None = None
    kind: str | None = None
    wheels: tuple[Mapping[str, Any], ...] | None = None

    @property
    def size(self) -> int:
        """Bytes of its compressed layers."""
        return sum(layer.size for layer in self.layers)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": IMAGE_SCHEMA, "name": self.name, "repo": self.repo, "tags": list(self.tags), "target": self.target,
            "family": self.family, "digest": self.digest, "config_digest": self.config_digest,
            "layers": [layer.to_json() for layer in self.layers], "labels": dict(self.labels)}
        optional = {"packages": self.packages, "parent": self.parent, "rocm": self.rocm, "kind": self.kind,
                    "wheels": None if self.wheels is None else [dict(w) for w in self.wheels]}
        return {**data, **{k: v for k, v in optional.items() if v is not None}}

    def write(self, directory: Path) -> Path:
        path = directory / IMAGE_FILE
        path.write_text(_dump(self.to_json()))
        return path

    @classmethod
    def read(cls, path: Path, fix: str = _FIX) -> ImageRecord:
        """``path`` (an ``image.json``, or the tree holding one) checked against ``IMAGE_RECORD``."""
        path = path / IMAGE_FILE if path.is_dir() else path
        doc = json_reader.read_file(path, IMAGE_RECORD, "image record", fix)
        doc.string("schema")
        layers = tuple(ImageLayer(x.string("digest"), x.string("diff_id"), x.integer("size"), x.integer("uncompressed_size"))
                       for x in doc.tables("layers"))
        labels = doc.table("labels")
        wheels = tuple({key: (w.integer(key) if key == "size" else w.string(key)) for key in IMAGE_WHEEL.fields}
                       for w in doc.tables("wheels")) if "wheels" in doc else None
        return cls(name=doc.string("name"), repo=doc.string("repo"), tags=doc.strings("tags"), target=doc.string("target"),
                   family=doc.string("family"), digest=doc.string("digest"), config_digest=doc.string("config_digest"),
                   layers=layers, labels={key: labels.string(key) for key in labels},
                   packages=doc.integer("packages") if "packages" in doc else None,
                   parent=_optional(doc, "parent"), rocm=_optional(doc, "rocm"), kind=_optional(doc, "kind"), wheels=wheels)


def _optional(doc: JsonSection, key: str) -> str | None:
    return doc.string(key) if key in doc else None


# -- push.json ----------------------------------------------------------------------------------------------------
_PUSHED = ("registry", "repo", "tags", "digest", "reference", "target")
PUSH_RECORD = Table({
    "schema": Field("string", required=True, enum=(PUSH_SCHEMA,), doc=PUSH_SCHEMA),
    "image": _required("pushed: the image's recipe name; blocked: the image action's id"),
    "blocked": _text("why no image was built (its linkage check): the push, its gates and the bundle pass it on",
                     nonempty=True),
    "registry": _text("pushed: the registry (host:port) it was pushed to", nonempty=True),
    "repo": _text("pushed: the repository", nonempty=True),
    "tags": Field("strings", doc="pushed: the tags it was pushed under"),
    "digest": _text("the sha256:… digest of the manifest the registry holds (the image's own)", pattern=_DIGEST),
    "reference": _text("pushed: repo@digest, the reference gates and builds pull (after the registry)", nonempty=True),
    "target": _text("pushed: the gfx target; empty for a target-neutral image"),
}, what="push record", doc="push.json: where an image-push action left the image, or why there was none", json={
    "oneOf": [  # pushed: every key of where it is; blocked: why, and none of them
        {"required": list(_PUSHED), "not": {"required": ["blocked"]}},
        {"required": ["blocked"], "not": {"anyOf": [{"required": [key]} for key in _PUSHED]}}]})


@dataclass(frozen=True)
class PushRecord:
    """``push.json``: the image in a registry by digest, or (``blocked``) why there is no image to push."""

    image: str
    registry: str = ""
    repo: str = ""
    tags: tuple[str, ...] = ()
    digest: str = ""
    reference: str = ""
    target: str = ""
    blocked: str = ""

    @classmethod
    def of_blocked(cls, image_action: str, reason: str) -> PushRecord:
        return cls(image=image_action, blocked=reason)

    def to_json(self) -> dict[str, Any]:
        if self.blocked:
            return {"schema": PUSH_SCHEMA, "blocked": self.blocked, "image": self.image}
        return {"schema": PUSH_SCHEMA, "registry": self.registry, "repo": self.repo, "tags": list(self.tags),
                "digest": self.digest, "reference": self.reference, "image": self.image, "target": self.target}

    def write(self, directory: Path) -> Path:
        path = directory / PUSH_FILE
        path.write_text(_dump(self.to_json()))
        return path

    @classmethod
    def read(cls, path: Path, fix: str = _FIX) -> PushRecord:
        """``path`` (a ``push.json``, or the tree holding one): a pushed image has every key of ``_PUSHED``, a
        blocked one none of them — either mistake is one line naming the file and the key."""
        path = path / PUSH_FILE if path.is_dir() else path
        doc = json_reader.read_file(path, PUSH_RECORD, "push record", fix)
        doc.string("schema")
        blocked = doc.string("blocked")
        if "blocked" in doc:
            extra = next((key for key in _PUSHED if key in doc), None)
            if extra is not None:
                raise doc.fail(extra, "is written, but the push is blocked (no image was pushed)")
            return cls(image=doc.string("image"), blocked=blocked)
        missing = next((key for key in _PUSHED if key not in doc), None)
        if missing is not None:
            raise doc.fail(missing, "is missing")
        return cls(image=doc.string("image"), registry=doc.string("registry"), repo=doc.string("repo"),
                   tags=doc.strings("tags"), digest=doc.string("digest"), reference=doc.string("reference"),
                   target=doc.string("target"))


# -- report.json --------------------------------------------------------------------------------------------------
_STRINGS = Field("strings")
_TARGET_COVERAGE = Table({"covered": Field("boolean", required=True), "via": _STRINGS, "missing": _STRINGS},
                         what="target coverage")
_FAMILY_COVERAGE = Table({"covered": Field("boolean", required=True),
                          "targets": Field("table", table=Table(values=Field("table", table=_TARGET_COVERAGE)))},
                         what="family coverage")
AUDIT = Table({
    "device_binaries": Field("integer", minimum=0, doc="files with device code the audit read"),
    "dropped_data_files": Field("integer", minimum=0, doc="kernel data files the split left out"),
    "targets_everywhere": Field("strings", doc="gfx targets every device binary carries code for"),
    "targets_somewhere": Field("strings", doc="gfx targets some device binary carries code for"),
    "coverage": Field("table", table=Table(values=Field("table", table=_TARGET_COVERAGE)),
                      doc="libraries/device wheel: per target, covered or the files built without its code"),
    "partial": Field("table", table=Table(values=Field("strings")),
                     doc="libraries/device wheel: per partial target, the files built without its code"),
    "families": Field("table", table=Table(values=Field("table", table=_FAMILY_COVERAGE)),
                      doc="mirrored wheel: per family, whether the wheel's device code covers every target"),
}, what="audit")
PLATFORM = Table({"tag": _required("the wheel's platform tag"), "reason": _required("why that tag"),
                  "system_libraries": Field("strings", doc="the system libraries it links")}, what="platform")
REPORT_WHEEL = Table({"filename": Field("string", required=True, nonempty=True),
                      "sha256": Field("string", required=True, pattern=_SHA256, doc="a sha256 of 64 hex digits"),
                      "size": Field("integer", required=True, minimum=0)}, what="wheel")
GRAFT = Table({"file": _required("the grafted copy's file name in the wheel (a mangled soname)"),
               "package": _required("the pinned .deb it came from"), "version": _required("that .deb's version")},
              what="grafted library")
SYMBOL_VERSION = Table({"file": _required("the library file the rewrite applies to (a glob)"),
                        "library": _required("the library whose symbol version is asked for"),
                        "version": _required("the version it asked for"), "to": _required("the version it asks for now"),
                        "symbols": Field("strings", required=True, doc="the symbols rewritten"),
                        "why": _required("the reviewed reason"), "path": _required("the file in the wheel rewritten"),
                        "rename": Field("table", table=Table(values=Field("string")),
                                        doc="symbols renamed to the plain call they check")},
                       what="symbol-version rewrite")
WHEEL_REPORT = Table({
    "schema": Field("string", required=True, enum=(WHEELS_SCHEMA,), doc=WHEELS_SCHEMA),
    "part": Field("string", required=True, enum=WHEEL_PARTS, doc="which wheel action wrote it"),
    "wheels": Field("tables", required=True, table=REPORT_WHEEL, doc="the wheels in wheels/ of the same tree"),
    "sdk_version": _text("the release's SDK version"),
    "family": _text("the gfx family the wheel is built for"),
    "target": _text("the gfx target the wheel is built for (device, meta-target)"),
    "project": _text("the Python project (engine, mirror, framework, hip-extension)"),
    "version": _text("framework: the version the wheel was built as"),
    "upstream_version": _text("framework: the upstream version it was built from"),
    "from": _text("device: the family's libraries wheel it was cut from"),
    "extras": Field("strings", doc="meta wheels: the extras it offers"),
    "tools": Field("strings", doc="engine: the tools staged next to the wheel for its image"),
    "targets": Field("strings", doc="engine, hip-extension: the gfx targets built"),
    "libraries": Field("strings", doc="engine: the libraries it ships"),
    "sonames": Field("strings", doc="core/devel/libraries: the shared libraries it ships"),
    "platform": Field("table", table=PLATFORM, doc="the platform tag and why"),
    "audit": Field("table", table=AUDIT, doc="what the device-code audit of these bytes found"),
    "grafted": Field("table", table=Table(values=Field("table", table=GRAFT)),
                     doc="core/devel/libraries/device: soname → the library grafted for it from a pinned .deb"),
    "symbol_versions": Field("tables", table=SYMBOL_VERSION, doc="the reviewed symbol-version rewrites applied"),
    "sizes": Field("table", table=Table({"grafted_bytes": Field("integer", required=True, minimum=0)}, what="sizes"),
                   doc="bytes the grafted libraries add"),
    "needed": Field("strings", doc="engine: the libraries its own ELF files load from elsewhere (DT_NEEDED)"),
}, what="wheel report", doc="report.json: what a package or mirror action wrote next to wheels/")


@dataclass(frozen=True)
class ReportWheel:
    filename: str
    sha256: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"filename": self.filename, "sha256": self.sha256, "size": self.size}


@dataclass(frozen=True)
class WheelReport:
    """``report.json``: the wheels a package or mirror action wrote and what is known about them. Keys a part never
    writes are ``None`` (the core wheel has no ``family``; a mirror no ``platform``). ``audit`` and ``platform``
    keep the objects as written; ``partial``, ``covers`` read what the bundle, the gates and the index need."""

    part: str
    wheels: tuple[ReportWheel, ...] = ()
    sdk_version: str | None = None
    family: str | None = None
    target: str | None = None
    project: str | None = None
    version: str | None = None
    upstream_version: str | None = None
    from_wheel: str | None = None  # "from" in the file
    extras: tuple[str, ...] | None = None
    tools: tuple[str, ...] | None = None
    targets: tuple[str, ...] | None = None
    libraries: tuple[str, ...] | None = None
    sonames: tuple[str, ...] | None = None
    platform: Mapping[str, Any] | None = None
    audit: Mapping[str, Any] | None = None
    grafted: Mapping[str, Mapping[str, str]] | None = None  # soname → {file, package, version}
    symbol_versions: tuple[Mapping[str, Any], ...] | None = None
    sizes: Mapping[str, int] | None = None
    needed: tuple[str, ...] | None = None

    def partial(self) -> dict[str, tuple[str, ...]]:
        """Target → the files built without its code, as the wheel's audit recorded them (empty: none)."""
        found = (self.audit or {}).get("partial") or {}
        return {target: tuple(paths) for target, paths in found.items()}

    def covers(self, family: str) -> bool:
        """A mirrored wheel's audit says its device code covers every target of ``family``."""
        return bool(((self.audit or {}).get("families") or {}).get(family, {}).get("covered"))

    def to_json(self) -> dict[str, Any]:
        optional: dict[str, Any] = {
            "sdk_version": self.sdk_version, "family": self.family, "target": self.target, "project": self.project,
            "version": self.version, "upstream_version": self.upstream_version, "from": self.from_wheel,
            "extras": self.extras, "tools": self.tools, "targets": self.targets, "libraries": self.libraries,
            "sonames": self.sonames, "platform": self.platform, "audit": self.audit, "grafted": self.grafted,
            "symbol_versions": [dict(e) for e in self.symbol_versions] if self.symbol_versions is not None else None,
            "sizes": self.sizes, "needed": self.needed}
        return {"schema": WHEELS_SCHEMA, "part": self.part, "wheels": [w.to_json() for w in self.wheels],
                **{k: (list(v) if isinstance(v, tuple) else v) for k, v in optional.items() if v is not None}}

    def write(self, directory: Path) -> Path:
        path = directory / REPORT_FILE
        path.write_text(_dump(self.to_json()))
        return path

    @classmethod
    def read(cls, path: Path, fix: str = _FIX) -> WheelReport:
        """``path`` (a ``report.json``, or the tree holding one) checked against ``WHEEL_REPORT``, down to every
        key of its audit."""
        path = path / REPORT_FILE if path.is_dir() else path
        doc = json_reader.read_file(path, WHEEL_REPORT, "wheel report", fix)
        doc.string("schema")
        wheels = tuple(ReportWheel(w.string("filename"), w.string("sha256"), w.integer("size")) for w in doc.tables("wheels"))

        def strings(key: str) -> tuple[str, ...] | None:
            return doc.strings(key) if key in doc else None

        platform = None
        if "platform" in doc:
            section = doc.table("platform")
            platform = {"tag": section.string("tag"), "reason": section.string("reason"),
                        **({"system_libraries": list(section.strings("system_libraries"))} if "system_libraries" in section else {})}
        audit = _audit(doc.table("audit")) if "audit" in doc else None
        grafted = None
        if "grafted" in doc:
            section = doc.table("grafted")
            grafted = {soname: {key: section.table(soname).string(key) for key in ("file", "package", "version")}
                       for soname in section}
        symbol_versions = None
        if "symbol_versions" in doc:
            symbol_versions = tuple({**{key: entry.string(key) for key in ("file", "library", "version", "to", "why", "path")},
                                     "symbols": list(entry.strings("symbols")),
                                     **({"rename": {k: entry.table("rename").string(k) for k in entry.table("rename")}}
                                        if "rename" in entry else {})}
                                    for entry in doc.tables("symbol_versions"))
        sizes = {"grafted_bytes": doc.table("sizes").integer("grafted_bytes")} if "sizes" in doc else None
        return cls(part=doc.string("part"), wheels=wheels, sdk_version=_optional(doc, "sdk_version"),
                   family=_optional(doc, "family"), target=_optional(doc, "target"), project=_optional(doc, "project"),
                   version=_optional(doc, "version"), upstream_version=_optional(doc, "upstream_version"),
                   from_wheel=_optional(doc, "from"), extras=strings("extras"), tools=strings("tools"),
                   targets=strings("targets"), libraries=strings("libraries"), sonames=strings("sonames"),
                   platform=platform, audit=audit, grafted=grafted, symbol_versions=symbol_versions, sizes=sizes,
                   needed=strings("needed"))


def _audit(section: JsonSection) -> dict[str, Any]:
    """The audit object checked key by key; returned as written (its bytes are part of the report's)."""
    for key in ("device_binaries", "dropped_data_files"):
        if key in section:
            section.integer(key)
    for key in ("targets_everywhere", "targets_somewhere"):
        if key in section:
            section.strings(key)
    if "partial" in section:
        partial = section.table("partial")
        for target in partial:
            partial.strings(target)
    if "coverage" in section:
        coverage = section.table("coverage")
        for target in coverage:
            _coverage(coverage.table(target))
    if "families" in section:
        families = section.table("families")
        for family in families:
            entry = families.table(family)
            entry.boolean("covered")
            if "targets" in entry:
                targets = entry.table("targets")
                for target in targets:
                    _coverage(targets.table(target))
    return section.data


def _coverage(section: JsonSection) -> None:
    section.boolean("covered")
    for key in ("via", "missing"):
        if key in section:
            section.strings(key)


RECORDS: dict[str, Table] = {"image-record": IMAGE_RECORD, "push-record": PUSH_RECORD, "wheel-report": WHEEL_REPORT}
