"""Replacing files and directories so that a failed or killed write leaves the previous version.

New content is written beside the target (same parent, hence same filesystem), flushed to disk
with fsync, then renamed over it: rename is atomic, so readers see the old or the new, never half.
"""
import contextlib
import errno
import glob
import os
import shutil
import stat
import tempfile


def umask():
    """The process's umask, read without changing it (os.umask sets it, which races other threads)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # no /proc (or a kernel before 4.7): set and restore at once
    os.umask(mask)
    return mask


def fsync_path(path):
    """Flushes a file's or a directory's contents (a directory's: its entries) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def replaced_file(path):
    """with replaced_file(p) as tmp: write the file at `tmp`; on success it becomes `p`. Only a
    regular file is ever replaced: a device, FIFO, socket, directory or symlink at `p` (as root,
    /dev/null) raises OSError before anything is written."""
    parent, name = os.path.split(os.path.abspath(path))
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise OSError(errno.EEXIST, "exists and is not a regular file; only regular files are replaced", path)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.tmp-", dir=parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~umask())  # mkstemp makes it 0600; the result is an ordinary output
    try:
        yield tmp
        fsync_path(tmp)
        os.replace(tmp, path)
        fsync_path(parent)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _backup(path):
    parent, name = os.path.split(os.path.abspath(path))
    return os.path.join(parent, f".{name}.old")


def replace_directory(path, fill):
    """Calls fill(tmp_dir) to write the new contents, then swaps them in for directory `path`.

    rename(2) cannot replace a non-empty directory, so the swap is two renames: path -> backup,
    tmp -> path. A kill between them leaves only the backup, which readable_directory() finds.
    Leftovers of killed saves (temp dirs, a stale backup) are removed first. One writer at a time.
    """
    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    os.makedirs(parent, exist_ok=True)
    backup = _backup(path)
    for stale in glob.glob(os.path.join(parent, glob.escape(f".{name}.tmp-") + "*")):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
    try:
        os.chmod(tmp, 0o777 & ~umask())  # mkdtemp makes it 0700
        fill(tmp)
        for entry in os.scandir(tmp):
            fsync_path(entry.path)
        fsync_path(tmp)
        if os.path.exists(path):
            if os.path.exists(backup):  # path is complete, so an older backup is of no use
                shutil.rmtree(backup)
            os.replace(path, backup)
        os.replace(tmp, path)
        fsync_path(parent)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    if os.path.exists(backup):
        shutil.rmtree(backup)


def readable_directory(path):
    """`path`, or the previous version a save killed mid-swap left behind in its place."""
    backup = _backup(path)
    if not os.path.exists(path) and os.path.isdir(backup):
        return backup
    return path
