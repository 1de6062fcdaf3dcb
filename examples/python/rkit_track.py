"""rkit_track: a training script's metrics into rkit's run store, from any framework.

    import rkit_track
    rkit_track.params(lr=0.05, batch_size=64)          # merged into the run's configuration
    for step in range(steps):
        ...
        rkit_track.log(step + 1, loss=loss.item())      # a PyTorch tensor works too: loss=loss

Under `rtrain launch --track`, every record is one JSON line (rkit.metric.v1, see rkit(7))
appended to the file the launcher names in $RKIT_METRICS_FILE, one file per rank; the
launcher copies them into the run store as they come, and `rtrain runs metrics ID`
shows them. Anywhere else (plain python, torchrun) nothing is written and nothing
fails. Only rank 0 ($RANK) logs unless all_ranks=True. The standard library only: no
network, no service, nothing to install on a compute node.
"""
import json
import math
import os
import re
import stat
import time

_SCHEMA = "rkit.metric.v1"
_fd = None
_checked = False


def _file():
    """The metrics file, opened once for appending; None when not under rtrain launch --track."""
    global _fd, _checked
    if not _checked:
        _checked = True
        path = os.environ.get("RKIT_METRICS_FILE")
        if path:
            # The launcher's private folder; still, never through a link, and never a FIFO
            # (opened without blocking, then checked) or a file of another user's.
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
            try:
                fd = os.open(path, flags, 0o600)  # a FIFO without a reader: ENXIO, at once
            except OSError as e:
                raise OSError(f"rkit_track: {path} is not a file of this user's ({e.strerror})") from None
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                os.close(fd)
                raise OSError(f"rkit_track: {path} is not a file of this user's: nothing is logged there")
            os.set_blocking(fd, True)
            _fd = fd
    return _fd


_KEY = re.compile(r"[A-Za-z0-9_.\-/:]{1,256}")


def _key(name):
    """A metric's or parameter's name as the run store keeps it, else ValueError."""
    if not isinstance(name, str) or not _KEY.fullmatch(name):
        raise ValueError(f"rkit_track: {name!r}: names are 1 to 256 letters, digits and _ . - / : (ASCII)")
    return name


def _number(name, value):
    try:
        v = float(value)  # ints, floats, numpy scalars, one-element tensors
    except (TypeError, ValueError):
        raise TypeError(f"rkit_track: {name} must be a number, not {type(value).__name__}") from None
    return v if math.isfinite(v) else None  # NaN and infinity are not measurements: left out


def _write(record, all_ranks):
    fd = _file()
    if fd is None or (not all_ranks and os.environ.get("RANK", "0") != "0"):
        return False
    line = (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()
    # One write of the whole line: the launcher never reads half a record as whole.
    written = os.write(fd, line)
    while written < len(line):
        written += os.write(fd, line[written:])
    return True


def log(step, all_ranks=False, **metrics):
    """Records metrics (name=value) at a step (a whole number). Returns whether it wrote."""
    if isinstance(step, bool) or int(step) != step or step < 0:
        raise ValueError(f"rkit_track: step must be a whole number, 0 or more, not {step!r}")
    values = {k: v for k, v in ((_key(k), _number(k, v)) for k, v in metrics.items()) if v is not None}
    return _write({"schema": _SCHEMA, "step": int(step), "time_unix_s": time.time(), "metrics": values}, all_ranks)


def params(all_ranks=False, **values):
    """Records parameters (strings, numbers, booleans) into the run's configuration."""
    for k, v in values.items():
        _key(k)
        if not isinstance(v, (str, int, float, bool)) or (isinstance(v, float) and not math.isfinite(v)):
            raise TypeError(f"rkit_track: parameter {k} must be a string, number or boolean")
    return _write({"schema": _SCHEMA, "step": 0, "time_unix_s": time.time(), "metrics": {}, "params": values},
                  all_ranks)


def run_id():
    """The run store's id of this run ($RKIT_RUN_RECORD), or None when not tracked."""
    return os.environ.get("RKIT_RUN_RECORD") or None
