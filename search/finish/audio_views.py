"""What a retrained speaker-verification model does on its test trials, as pictures: the audio
counterpart of the retrieval galleries (:mod:`dmlsearch.search.finish.gallery`).

- :func:`trial_scores_view` (``trials.png``): for each scoring (cosine, the learned distance D,
  their fusion) the distributions of the target (same speaker) and non-target trials' scores,
  with the EER threshold, and the DET curves of all of them (miss rate against false-alarm rate
  on normal-deviate axes, as speaker verification draws them) with each EER and minDCF point;
- :func:`hard_trials_view` (``hard_trials.png``): the target trials scored lowest and the
  non-target trials scored highest, each a row of the two utterances' log-mel spectrograms
  with their speakers, files and scores: where to look for label noise, channel or session
  effects, look-alike voices.

The trials are the test metrics' own: the dataset's trial list when it has one, else the pairs
the verification metrics score (:mod:`dmlsearch.trainables.metrics.verification`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from dmlsearch.search.reporting.plots import figure
from dmlsearch.search.reporting.plots import save_png

__all__ = ["ScoredTrials", "hard_trials_view", "score_trials", "trial_scores_view"]

COLOURS = {"cosine": "tab:blue", "e2e": "tab:red", "fusion": "tab:purple"}
LABELS = {"cosine": "cosine", "e2e": "D (learned)", "fusion": "fusion"}
TARGET, NONTARGET = "#1a9850", "#d73027"
SPECTROGRAM_SECONDS = 3.0


@dataclasses.dataclass(frozen=True)
class ScoredTrials:
    """Test trials (positions into the test set), their truth and their scores per scoring."""

    left: np.ndarray
    right: np.ndarray
    target: np.ndarray
    scores: dict[str, np.ndarray]
    listed: bool  # from the dataset's trial list (else: the pairs of the test speakers)


def score_trials(embeddings: np.ndarray, labels: np.ndarray, audio: Any, scorer: Any, *,
                 max_pairs: int) -> ScoredTrials:
    """The test trials of ``audio`` (its trial list, else the verification metrics' pairs of
    ``labels``) scored as the test metrics score them."""
    from dmlsearch.trainables.metrics.verification import pair_indices
    from dmlsearch.trainables.metrics.verification import sample_pairs
    from dmlsearch.trainables.metrics.verification import score_index_pairs

    device = _scorer_device(scorer)
    listed = audio.listed_pairs() if callable(getattr(audio, "listed_pairs", None)) else None
    if listed is not None:
        left, right, target = listed
    else:
        n = len(labels)
        chosen = sample_pairs(n, max_pairs)
        k = np.arange(chosen) if isinstance(chosen, int) else chosen
        left, right = pair_indices(k, n)
        target = np.asarray(labels)[left] == np.asarray(labels)[right]
    scores = score_index_pairs(embeddings, left, right, scorer=scorer, device=device)
    return ScoredTrials(left=np.asarray(left), right=np.asarray(right),
                        target=np.asarray(target, dtype=bool), scores=scores,
                        listed=listed is not None)


def _scorer_device(scorer: Any) -> Any:
    if scorer is None:
        return "cpu"
    try:
        return next(scorer.parameters()).device
    except (AttributeError, StopIteration):
        return "cpu"


def _probit(p: np.ndarray) -> np.ndarray:
    from scipy.stats import norm

    return norm.ppf(np.clip(p, 1e-4, 1 - 1e-4))


def trial_scores_view(trials: ScoredTrials, path: Path, *, title: str = "") -> Path:
    """Score distributions per scoring and the DET curves of all (see the module's notes)."""
    from dmlsearch.trainables.metrics.roc import det_points
    from dmlsearch.trainables.metrics.roc import verification_metrics

    names = list(trials.scores)
    fig = figure(4.0 * (len(names) + 1.3), 4.2)
    grid = fig.add_gridspec(1, len(names) + 1, width_ratios=[1] * len(names) + [1.3])
    det = fig.add_subplot(grid[0, len(names)])
    ticks = np.array([0.001, 0.01, 0.05, 0.2, 0.5, 0.8, 0.95])
    for column, name in enumerate(names):
        scores = trials.scores[name]
        result = verification_metrics(scores, trials.target)
        ax = fig.add_subplot(grid[0, column])
        bins = np.linspace(float(scores.min()), float(scores.max()), 50)
        ax.hist(scores[trials.target], bins=bins, density=True, alpha=0.6, color=TARGET,
                label=f"target ({int(trials.target.sum())})")
        ax.hist(scores[~trials.target], bins=bins, density=True, alpha=0.6, color=NONTARGET,
                label=f"non-target ({int((~trials.target).sum())})")
        ax.axvline(result["eer_threshold"], color="black", lw=1, ls="--",
                   label="EER threshold")
        ax.set_title(f"{LABELS.get(name, name)}: EER {100 * result['eer']:.2f}%, "
                     f"minDCF0.01 {result['mindcf_0.01']:.3f}", fontsize=9)
        ax.set_xlabel("score (higher: same speaker)", fontsize=8)
        ax.set_yticks([])
        ax.tick_params(labelsize=7)
        if column == 0:
            ax.legend(fontsize=7, loc="upper left")
        fa, miss = det_points(scores, trials.target)
        det.plot(_probit(fa), _probit(miss), color=COLOURS.get(name, "black"), lw=1.4,
                 label=f"{LABELS.get(name, name)} (EER {100 * result['eer']:.2f}%)")
        det.scatter(_probit(np.array([result["eer"]])), _probit(np.array([result["eer"]])),
                    color=COLOURS.get(name, "black"), s=18, zorder=3)
        cost = (miss * 0.01 + fa * 0.99)
        best = int(np.argmin(cost))
        det.scatter(_probit(fa[best:best + 1]), _probit(miss[best:best + 1]), marker="s",
                    facecolors="none", edgecolors=COLOURS.get(name, "black"), s=30, zorder=3)
    limit = _probit(np.array([0.0005, 0.95]))
    det.plot(limit, limit, color="grey", lw=0.6, ls=":")
    det.set_xlim(*limit)
    det.set_ylim(*limit)
    det.set_xticks(_probit(ticks), [f"{100 * t:g}" for t in ticks])
    det.set_yticks(_probit(ticks), [f"{100 * t:g}" for t in ticks])
    det.tick_params(labelsize=7)
    det.set_xlabel("false-alarm rate (%)", fontsize=8)
    det.set_ylabel("miss rate (%)", fontsize=8)
    det.set_title("DET (dot: EER, square: minDCF at p_target 0.01)", fontsize=9)
    det.legend(fontsize=7, loc="upper right")
    source = "the dataset's trial list" if trials.listed else "all pairs of the test speakers"
    fig.suptitle(f"{title + ': ' if title else ''}{len(trials.target)} test trials "
                 f"({source})", fontsize=10)
    fig.tight_layout()
    save_png(fig, path)
    return path


def _spectrogram(audio: Any, index: int) -> np.ndarray:
    """Log-mel energies [40, frames] of the first seconds of utterance ``index``."""
    import torch

    from dmlsearch.trainables.audio import FeatureSpec
    from dmlsearch.trainables.audio import fbank

    rate = audio.features.sample_rate
    wave = audio.read(int(index))[: int(SPECTROGRAM_SECONDS * rate)]
    spec = FeatureSpec(kind="fbank", n_features=40, sample_rate=rate)
    return fbank(torch.from_numpy(wave.astype(np.float32)), spec).numpy()


def hard_trials_view(trials: ScoredTrials, audio: Any, path: Path, *, pairs: int = 6,
                     title: str = "") -> Path:
    """The ``pairs`` hardest target and non-target trials by the model's default scoring (D
    when it has one, else cosine), drawn as spectrograms (see the module's notes)."""
    scoring = "e2e" if "e2e" in trials.scores else "cosine"
    scores = trials.scores[scoring]
    targets = np.flatnonzero(trials.target)
    others = np.flatnonzero(~trials.target)
    lowest = targets[np.argsort(scores[targets], kind="stable")[:pairs]]
    highest = others[np.argsort(-scores[others], kind="stable")[:pairs]]
    rows = [(k, True) for k in lowest] + [(k, False) for k in highest]
    fig = figure(12, 1.05 * len(rows) + 0.9)
    grid = fig.add_gridspec(len(rows), 3, width_ratios=[0.9, 2, 2], hspace=0.75, wspace=0.06,
                            left=0.01, right=0.99, top=1 - 0.75 / (1.05 * len(rows) + 0.9),
                            bottom=0.35 / (1.05 * len(rows) + 0.9))
    other = [n for n in trials.scores if n != scoring]
    frames = int(SPECTROGRAM_SECONDS * 100)
    for row, (k, is_target) in enumerate(rows):
        colour = TARGET if is_target else NONTARGET
        caption = fig.add_subplot(grid[row, 0])
        caption.axis("off")
        lines = ["same speaker, scored low" if is_target else "other speakers, scored high",
                 f"{LABELS.get(scoring, scoring)}: {scores[k]:.3f}"]
        lines += [f"{LABELS.get(n, n)}: {trials.scores[n][k]:.3f}" for n in other]
        caption.text(0.0, 0.5, "\n".join(lines), fontsize=7.5, va="center", color=colour)
        for column, position in enumerate((trials.left[k], trials.right[k]), start=1):
            ax = fig.add_subplot(grid[row, column])
            image = _spectrogram(audio, position)
            top = float(image.max())
            ax.imshow(image, origin="lower", aspect="auto", cmap="magma", vmin=top - 10,
                      vmax=top, extent=(0, image.shape[1] / 100, 0, image.shape[0]))
            ax.set_xlim(0, frames / 100)
            ax.set_yticks([])
            ax.tick_params(labelsize=6, length=2, pad=1)
            speaker = audio.class_names[int(audio.labels[position])]
            ax.set_title(f"{'enrol' if column == 1 else 'test'}: {audio.files[position]}",
                         fontsize=7, color=colour, loc="left", pad=2)
            for spine in ax.spines.values():
                spine.set_edgecolor(colour)
                spine.set_linewidth(1.5)
            del speaker
    fig.suptitle(f"{title + ': ' if title else ''}hardest test trials by "
                 f"{LABELS.get(scoring, scoring)} (log-mel spectrograms, first "
                 f"{SPECTROGRAM_SECONDS:g} s, time in s; green: same speaker, red: different)",
                 fontsize=9)
    save_png(fig, path)
    return path
