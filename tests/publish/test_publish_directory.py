"""``cairn publish`` to a local directory, as a user runs it: artifacts hard-linked from the bundle (the store's
files) on one file system, a progress display, and a full disk that is one line and leaves nothing behind.

The full disk is a real one: a small tmpfs mounted here (root only; skipped locally, an error in CI, without it).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.matrix.bundle import load_bundle
from cairn.publish.sample import write_sample_bundle
from support import need


def _publish(bundle: Path, to: Path, store: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cairn.cli", "publish", str(bundle), "--to", str(to), "--dev-keys",
                           "--store", str(store), *extra], capture_output=True, text=True, env=env)


def test_artifacts_are_hard_links_to_the_bundles_files_on_one_file_system(tmp_path):
    bundle = write_sample_bundle(tmp_path / "b", version="7.1.0", families=("gfx90a", "gfx1100"), wheels_per_family=2)
    repo = tmp_path / "repo"
    proc = _publish(bundle, repo, tmp_path / "store", "--json")
    assert proc.returncode == 0, proc.stderr
    linked = 0
    for artifact in load_bundle(bundle).artifacts:
        source = bundle / "files" / artifact.path
        published = repo / "packages" / artifact.family / artifact.name if artifact.kind == "wheel" else \
            repo / "dockerfiles" / "7.1.0" / artifact.path
        assert published.read_bytes() == source.read_bytes()
        assert published.stat().st_ino == source.stat().st_ino and source.stat().st_nlink >= 2, f"{published} is a copy"
        linked += 1
    assert linked == 6
    # nothing of the temp sibling it was written into is left next to it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "repo", "store"]
    # a re-publish of the same release into it changes no file and links nothing twice
    before = {p: p.stat().st_ino for p in repo.rglob("*") if p.is_file()}
    again = _publish(bundle, repo, tmp_path / "store", "--json")
    assert again.returncode == 0, again.stderr
    assert {p: p.stat().st_ino for p in repo.rglob("*") if p.is_file()} == before
    # with the keys now in place the blobs go up early, from their own thread: into the temp sibling as well
    other = tmp_path / "repo2"
    proc = _publish(bundle, other, tmp_path / "store")
    assert proc.returncode == 0, proc.stderr
    assert "blobs, while the signing libraries load: " in proc.stdout
    wheel = next((bundle / "files" / "wheels").rglob("*.whl"))
    assert (other / "packages" / wheel.parent.name / wheel.name).stat().st_ino == wheel.stat().st_ino
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "repo", "repo2", "store"]


def test_a_publish_shows_its_progress_when_not_asked_for_json(tmp_path):
    bundle = write_sample_bundle(tmp_path / "b", version="7.2.0", families=("gfx90a",))
    proc = _publish(bundle, tmp_path / "repo", tmp_path / "store")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()  # not stderr: there a failed publish says its one error line alone
    assert any(line.startswith("checking the bundle's files: 2 object(s), ") for line in lines), proc.stdout
    assert any(line.startswith("blobs and content-addressed copies: ") for line in lines), proc.stdout
    assert not any("object(s)" in line for line in proc.stderr.splitlines()), proc.stderr


def test_the_rich_display_counts_every_byte_written(tmp_path):
    from rich.console import Console
    from rich.progress import Progress

    from cairn.publish.progress import RichMeter
    from cairn.publish.writer import Writer
    from cairn.remote.backend import FileBackend

    sink = io.StringIO()
    with Progress(console=Console(file=sink, force_terminal=True, width=100)) as progress:
        writer = Writer(FileBackend(tmp_path / "repo"), lambda _: None)
        writer.meter = RichMeter(progress)
        from cairn.publish.objects import Obj

        writer.upload("pages", [Obj(f"p/{n}.html", b"x" * 1000, "text/html", False, target=False) for n in range(5)])
        (task,) = progress.tasks
    assert task.description == "pages (5)" and task.total == 5000 and task.completed == 5000


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs: a real file system that fills."""
    need(os.geteuid() == 0, "mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, text=True)
    need(done.returncode == 0, f"cannot mount a tmpfs here ({done.stderr.strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_too_little_space_is_one_line_before_anything_is_written(tmp_path, small_disk):
    # 3 families x 2 wheels x 1 MiB of incompressible payload: about 6.3 MB to copy onto a 4 MiB disk
    bundle = write_sample_bundle(tmp_path / "b", version="7.3.0", wheels_per_family=2, payload_bytes=1 << 20)
    repo = small_disk / "releases" / "repo"
    proc = _publish(bundle, repo, tmp_path / "store")
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"cairn publish: {repo}: no space left on device (before writing anything) — this publish needs about ")
    assert line.endswith("; free space there or publish to another place; nothing was written")
    assert list(small_disk.iterdir()) == []


def test_a_disk_that_fills_during_the_publish_leaves_no_partial_tree(tmp_path, small_disk):
    """The check before writing passes (as when another writer fills the disk meanwhile): the file system's own
    ENOSPC, in the middle of the writes, is the same one line, and the temp sibling is gone."""
    from cairn.sign.keys import ensure_dev_keys

    bundle = write_sample_bundle(tmp_path / "b", version="7.4.0", wheels_per_family=2, payload_bytes=1 << 20)
    ensure_dev_keys(tmp_path / "store" / "keys" / "dev")  # keys in place: the blobs go up early, from their own thread
    repo = small_disk / "repo"
    script = ("import sys; import cairn.publish.directory as d; d.free_space = lambda place: 1 << 40; "
              "from cairn.cli import main; sys.exit(main())")
    proc = subprocess.run([sys.executable, "-c", script, "publish", str(bundle), "--to", str(repo), "--dev-keys",
                           "--store", str(tmp_path / "store")], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    (line,) = [x for x in proc.stderr.strip().splitlines() if not x.startswith(("checking", "blobs", "created", "using"))]
    assert line.startswith(f"cairn publish: {repo}: no space left on device (writing ") and "this publish needs about" in line, line
    assert line.endswith("nothing was written"), line
    assert list(small_disk.iterdir()) == []  # neither the repository nor its temp sibling


def test_a_full_disk_under_an_existing_repository_leaves_it_serving_its_release(tmp_path, small_disk):
    """Updated in place, as a bucket is: the new release's blobs stop at the full disk, no temp file of a copy
    is left, and the repository still verifies with the release it served."""
    store = tmp_path / "store"
    repo = small_disk / "repo"
    first = _publish(write_sample_bundle(tmp_path / "small", version="7.5.0", families=("gfx90a",)), repo, store, "--json")
    assert first.returncode == 0, first.stderr
    before = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*"))
    bundle = write_sample_bundle(tmp_path / "b", version="7.6.0", wheels_per_family=2, payload_bytes=1 << 20)
    script = ("import sys; import cairn.publish.directory as d; d.free_space = lambda place: 1 << 40; "
              "from cairn.cli import main; sys.exit(main())")
    proc = subprocess.run([sys.executable, "-c", script, "publish", str(bundle), "--to", str(repo), "--dev-keys",
                           "--store", str(store), "--json"], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    # beside the note on development keys, the error is one line
    (line,) = [x for x in proc.stderr.strip().splitlines() if not x.startswith("using DEVELOPMENT signing keys")]
    assert line.startswith(f"cairn publish: {repo}: no space left on device (writing "), line
    assert line.endswith("the repository still serves what it served before (its timestamp is written last)"), line
    assert not [p for p in repo.rglob(".tmp-*")], "a temp file of an interrupted copy was left"
    assert set(before) <= {p.relative_to(repo).as_posix() for p in repo.rglob("*")}
    # every signed target is intact; only the publish record says a publish is in progress (docs/publishing.md, Faults)
    from cairn.sign.verify import verify_repository

    verify_repository(str(repo), (store / "keys" / "dev" / "root.json").read_bytes(), tmp_path / "tuf", in_progress=True)
    verified = subprocess.run([sys.executable, "-m", "cairn.cli", "verify", str(repo), "--root", str(store / "keys" / "dev" / "root.json")],
                              capture_output=True, text=True)
    assert verified.stderr.startswith("cairn verify: channels/published.json: ") and "a publish is in progress" in verified.stderr
