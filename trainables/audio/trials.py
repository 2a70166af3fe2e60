"""Speaker-verification trial lists: which pairs of test utterances are scored, and their truth.

The VoxCeleb format (``veri_test.txt``, ``veri_test2.txt``, ``list_test_*.txt``), one trial a
line: ``label enrol test``, label 1 (same speaker, a *target* trial) or 0, the utterances named by
their path under the dataset's audio root (``id10270/x6uYqmx31kE/00001.wav``). Kaldi's order,
``enrol test target|nontarget``, is read too when its utterance names are such paths.

A list is checked when the dataset is loaded, before anything trains or is written: a line that
is not a trial, an utterance that is not in the dataset (a missing file), a speaker the dataset
trains on (a test trial must be between unseen speakers), or a label that contradicts the
speakers' folders is one :class:`~trainables.errors.UserError` naming the file and line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from dmlsearch.trainables.errors import UserError

__all__ = ["TrialList", "read_trial_list"]

_TARGET = {"1": True, "0": False, "target": True, "nontarget": False}


@dataclasses.dataclass(frozen=True, eq=False)
class TrialList:
    """Trials read from ``source``: ``enrol[k]`` vs ``test[k]``, ``target[k]`` when the same
    speaker; ``lines[k]`` is the trial's line number in the file (for messages)."""

    source: str
    enrol: np.ndarray
    test: np.ndarray
    target: np.ndarray
    lines: np.ndarray

    def __len__(self) -> int:
        return int(self.target.shape[0])

    def utterances(self) -> np.ndarray:
        """Every utterance the list names, sorted, each once."""
        return np.unique(np.concatenate([self.enrol, self.test]).astype(str))

    def prefixed(self, prefix: str) -> TrialList:
        """The same trials with ``prefix`` before every utterance name (a list read relative to
        a sub-folder of the dataset's root)."""
        return dataclasses.replace(
            self, enrol=np.asarray([prefix + str(u) for u in self.enrol], dtype=object),
            test=np.asarray([prefix + str(u) for u in self.test], dtype=object))

    def positions(self, files: Sequence[str] | np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(enrol positions, test positions, target flags) of the trials in ``files``, or None
        when some listed utterance is not among ``files``."""
        where = {str(name): i for i, name in enumerate(files)}
        try:
            left = np.fromiter((where[str(u)] for u in self.enrol), np.int64, len(self))
            right = np.fromiter((where[str(u)] for u in self.test), np.int64, len(self))
        except KeyError:
            return None
        return left, right, self.target.copy()

    def check(self, files: np.ndarray, labels: np.ndarray, class_names: Sequence[str],
              test_classes: np.ndarray, *, dataset: str) -> None:
        """Every listed utterance is a file of the dataset, of a test speaker, and every label
        agrees with the speakers; else a UserError naming the first offending line."""
        where = {str(name): i for i, name in enumerate(files)}
        test = set(int(c) for c in test_classes)
        for k in range(len(self)):
            speakers = []
            for utterance in (self.enrol[k], self.test[k]):
                position = where.get(str(utterance))
                if position is None:
                    raise UserError(
                        f"{self.source}:{self.lines[k]}: {utterance} is not a file of {dataset}"
                        f" (expected every listed utterance under the audio root); restore "
                        f"the file or give a trial list for these files (--set trial_list=FILE)")
                label = int(labels[position])
                if label not in test:
                    raise UserError(
                        f"{self.source}:{self.lines[k]}: {utterance} is by speaker "
                        f"{class_names[label]}, whom {dataset} trains on; a trial list may "
                        f"name only test speakers (speakers in both train and test would leak);"
                        f" use the dataset's own list (e.g. veri_test2.txt) or another dataset")
                speakers.append(label)
            if (speakers[0] == speakers[1]) != bool(self.target[k]):
                said = "target (same speaker)" if self.target[k] else "non-target"
                raise UserError(
                    f"{self.source}:{self.lines[k]}: the line says {said}, but {self.enrol[k]} "
                    f"is by {class_names[speakers[0]]} and {self.test[k]} by "
                    f"{class_names[speakers[1]]}; fix the label or the file")
        if not self.target.any() or self.target.all():
            kind = "target" if not self.target.any() else "non-target"
            raise UserError(f"{self.source}: no {kind} trial; a trial list needs both same- and "
                            "different-speaker trials for an EER")


def read_trial_list(path: str) -> TrialList:
    """Parse a trial list (see the module's notes); a bad file or line is a UserError."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise UserError(f"cannot read trial list {path} ({reason}); expected a text file of "
                        "lines 'label enrol test' (VoxCeleb's veri_test2.txt); fix "
                        "--set trial_list=FILE") from None
    enrol: list[str] = []
    test: list[str] = []
    target: list[bool] = []
    lines: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) == 3 and fields[0] in ("0", "1"):
            label, a, b = fields
        elif len(fields) == 3 and fields[2] in ("target", "nontarget"):
            a, b, label = fields
        else:
            raise UserError(f"{path}:{number}: expected a trial 'label enrol test' with label 1 "
                            f"(same speaker) or 0, e.g. '1 id10270/x6uYqmx31kE/00001.wav "
                            f"id10270/8jEAjG6SegY/00008.wav', got {line.strip()[:80]!r}; fix or "
                            "remove that line")
        enrol.append(a)
        test.append(b)
        target.append(_TARGET[label])
        lines.append(number)
    if not target:
        raise UserError(f"trial list {path} holds no trial; expected lines 'label enrol test'")
    return TrialList(source=path, enrol=np.asarray(enrol, dtype=object),
                     test=np.asarray(test, dtype=object), target=np.asarray(target, dtype=bool),
                     lines=np.asarray(lines, dtype=np.int64))
