"""A one-line progress report on stderr: step, loss, validation loss, tokens/s, elapsed, ETA, memory."""
import sys
import time


def mib(nbytes):
    return f"{nbytes / 2**20:,.1f} MiB"


def duration(seconds):
    """1:05, 12:09, 1:02:03."""
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """update() redraws the line in place on a terminal; elsewhere (logs, pipes) it prints a line
    about every 5% of the run, and whenever a validation loss arrives, so logs stay short. Steps
    count from first + 1 to first + total (a resumed run shows its global step)."""

    def __init__(self, total, first=0, stream=None, width=20, clock=time.perf_counter):
        self.total, self.first, self.width, self.clock = total, first, width, clock
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = max(1, total // 20)
        self.started = clock()
        self.val = None  # (step, validation loss) of the latest validation

    def update(self, done, loss, tokens_per_s, memory_bytes, val=None):
        """done: steps finished in this run (1..total); memory_bytes: device memory in use."""
        elapsed = self.clock() - self.started
        eta = elapsed / done * (self.total - done)
        step = self.first + done
        if val is not None:
            self.val = (step, val)
        bar = self.width * done // max(self.total, 1)
        last = self.first + self.total
        # a validation loss from an earlier step says which: it is not this step's
        shown = "" if self.val is None else f" | val {self.val[1]:.3f}" + (
            "" if self.val[0] == step else f" (step {self.val[0]})")
        line = (f"step {step:>{len(str(last))}}/{last} [{'#' * bar}{'.' * (self.width - bar)}] "
                f"loss {loss:.3f}{shown} | {tokens_per_s:,.0f} tok/s | {duration(elapsed)} elapsed, ETA "
                f"{duration(eta)} | device memory {mib(memory_bytes)}")
        if self.tty:
            self.stream.write("\r\033[K" + line + ("\n" if done == self.total else ""))
        elif done % self.every == 0 or done in (1, self.total) or val is not None:
            self.stream.write(line + "\n")
        self.stream.flush()

    def note(self, text):
        """A message on its own line (the bar continues below it on a terminal)."""
        self.stream.write(("\n" if self.tty else "") + text + "\n")
        self.stream.flush()
