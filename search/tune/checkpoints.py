"""When a trial saves its state, and the writing of it off the training thread.

A trial's state (model, optimizer moments, RNGs, its best so far: ~300 MiB for ResNet50 with
AdamW) used to be saved and handed to Ray after every epoch, synchronously: written once by
``torch.save`` and copied once more by Ray into the experiment's storage, while the GPU waited.
ASHA, the default scheduler, never pauses a trial, so those checkpoints only serve a trial that
is lost (its node or worker) or a driver that is restarted (``dmlsearch resume``). So a trial
now saves:

* every ``checkpoint_every`` epochs (over folds and repeats: the scheduler's time axis) in the
  **background**: the state is copied to host memory at once (a fast copy; later training does
  not change it), a thread writes it to a local folder, and the first report after the write
  has finished hands that folder to Ray. The training thread never waits for the disk;
* **synchronously** at the epochs where a pausing scheduler (HyperBand) may pause the trial, in
  that very report, since Ray resumes a paused trial from the checkpoint of its last report;
* synchronously at the trial's last report (a trial restored after it finished has nothing to
  train).

A lost trial is restored from the newest checkpoint Ray got, which is at most ``checkpoint_every``
epochs old (plus the epochs its write overlapped: a save that falls due while the last write
is still going is skipped, never waited for), and retrains from there; its reports carry the
``training_iteration`` of the epoch they are about (:func:`dmlsearch.search.tune.trainable.dmltrial`),
so the schedulers' time axis stays right across the restore.

The folders live under one per-user folder of the node's temporary directory
(:func:`checkpoint_root`), each named for its host and process. A trial whose process is killed
(a lost worker, the out-of-memory killer, ``kill -9``) cannot remove its folder, a full state
each (~300 MiB for ResNet50 with AdamW); so each trial that starts on a node first removes the
folders of this host's processes that no longer run (:func:`remove_orphans`).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["Checkpointer", "checkpoint_root", "remove_orphans"]

# A dead process's folder is removed only once it is this old (seconds since its last write):
# a process of another PID namespace that shares the folder and the host name (containers
# sharing /tmp) merely looks dead here, and a live trial's folder is an epoch or two old.
ORPHAN_AGE_S = 600.0


def checkpoint_root() -> Path:
    """This user's folder for trials' checkpoint writes on this node."""
    return Path(tempfile.gettempdir()) / f"dmlsearch-checkpoints-{os.getuid()}"


def _owner_prefix(host: str | None = None, pid: int | None = None) -> str:
    return f"{host or socket.gethostname()}-{os.getpid() if pid is None else pid}-"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_orphans(root: Path, *, older_than: float = ORPHAN_AGE_S) -> list[Path]:
    """Remove the folders under ``root`` that a process of this host made and that no longer
    runs, last written over ``older_than`` seconds ago; returns those removed."""
    host, removed = socket.gethostname(), []
    try:
        entries = list(root.iterdir())
    except OSError:  # no folder yet
        return removed
    for folder in entries:
        owner, _, rest = folder.name.rpartition("-")[0].rpartition("-")
        if owner != host or not rest.isdigit() or _running(int(rest)):
            continue
        try:
            idle = time.time() - folder.stat().st_mtime
        except OSError:  # removed meanwhile
            continue
        if idle > older_than:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


class _Write:
    """One background write of a state to a folder of its own."""

    def __init__(self, state: dict[str, Any], file_name: str, root: Path) -> None:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix=_owner_prefix(), dir=root))
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._discarded = self._finished = False
        self._thread = threading.Thread(target=self._write, args=(state, file_name),
                                        name="dmlsearch-checkpoint", daemon=True)
        self._thread.start()

    def _write(self, state: dict[str, Any], file_name: str) -> None:
        import torch

        try:
            torch.save(state, self.folder / file_name)
        except BaseException as exc:  # noqa: BLE001 - the trial thread re-raises it
            self.error = exc
        finally:
            with self._lock:
                self._finished = True
                if self._discarded:  # nobody wants it any more: the writer cleans up
                    shutil.rmtree(self.folder, ignore_errors=True)

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self) -> Path:
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.folder

    def discard(self) -> None:
        """Drop this write without waiting for it: a write still going removes its folder when
        it ends, so the training thread never waits for a disk it no longer needs."""
        with self._lock:
            self._discarded = True
            if self._finished:
                shutil.rmtree(self.folder, ignore_errors=True)


class Checkpointer:
    """Decides, report by report, which checkpoint folder (if any) goes with a trial's report.

    Args:
        every: a background checkpoint every this many epochs (``checkpoint_every``).
        pauses_at: epochs at which the scheduler may pause the trial (a checkpoint in that
            report, synchronously).
        file_name: the state's file in a checkpoint folder.
        root: where the folders are written (:func:`checkpoint_root`); the orphans of killed
            processes there are removed first (:func:`remove_orphans`).
    """

    def __init__(self, *, every: int, pauses_at: tuple[int, ...] = (),
                 file_name: str = "trial_state.pt", root: Path | None = None) -> None:
        if every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {every}")
        self.every, self.pauses_at, self.file_name = every, frozenset(pauses_at), file_name
        self.root = checkpoint_root() if root is None else root
        remove_orphans(self.root)
        self._pending: _Write | None = None
        self._handed: list[Path] = []
        self.saved_at: list[int] = []  # iterations whose state was saved (for tests, the log)

    def folder_for(self, iteration: int, last: bool,
                   state: Callable[[], dict[str, Any]]) -> Path | None:
        """The checkpoint folder to hand Ray with the report of ``iteration`` (or ``None``).

        ``state`` returns a host snapshot of the trial's state (``Fitter.state_dict``); it is
        called only at the epochs that save.
        """
        self._forget_handed()
        if last or iteration in self.pauses_at:
            if self._pending is not None:
                self._pending.discard()  # superseded by the state saved now
                self._pending = None
            write = _Write(state(), self.file_name, self.root)
            self.saved_at.append(iteration)
            return self._hand(write.wait())
        ready = None
        if self._pending is not None and self._pending.done():
            ready = self._hand(self._pending.wait())
            self._pending = None
        if iteration % self.every == 0 and self._pending is None:
            # (a write still going when the next is due goes on, and this epoch is not saved:
            # the disk sets the pace, never the training thread)
            self._pending = _Write(state(), self.file_name, self.root)
            self.saved_at.append(iteration)
        return ready

    def _hand(self, folder: Path) -> Path:
        self._handed.append(folder)
        return folder

    def _forget_handed(self) -> None:
        """Ray copied the folders handed with earlier reports into its storage: remove ours."""
        for folder in self._handed:
            shutil.rmtree(folder, ignore_errors=True)
        self._handed.clear()

    def close(self) -> None:
        """Remove every folder this trial made (Ray holds its own copies)."""
        if self._pending is not None:
            self._pending.discard()
            self._pending = None
        self._forget_handed()
