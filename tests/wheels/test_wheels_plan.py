"""The wheels stage's plan: exact PyTorch/vLLM builds that report "needs …", SDK and index actions."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.errors import ManifestError
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.model.wheel_recipes import load_recipe
from cairn.plan.prepare import make_plan
from cairn.plan.probe import Host
from cairn.stages import STAGES
from support import ROOT

HOST = Host(tools=frozenset({"git", "pip", "patchelf", "apt-get", "dpkg-deb", "hipcc"}),
            hipcc_version="hip 5.2.21153-0; clang 15.0.6", hip_targets=frozenset({"gfx908", "gfx90a", "gfx1030"}))
PIN_REASON = "no commit of ROCm/pytorch release/2.12 is recorded here: pin it with git ls-remote on a host that reaches github.com"
TORCH = '[frameworks.pytorch]\nrecipe = "pytorch"\nversion = "2.12.0"\npin_unknown = "ROCm/pytorch release/2.12 is a branch"\n'
SGLANG = ('[frameworks.sglang]\nrecipe = "sglang"\nversion = "0.5.10.post1"\nsource.pypi = { name = "sglang", version = "0.5.10.post1", '
          'filename = "sglang-0.5.10.post1.tar.gz", sha256 = "01f7adfe7cde85b238fb0e1bae4b31d494e19d1471cf35ff3c5489a02f9d2263" }\n')
JAX_WHEEL = "jax_rocm7_plugin-0.10.0-cp311-cp311-manylinux_2_28_x86_64.whl"
JAX = ('[frameworks.jax]\nrecipe = "jax"\nversion = "0.10.0"\nsource.pypi = { name = "jax-rocm7-plugin", version = "0.10.0", '
       f'filename = "{JAX_WHEEL}", sha256 = "41fc46f1ce64207f8f144cb0d89f304dadd4a4f4de5c541ad44de380afad43bd" }}\n')


def _plan(manifest: Path, families: list[str]):
    registry = load_registry()
    return make_plan(load_manifest(manifest, registry), registry, families, host=HOST, stages=STAGES).by_id()


def _manifest_with(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "release.toml"
    base = (ROOT / "manifests" / "releases" / "rocm-5.2.3.toml").read_text().split("\n[frameworks.")[0]
    path.write_text(base + "\n" + extra)
    return path


def test_pytorch_plan_is_exact_and_blocked(tmp_path):
    actions = _plan(ROOT / "manifests" / "releases" / "rocm-7.14.0.toml", ["gfx90a"])
    torch = actions["package:torch@gfx90a"]
    assert torch.blocked == (
        f"needs a pinned torch 2.12.0 source ({PIN_REASON}); a ROCm ≥ 6 toolchain: rocm-sdk-devel 7.14.0 built from "
        "this manifest on a TheRock build host (this host has hip 5.2.21153-0; clang 15.0.6)")
    assert torch.deps == ("fetch:pytorch@2.12.0", "package:rocm-sdk-core", "package:rocm-sdk-devel",
                          "package:rocm-sdk-libraries@gfx90a", "package:rocm-sdk")
    inputs = dict(torch.inputs)
    inputs.pop("tools")
    inputs.pop("recipe_sha256")
    assert inputs == {
        "release": "rocm", "channel": "stable", "sdk_version": "7.14.0", "source_date_epoch": 1783633696,
        "part": "framework", "recipe": "pytorch", "project": "torch", "version": "2.12.0",
        "build_version": "2.12.0+rocm.7.14.0", "device_code": True, "targets": ["gfx90a"], "python": "3.10",
        "source": {"git": {"url": "https://github.com/ROCm/pytorch.git", "ref": "release/2.12"}},
        "env": {
            "BUILD_TEST": "0", "CMAKE_PREFIX_PATH": "{rocm_home}/lib/cmake", "MAX_JOBS": "{jobs}",
            "PYTORCH_BUILD_NUMBER": "0", "PYTORCH_BUILD_VERSION": "2.12.0+rocm.7.14.0",
            "PYTORCH_EXTRA_INSTALL_REQUIREMENTS": "rocm-sdk-core==7.14.0|rocm-sdk-libraries-gfx90a==7.14.0",
            "PYTORCH_ROCM_ARCH": "gfx90a", "ROCM_HOME": "{rocm_home}", "ROCM_PATH": "{rocm_home}", "USE_CUDA": "0",
            "USE_FLASH_ATTENTION": "1", "USE_MEM_EFF_ATTENTION": "1", "USE_ROCM": "1",
        },
        "commands": [
            ["{python}", "tools/amd_build/build_amd.py"],
            ["{python}", "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--disable-pip-version-check",
             "-w", "{dist}", "."],
        ],
        "build_requires": ["cmake==3.31.6", "ninja==1.11.1.4", "setuptools==80.9.0", "wheel==0.45.1", "pyyaml==6.0.2",
                           "typing-extensions==4.14.1", "numpy==2.2.6"],
        "requires": ["rocm-sdk-core==7.14.0", "rocm-sdk-libraries-gfx90a==7.14.0"],
        "upstream_wheel": "torch-2.12.0+rocm.7.14.0-cp310-cp310-linux_x86_64.whl",
        "wheel": "torch-2.12.0+rocm.7.14.0-cp310-cp310-linux_x86_64.whl",
        "fetch": "fetch:pytorch@2.12.0",
    }
    assert actions["fetch:pytorch@2.12.0"].blocked == f"pin unknown for torch 2.12.0: {PIN_REASON}"


def test_pytorch_arch_list_is_family_targets_minus_exclusions(tmp_path):
    actions = _plan(ROOT / "manifests" / "releases" / "rocm-7.14.0.toml", ["gfx110X-all", "gfx94X-dcgpu"])
    assert actions["package:torch@gfx110X-all"].inputs["env"]["PYTORCH_ROCM_ARCH"] == "gfx1100;gfx1101;gfx1102;gfx1103"
    assert actions["package:torch@gfx94X-dcgpu"].inputs["env"]["PYTORCH_ROCM_ARCH"] == "gfx942"


def test_vllm_builds_on_the_same_family_torch(tmp_path):
    actions = _plan(ROOT / "manifests" / "releases" / "rocm-7.14.0.toml", ["gfx90a"])
    vllm = actions["package:vllm@gfx90a"]
    assert vllm.deps[-1] == "package:torch@gfx90a"
    assert vllm.inputs["env"] == {"MAX_JOBS": "{jobs}", "PYTORCH_ROCM_ARCH": "gfx90a", "ROCM_HOME": "{rocm_home}",
                                  "ROCM_PATH": "{rocm_home}", "SETUPTOOLS_SCM_PRETEND_VERSION": "0.23.0+rocm.7.14.0",
                                  "VLLM_TARGET_DEVICE": "rocm"}
    assert vllm.inputs["wheel"] == "vllm-0.23.0+rocm.7.14.0-cp38-abi3-linux_x86_64.whl"
    assert vllm.blocked.startswith("needs a ROCm ≥ 6 toolchain: rocm-sdk-devel 7.14.0 built from this manifest")
    assert vllm.inputs["source"] == {"pypi": {"name": "vllm", "version": "0.23.0", "filename": "vllm-0.23.0.tar.gz",
                                              "sha256": "760269db3d9611e12e524681df1bca0977d5d2f5fcb4481cc34d33efc4ae7ff5"}}


def test_default_release_says_pytorch_needs_rocm_6(tmp_path):
    manifest = _manifest_with(tmp_path, TORCH)
    torch = _plan(manifest, ["gfx90a"])["package:torch@gfx90a"]
    assert torch.blocked == (f"needs a pinned torch 2.12.0 source ({PIN_REASON}); "
                             "a ROCm ≥ 6 SDK (this release ships ROCm 5.2.3)")


def test_default_release_stage_actions(tmp_path):
    manifest = _manifest_with(tmp_path, SGLANG)
    actions = _plan(manifest, [])
    for fam in ("gfx908", "gfx90a", "gfx1030"):
        index = actions[f"index:{fam}"]
        assert set(index.deps) == {"package:rocm-sdk-core", "package:rocm-sdk-devel", "package:rocm-sdk",
                                   f"package:rocm-sdk-libraries@{fam}", f"package:rocm-sdk-device@{fam}",
                                   f"package:cairn-smoke@{fam}", "package:sglang"}
        assert not index.blocked
    assert actions["package:sglang"].inputs["build_version"] == "0.5.10.post1+rocm.5.2.3.dev.1700000000"
    assert actions["package:cairn-smoke@gfx1030"].inputs["requires"] == ["rocm-sdk[gfx1030]==5.2.3.dev1700000000"]
    assert actions["package:rocm-sdk"].inputs["families"] == ["gfx908", "gfx90a", "gfx1030"]


def test_unknown_recipe_version_is_located(tmp_path):
    manifest = _manifest_with(tmp_path, JAX.replace('version = "0.10.0"\nsource', 'version = "0.9.9"\nsource'))
    with pytest.raises(ManifestError, match=r"recipe 'jax' has no version 0.9.9 \(it pins: 0.10.0\)"):
        _plan(manifest, ["gfx90a"])


@pytest.mark.parametrize(("case", "framework", "what"), [
    ("other sdist", SGLANG.replace("01f7adfe", "01f7adff"),
     "framework 'sglang' pins sglang-0.5.10.post1.tar.gz (sha256 01f7adff7cde85b2…) but recipes/wheels/sglang.toml has "
     "sglang-0.5.10.post1.tar.gz (sha256 01f7adfe7cde85b2…)"),
    ("unknown here, pinned there", '[frameworks.sglang]\nrecipe = "sglang"\nversion = "0.5.10.post1"\npin_unknown = "not looked up"\n',
     "framework 'sglang' says no pin is known, but recipes/wheels/sglang.toml pins sglang-0.5.10.post1.tar.gz (sha256 01f7adfe7cde85b2…)"),
    ("pinned here, unknown there", TORCH.replace('pin_unknown = "ROCm/pytorch release/2.12 is a branch"',
                                                 'source.git = { url = "https://github.com/ROCm/pytorch.git", commit = "' + "c" * 40 + '" }'),
     "framework 'pytorch' pins https://github.com/ROCm/pytorch.git@" + "c" * 40 + " but recipes/wheels/pytorch.toml has pin_unknown"),
    ("other mirrored wheel", JAX.replace(JAX_WHEEL, JAX_WHEEL.replace("cp311", "cp312")),
     f"framework 'jax' pins {JAX_WHEEL.replace('cp311', 'cp312')} (sha256 41fc46f1ce64207f…) but recipes/wheels/jax.toml "
     f"mirrors {JAX_WHEEL} (sha256 41fc46f1ce64207f…)"),
], ids=["other sdist", "unknown here, pinned there", "pinned here, unknown there", "other mirrored wheel"])
def test_manifest_and_recipe_pin_the_same_framework_input(tmp_path, case, framework, what):
    manifest = _manifest_with(tmp_path, framework)
    with pytest.raises(ManifestError) as caught:
        _plan(manifest, ["gfx90a"])
    text = manifest.read_text()
    start = text.index(framework)  # the error points at the manifest's pin, or at the table when it has none
    marker = text.index("source.", start) if "source." in framework else start
    line = text[:marker].count("\n") + 1
    assert str(caught.value).startswith(f"{manifest}:{line}:"), str(caught.value)
    assert what in str(caught.value)


def test_recipe_rejects_floating_source(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('kind = "source"\nproject = "x"\n[versions."1.0"]\nsource.git = { url = "https://example.invalid/x.git", ref = "main" }\n'
                   '[build]\ncommands = [["true"]]\nwheel = "x-{version}-py3-none-any.whl"\n')
    with pytest.raises(ManifestError, match=r"bad.toml:4:\d+: floating source for bad 1.0 — pin commit"):
        load_recipe("bad", bad)


def test_an_index_never_mixes_rocm_majors(tmp_path):
    """The ROCm 7 JAX plugin asked of the ROCm 5.2.3 release is refused at planning, naming the manifest's pin,
    the recipe and the fix — it used to be mirrored into every 5.2.3 index."""
    manifest = _manifest_with(tmp_path, JAX)
    with pytest.raises(ManifestError) as caught:
        _plan(manifest, ["gfx90a"])
    text = manifest.read_text()
    line = text[:text.index("source.pypi", text.index("[frameworks.jax]"))].count("\n") + 1
    assert str(caught.value) == (
        f"{manifest}:{line}:1: framework 'jax' mirrors jax-rocm7-plugin 0.10.0 (recipes/wheels/jax.toml), built for ROCm 7, "
        "into the indexes of this ROCm 5.2.3 release: an index never mixes ROCm majors — remove [frameworks.jax] from "
        "release.toml, or give it a recipe version built for ROCm 5")


def test_cli_refuses_a_mixed_index_in_one_line(tmp_path, capsys):
    from cairn.cli import main

    manifest = _manifest_with(tmp_path, JAX)
    assert main(["plan", str(manifest), "--family", "gfx90a"]) == 2
    captured = capsys.readouterr()
    lines = [line for line in (captured.out + captured.err).splitlines() if line.strip()]
    assert len(lines) == 1 and "an index never mixes ROCm majors" in lines[0], lines


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "manifests" / "releases").glob("*.toml")))
def test_shipped_releases_publish_only_their_rocm_major(name):
    from packaging.version import Version

    from cairn.model.wheel_versions import rocm_major

    manifest = ROOT / "manifests" / "releases" / f"{name}.toml"
    major = Version(load_manifest(manifest, load_registry()).release.version).major
    actions = _plan(manifest, [])
    wrong = [a.id for a in actions.values() if a.kind in ("mirror", "package") and a.inputs.get("project")
             and rocm_major(a.inputs["project"], a.inputs.get("build_version", "")) not in (None, major)]
    assert wrong == []
