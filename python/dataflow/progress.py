"""A one-line progress bar on stderr: step, loss, tokens/s, device memory in use."""
import sys


def _mib(nbytes):
    return f"{nbytes / 2**20:.1f} MiB"


class Progress:
    """update() redraws the line in place on a terminal; elsewhere (logs, pipes) it prints a line
    about every 5% of the run so logs stay short."""

    def __init__(self, total, stream=None, width=24):
        self.total, self.width = total, width
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = max(1, total // 20)

    def update(self, step, loss, tokens_per_s, memory_bytes):
        done = self.width * step // max(self.total, 1)
        line = (f"step {step:>{len(str(self.total))}}/{self.total} [{'#' * done}{'.' * (self.width - done)}] "
                f"loss {loss:.4f} | {tokens_per_s:,.0f} tok/s | device memory {_mib(memory_bytes)}")
        if self.tty:
            self.stream.write("\r" + line + ("\n" if step == self.total else ""))
        elif step % self.every == 0 or step in (1, self.total):
            self.stream.write(line + "\n")
        self.stream.flush()
