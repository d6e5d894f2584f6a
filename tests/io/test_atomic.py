"""The atomic writer's outputs get the permissions the umask gives any new file or directory
(0644 / 0755 under umask 022), not the 0600 / 0700 of the temp file or directory they start as."""
import os
import stat

import pytest

from dataflow.io import atomic, checkpoint


@pytest.fixture(params=[0o022, 0o027, 0o077])
def mask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_umask_is_read_without_changing_it(mask):
    assert atomic.umask() == mask
    assert atomic.umask() == mask


def test_replaced_file_respects_umask(tmp_path, mask):
    target = tmp_path / "out.txt"
    with atomic.replaced_file(target) as tmp:
        with open(tmp, "w") as f:
            f.write("new")
    assert target.read_text() == "new" and _mode(target) == 0o666 & ~mask
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert _mode(target) == _mode(plain)


def test_checkpoint_directory_respects_umask(tmp_path, mask):
    checkpoint.save(tmp_path / "ckpt", {}, {"model_type": "llama"}, None, {"step": 1})
    assert _mode(tmp_path / "ckpt") == 0o777 & ~mask
    for entry in os.scandir(tmp_path / "ckpt"):
        assert _mode(entry.path) == 0o666 & ~mask, entry.name
