"""The ring's disk tier as a Trainer asks for it (Trainer(disk=..., disk_memory=...), dataflow
train --disk): the directory checked and the size parsed once, here, before anything is planned."""
import errno
import functools
import mmap
import os
import shutil
import time

from ..errors import BadArgumentError
from ..handle import parse_bytes


TRAINER_NAMES = ("Trainer: disk", "Trainer: disk_memory", "Trainer: disk_throttle")
# bytes the rate probe writes and reads back: past a drive's write cache burst is more, but this
# keeps the probe under a second on a 100 MB/s disk
PROBE_BYTES = 32 << 20


def measured_rate(directory):
    """The directory's disk rate in bytes/s, as the executor moves data: PROBE_BYTES written
    (and synced) and read back in an unlinked file, O_DIRECT where the file system takes it
    (else buffered, its pages dropped before the read); the slower of the two, since reads
    and writes share the planner's one disk rate."""
    buf = mmap.mmap(-1, PROBE_BYTES)  # page-aligned, as O_DIRECT wants
    buf.write(os.urandom(1 << 20) * (PROBE_BYTES >> 20))  # incompressible
    path = os.path.join(directory, f"dataflow-disk-probe-{os.getpid()}")
    try:
        fd, direct = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o600), True
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        fd, direct = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600), False
    os.unlink(path)
    try:
        start = time.perf_counter()
        os.pwrite(fd, buf, 0)
        os.fsync(fd)
        written = time.perf_counter()
        if not direct:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.preadv(fd, [buf], 0)
        read = time.perf_counter()
    finally:
        os.close(fd)
        buf.close()
    return PROBE_BYTES / max(written - start, read - written, 1e-9)


class DiskTier:
    """A directory for the executor's working copy of the optimizer state (ring_executor.h,
    Dataflow_Ring_Disk), the bytes the planner may put there (default: the file system's free
    space) and an optional throttle in bytes/s (a slower disk, for tests and benchmarks).
    names: how errors name the three (the Trainer's arguments, or dataflow train's flags)."""

    def __init__(self, directory, memory=None, throttle=None, names=TRAINER_NAMES):
        if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
            raise BadArgumentError(f"{names[0]}: must be a directory path, got {directory!r:.80}")
        self.directory = os.path.abspath(os.fspath(directory))
        if not os.path.exists(self.directory):
            raise BadArgumentError(f"{names[0]}: directory {self.directory} does not exist")
        if not os.path.isdir(self.directory):
            raise BadArgumentError(f"{names[0]}: directory {self.directory} is not a directory")
        if not os.access(self.directory, os.W_OK | os.X_OK):
            raise BadArgumentError(f"{names[0]}: directory {self.directory} is not writable")
        self.bytes = shutil.disk_usage(self.directory).free if memory is None else parse_bytes(memory, names[1])
        self.throttle = 0.0 if throttle is None else float(parse_bytes(throttle, names[2]))

    @functools.cached_property
    def bytes_per_second(self):
        """The rate the planner counts: the throttle when it is slower, else measured_rate's."""
        rate = measured_rate(self.directory)
        return min(rate, self.throttle) if self.throttle else rate

    def streams(self, handle):
        """The handle's stream for disk reads and writes: its own (4) when the handle has one
        more than the ring's four, else the outbound stream's (2), which it then shares."""
        return 4 if handle.num_streams > 4 else 2


def disk_tier(disk, disk_memory, disk_throttle, names=TRAINER_NAMES):
    """A DiskTier, or None without one; disk_memory or disk_throttle without disk is an error."""
    if disk is None:
        for name, value in zip(names[1:], (disk_memory, disk_throttle)):
            if value is not None:
                raise BadArgumentError(f"{name}: sizes a disk tier; add {names[0].replace('Trainer: ', '')} "
                                       f"(a directory)")
        return None
    return disk if isinstance(disk, DiskTier) else DiskTier(disk, disk_memory, disk_throttle, names)
