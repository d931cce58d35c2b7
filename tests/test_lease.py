"""The GPU lease's shared folder is untrusted: symlinks and other users' files are never written
through, a folder that cannot be used is one line (EnvironmentProblem), and the default folder
does not depend on TMPDIR."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path

import pytest

from kevin_agent.errors import EnvironmentProblem
from kevin_agent.evaluate import lease as lease_module
from kevin_agent.evaluate.lease import LEASE_DIR_ENV, GpuLease, Lease, lease_dir

VICTIM_TEXT = "export PATH=$HOME/bin:$PATH  # the victim's own file\n"


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_symlinked_lease_file_is_refused_and_its_target_left_intact(tmp_path, monkeypatch):
    folder, victim = tmp_path / "leases", tmp_path / "victim" / ".bashrc"
    folder.mkdir()
    victim.parent.mkdir()
    victim.write_text(VICTIM_TEXT)
    (folder / "GPU-test.lock").symlink_to(victim)
    monkeypatch.setenv(LEASE_DIR_ENV, str(folder))
    lease = GpuLease("GPU-test", "GPU 0")  # the folder from $KEVIN_LEASE_DIR
    with pytest.raises(EnvironmentProblem, match="symbolic link"):
        lease.try_acquire()
    with pytest.raises(EnvironmentProblem):
        with lease.hold():
            pass
    assert victim.read_text() == VICTIM_TEXT
    dangling = folder / "GPU-other.lock"
    dangling.symlink_to(tmp_path / "victim" / "new-file")  # O_CREAT would create the target
    with pytest.raises(EnvironmentProblem):
        GpuLease("GPU-other", "GPU 1").try_acquire()
    assert not (tmp_path / "victim" / "new-file").exists()


def test_another_users_lease_file_is_locked_but_never_written(tmp_path, monkeypatch):
    path = tmp_path / "GPU-test.lock"
    path.write_text(VICTIM_TEXT)
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 4242)  # the file belongs to someone else
    lease = GpuLease("GPU-test", "GPU 0", tmp_path)
    assert lease.try_acquire()
    assert path.read_text() == VICTIM_TEXT
    assert not Lease(path, "GPU 0").try_acquire()  # still a lock
    lease.release()
    assert path.read_text() == VICTIM_TEXT


def test_a_hard_linked_lease_file_is_never_written(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text(VICTIM_TEXT)
    os.link(victim, tmp_path / "GPU-test.lock")
    lease = GpuLease("GPU-test", "GPU 0", tmp_path)
    assert lease.try_acquire()
    lease.release()
    assert victim.read_text() == VICTIM_TEXT


def test_our_own_lease_file_names_the_holder(tmp_path):
    lease = GpuLease("GPU-test", "GPU 0", tmp_path)
    assert lease.try_acquire()
    assert lease.holder() == f"{lease_module.this_process()} pid {os.getpid()}"
    lease.release()
    assert lease.holder() is None


def test_a_lease_folder_that_is_a_file_is_one_line(tmp_path, monkeypatch):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    monkeypatch.setenv(LEASE_DIR_ENV, str(not_a_folder))
    with pytest.raises(EnvironmentProblem, match=f"{not_a_folder}.*{LEASE_DIR_ENV}"):
        lease_dir()
    monkeypatch.setenv(LEASE_DIR_ENV, str(not_a_folder / "below"))
    with pytest.raises(EnvironmentProblem, match=LEASE_DIR_ENV):
        GpuLease("GPU-test", "GPU 0")


def test_a_lease_folder_that_cannot_be_made_or_written_is_one_line(monkeypatch):
    monkeypatch.setenv(LEASE_DIR_ENV, "/sys/kevin-agent-gpu-leases")  # refused even to root
    with pytest.raises(EnvironmentProblem, match="/sys/kevin-agent-gpu-leases"):
        lease_dir()
    monkeypatch.setenv(LEASE_DIR_ENV, "/sys")  # exists, but no file can be created in it
    lease = GpuLease("GPU-test", "GPU 0")
    before = open_fds()
    with pytest.raises(EnvironmentProblem, match=f"/sys/GPU-test.lock.*{LEASE_DIR_ENV}"):
        lease.try_acquire()
    assert open_fds() == before


def test_try_acquire_closes_its_file_on_any_flock_error(tmp_path, monkeypatch):
    def broken_flock(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    lease = GpuLease("GPU-test", "GPU 0", tmp_path)
    monkeypatch.setattr(fcntl, "flock", broken_flock)
    before = open_fds()
    with pytest.raises(EnvironmentProblem, match="GPU-test.lock"):
        lease.try_acquire()
    assert open_fds() == before


def test_the_default_folder_does_not_follow_tmpdir(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.delenv(LEASE_DIR_ENV, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert lease_dir() == Path("/tmp/kevin-agent-gpu-leases")


def test_a_folder_we_create_is_shared_and_an_existing_one_is_left_as_it_is(tmp_path, monkeypatch):
    created = tmp_path / "new" / "leases"
    monkeypatch.setenv(LEASE_DIR_ENV, str(created))
    assert lease_dir() == created
    assert stat.S_IMODE(created.stat().st_mode) == 0o1777
    existing = tmp_path / "existing"
    existing.mkdir(mode=0o755)
    existing.chmod(0o755)
    monkeypatch.setenv(LEASE_DIR_ENV, str(existing))
    assert lease_dir() == existing
    assert stat.S_IMODE(existing.stat().st_mode) == 0o755


def test_a_lease_is_released_when_the_body_of_hold_raises(tmp_path):
    """An exception inside ``with lease.hold()`` (a candidate's run that crashed) must not leave
    the GPU locked: another holder of the same file takes it at once."""
    lease = GpuLease("GPU-test", "GPU 0", tmp_path)
    with pytest.raises(RuntimeError, match="the run crashed"):
        with lease.hold() as held:
            assert held
            assert not Lease(lease.path, "GPU 0").try_acquire()  # held while the body runs
            raise RuntimeError("the run crashed")
    other = Lease(lease.path, "GPU 0")
    assert other.try_acquire()
    other.release()
    assert lease.holder() is None
