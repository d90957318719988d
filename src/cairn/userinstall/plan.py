"""Stage planner for the ``user-install`` gate: one ``gate:user-install:wheels@<gfx>`` per target, and the host roots.

It comes after the gates stage and before the bundle (``cairn.stages``): its verdict goes into the bundle, and so
onto the matrix page, like any other gate's. The gate installs from the *published* index, so its action depends
on what the bundle is made from (the family's index, the SDK and framework packages and mirrors) and its inputs
hold the bundle's own inputs, narrowed to the family and the target: the runner makes that bundle and publishes
it, as ``cairn publish`` does, into scratch space (``cairn.userinstall.run``). It also depends on the stock hosts it
may use (``host:<name>``, kind ``host-rootfs``): Debian 12 (glibc 2.36, Python 3.11), Debian 13 (2.41, 3.13) and
sid (the newest glibc, and the only Python 3.14 of the three, which the 3.14-only cells need). Which of them a
cell gets is decided when the wheels' tags are known (``cairn.userinstall.gate.choose_hosts``): every admitted host
where the release's channel requires the gate, else the oldest one (a dev build's gate in minutes).

The action also names the images planned for its target and the framework each serves, so a cell's verdict is
also its image's (``cairn gate`` lists them per image; the runtime image stands for the SDK every cell installs).

Without a Docker Engine or mmdebstrap here the actions are planned *blocked* with the reason, and the bundle
records the gate as not run, saying why.
"""

from __future__ import annotations

import dataclasses

from cairn import digest
from cairn.gates.summary import TARGET_WIDE
from cairn.plan.context import StageContext
from cairn.plan.graph import Action
from cairn.plan.ids import action_id, parse_action_id
from cairn.publish import plan as bundle_plan
from cairn.userinstall.hosts import HOSTS, LAYOUT, host_id

GATE = "user-install"
KIND = "user-install"
HOST_KIND = "host-rootfs"
GATE_LAYOUT = 1
BUILD_HOSTS = ("debian-12", "debian-13", "debian-sid")
# what the gate needs of the bundle's dependencies: the wheels and their records, no image, gate or source .deb
WHEEL_KINDS = ("index", "package", "mirror")


def extend_plan(context: StageContext) -> None:
    blocked = _blocked(context)
    hosts = [_host_action(context, name, blocked) for name in BUILD_HOSTS]
    scratch = dataclasses.replace(context, actions=dict(context.actions), notes=[])
    bundle_plan.extend_plan(scratch)  # the bundle's inputs as the bundle stage will plan them, without these gates
    bundle = scratch.actions[bundle_plan.ACTION_ID]
    deps = tuple(d for d in bundle.deps if context.actions[d].kind in WHEEL_KINDS)
    channel = context.manifest.release.channel
    required = GATE in context.manifest.gates.get(channel, ())
    for family, targets in bundle.inputs["families"].items():
        if f"index:{family}" not in deps:
            continue  # no wheels of the family can be built here: the bundle says why, and there is nothing to install
        for target in targets:
            inputs = {key: value for key, value in bundle.inputs.items()
                      if key not in ("planned_gates", "planned_images", "image_gates", "not_built")}
            inputs.update(families={family: [target]}, planned_gates=[], planned_images=[], image_gates={}, not_built={})
            gate_id = action_id("gate", f"{GATE}:{TARGET_WIDE}", target)
            images = {parse_action_id(i).name: inputs["image_frameworks"].get(parse_action_id(i).name, "")
                      for i in bundle.inputs["planned_images"] if parse_action_id(i).where == target}
            context.actions[gate_id] = Action(gate_id, KIND, {
                "layout": GATE_LAYOUT, "code": digest.stage_code_digest("user-install"), "gate": GATE, "image": TARGET_WIDE,
                "target": target, "family": family, "hosts": list(BUILD_HOSTS), "every_host": required, "required": required,
                "channel": channel, "images": dict(sorted(images.items())), "bundle": inputs}, (*deps, *hosts), family=family, blocked=blocked)


def _blocked(context: StageContext) -> str:
    if not context.host.docker_host:
        return "no Docker Engine runs here (cairn services start): the user-install gate runs stock hosts in it"
    if "mmdebstrap" not in context.host.tools and not context.host.mmdebstrap_version:
        return "mmdebstrap is not installed: the user-install gate builds its stock hosts with it (apt install mmdebstrap)"
    return ""


def _host_action(context: StageContext, name: str, blocked: str) -> str:
    host = HOSTS[name]
    hid = host_id(name)
    if hid not in context.actions:
        context.actions[hid] = Action(hid, HOST_KIND, {
            "layout": LAYOUT, "code": digest.stage_code_digest("host-rootfs"), "host": host.name, "suite": host.suite,
            "mirror": "host", "epoch": context.manifest.release.source_date_epoch, "tool": context.host.mmdebstrap_version},
            blocked=blocked)  # a root no gate can use here is not worth the minutes it takes
    return hid
