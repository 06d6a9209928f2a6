"""File writing and reading shared by every result file of gradflow (trajectories, figure data,
benchmark tables, training checkpoints): atomic writes, clearing the temporaries a hard kill
leaves behind, and ``.npz`` reads that fail with a clear error.

Nothing here knows a model or a loss: it sits below :mod:`gradflow.attention.trajectory` and
``gradflow.sims`` alike.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from collections.abc import Iterable

import numpy as np

from ._errors import bad_arg

__all__ = ["atomic_write", "load_npz", "remove_stale_temporaries"]


def atomic_write(path: str | os.PathLike, write, exclusive: bool = False) -> bool:
    """Call ``write(fileobj)`` on a temporary file beside ``path``, then rename it into place.

    A crash leaves either the old file or the new one, never a partial file under ``path``. The
    temporary file is named ``.NAME.tmp-PID-XXXX`` (``NAME`` the target's file name, ``PID`` the
    writing process) and removed on any exception; only a hard kill (SIGKILL, power loss) can
    leave one behind, which :func:`remove_stale_temporaries` clears.

    ``exclusive=True``: put the file in place only if ``path`` does not exist yet (a hard link
    of the complete temporary, so of two writers started together exactly one wins; on a file
    system without hard links it falls back to a rename). Returns whether the file was written.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.tmp-{os.getpid()}-",
                               suffix=os.path.splitext(path)[1])
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual permissions
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if not exclusive:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # no hard links here: not exclusive, still atomic
            os.replace(tmp, path)
            return True
        return True
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _writer_alive(name: str) -> bool:
    """Whether the process that named temporary ``name`` (``.NAME.tmp-PID-XXXX``) still runs on
    this host (then it is a write in progress, e.g. a second ``gradflow figures`` into the same
    folder). Names without a PID are older gradflow's: treated as stale."""
    pid = name.rsplit(".tmp-", 1)[1].split("-", 1)[0]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temporaries(directory: str | os.PathLike, stem: str) -> list[str]:
    """Delete temporary files :func:`atomic_write` left in ``directory`` for targets whose file
    name starts with ``stem`` after a hard kill (their writing process is gone; temporaries of
    a live process are a write in progress and are kept); returns the names removed."""
    removed = []
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if name.startswith(f".{stem}") and ".tmp-" in name and not _writer_alive(name):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:  # its writer renamed it into place meanwhile
                continue
            removed.append(name)
    return removed


def load_npz(path: str | os.PathLike, *, required: Iterable[str] = (), what: str = "an .npz file") -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` file ``path``, read into memory (``allow_pickle=False``).

    Raises :class:`gradflow.GradflowValueError` naming the file when it does not exist, is not a
    readable ``.npz`` archive (truncated by a full disk or a copy cut short, or another format;
    NumPy's own ``zipfile.BadZipFile``/``EOFError`` otherwise) or lacks one of the ``required``
    arrays; ``what`` says what was expected there.
    """
    name = os.fspath(path)
    if not os.path.isfile(name):
        raise bad_arg("path", name, f"an existing file ({what})")
    try:
        with np.load(name, allow_pickle=False) as z:
            data = {key: z[key] for key in z.files}
    except (zipfile.BadZipFile, EOFError, ValueError, OSError) as e:
        raise bad_arg("path", name, f"{what}; the file is truncated or not an .npz archive "
                      f"({type(e).__name__}: {e})") from e
    missing = [key for key in required if key not in data]
    if missing:
        raise bad_arg("path", name, f"{what}; the file lacks the arrays {missing}")
    return data
