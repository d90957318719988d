"""cairn-check's GPU verdict: "no GPU" only when there is no /dev/kfd; a device that is there but refuses
(out of resources, permission denied) fails. The script is the one the images ship; ``rocminfo`` is a stand-in
printing what the real one prints on such hosts (the only mock: there is no AMD GPU here), and ``KFD`` points
at a file that exists or not, as /dev/kfd does on a GPU host or in a container started without --device."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from support import ROOT

OUT_OF_RESOURCES = ("hsa api call failure at: /src/rocminfo/rocminfo.cc:1306\n"
                    "Call returned HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources.\n")
PERMISSION = "Unable to open /dev/kfd read-write: Permission denied\nHSA_STATUS_ERROR_OUT_OF_RESOURCES\n"
AGENTS = "ROCk module is loaded\n*******\nAgent 1\n  Name: gfx1100\n"


@pytest.fixture
def check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("cairn_check", ROOT / "src/cairn/containers/scripts/cairn_check.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    return module


def fake_rocminfo(tmp_path: Path, output: str, code: int) -> None:
    tool = tmp_path / "bin" / "rocminfo"
    tool.parent.mkdir(exist_ok=True)
    tool.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}EOF\nexit {code}\n")
    tool.chmod(0o755)


@pytest.mark.parametrize("output", [OUT_OF_RESOURCES, PERMISSION], ids=["out-of-resources", "permission-denied"])
def test_a_device_that_is_present_but_unusable_fails(check: ModuleType, tmp_path: Path, output: str) -> None:
    fake_rocminfo(tmp_path, output, 1)
    (tmp_path / "kfd").write_text("")
    check.KFD = str(tmp_path / "kfd")
    verdict = check.rocminfo()
    assert verdict["ok"] is False and verdict["gpu"] is True
    assert verdict["detail"].startswith(f"device present but not usable ({tmp_path / 'kfd'} exists")


def test_the_same_error_without_a_device_node_is_a_clean_no_gpu(check: ModuleType, tmp_path: Path) -> None:
    fake_rocminfo(tmp_path, OUT_OF_RESOURCES, 1)
    check.KFD = str(tmp_path / "no-kfd")
    assert check.rocminfo() | {"detail": ""} == {"ok": True, "gpu": False, "returncode": 1, "detail": ""}


def test_agents_listed_with_a_device_pass_and_a_crash_never_does(check: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "kfd").write_text("")
    check.KFD = str(tmp_path / "kfd")
    fake_rocminfo(tmp_path, AGENTS, 0)
    assert check.rocminfo() == {"ok": True, "gpu": True, "detail": "agents listed"}
    fake_rocminfo(tmp_path, "Segmentation fault\n", 139)
    check.KFD = str(tmp_path / "no-kfd")
    assert check.rocminfo()["ok"] is False


def test_llama_cpp_python_libraries_are_loaded_without_importing_the_package(check: ModuleType, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The image has no NumPy, so ``import llama_cpp`` would fail; its lib/ is found from the spec alone."""
    package = tmp_path / "site" / "llama_cpp"
    (package / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('numpy is not installed')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in [m for m in sys.modules if m == "llama_cpp" or m.startswith("llama_cpp.")]:
        monkeypatch.delitem(sys.modules, name)  # the real one, when another test of the session imported it
    dirs, _ = check.sdk_library_dirs()
    assert str(package / "lib") in dirs
