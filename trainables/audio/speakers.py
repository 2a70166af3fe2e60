"""The built-in ``speakers`` dataset: speech synthesised by espeak-ng, many voices, no download.

Like ``glyphs`` for images, it lets a speaker-verification search run anywhere. Speech comes from
Debian's ``espeak-ng`` (GPL-3+), run as a separate program: dmlsearch neither links nor bundles it,
and says how to install it when it is missing. Every speaker is a voice of its own: an espeak-ng
*voice variant* written for it (pitch and its range, the frequency, height and width of nine
formants scaled around one vocal-tract length, breathiness, roughness, flutter, consonant
strength) over one of eight English accents (US, New York, British, Received Pronunciation,
Scottish, Lancaster, West Midlands, Caribbean), speaking at its own rate. Each speaker records
:data:`SESSIONS` sessions (the "videos" of VoxCeleb) of random sentences; a session has its own
channel (a random tilt of the spectrum, a gain) and background noise (white, pink, brown or mains
hum, at 5 to 25 dB SNR), every utterance its own sentence, speed and intonation. Audio is
resampled to 16 kHz (from espeak-ng's 22,050 Hz) and written as FLAC.

The corpus is generated on first use into the cache (``$DMLSEARCH_CACHE``, else
``~/.cache/dmlsearch``) as a VoxCeleb-like tree, ``speakers-v<N>-seed<S>/<speaker>/<session>/
<utt>.flac``, plus ``trials.txt``: VoxCeleb-format trials between the test speakers (the second
half; the split is speaker-disjoint), for every test utterance :data:`TRIALS_PER_UTTERANCE`
same-speaker and as many different-speaker trials. The same seed and espeak-ng version give the
same samples (each utterance draws from its own generator; espeak-ng's output is deterministic);
another espeak-ng version rebuilds the tree. It is built in a temporary folder and renamed into
place, so parallel trials never see half a corpus.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from dmlsearch.trainables.audio._sentences import sentence
from dmlsearch.trainables.audio.io import resample
from dmlsearch.trainables.errors import UserError

__all__ = [
    "ACCENTS", "ESPEAK_HINT", "SESSIONS", "SPEAKERS", "TRIALS_PER_UTTERANCE",
    "UTTERANCES_PER_SESSION", "Voice", "build_corpus", "corpus_dir", "espeak_version",
]

log = logging.getLogger(__name__)

#: Bump when anything changes the audio (voices, sentences, noise, layout).
FORMAT_VERSION = 1
SPEAKERS = 160
SESSIONS = 3
UTTERANCES_PER_SESSION = 3
TRIALS_PER_UTTERANCE = 8
SAMPLE_RATE = 16_000
ESPEAK_RATE = 22_050
ACCENTS = ("en-us", "en-us-nyc", "en-gb", "en-gb-x-rp", "en-gb-scotland", "en-gb-x-gbclan",
           "en-gb-x-gbcwmd", "en-029")
ESPEAK_HINT = ("the built-in speakers dataset synthesises speech with the espeak-ng program, "
               "which is not on the PATH; install it (Debian/Ubuntu: apt-get install espeak-ng; "
               "macOS: brew install espeak-ng) or use another dataset")
_VARIANT_PREFIX = "dmls"


def espeak_program() -> str:
    program = shutil.which("espeak-ng")
    if program is None:
        raise UserError(ESPEAK_HINT)
    return program


def espeak_version() -> tuple[str, str]:
    """(version line, data folder) of the installed espeak-ng."""
    done = subprocess.run([espeak_program(), "--version"], capture_output=True, text=True,
                          check=False)
    line = done.stdout.strip()
    if done.returncode != 0 or "Data at:" not in line:
        raise UserError(f"espeak-ng --version did not answer as expected ({line[:80]!r}); "
                        "reinstall espeak-ng (apt-get install --reinstall espeak-ng)")
    version, data = line.split("Data at:", 1)
    return version.strip(), data.strip()


@dataclasses.dataclass(frozen=True)
class Voice:
    """One speaker's espeak-ng voice: an accent and a variant (see :meth:`variant_text`)."""

    accent: str
    gender: str
    pitch: tuple[int, int]
    formants: tuple[tuple[int, int, int], ...]  # (frequency %, height %, width %) for 0..8
    breath: tuple[int, ...]
    roughness: int
    flutter: int
    consonants: int
    words_per_minute: int

    @classmethod
    def random(cls, rng: np.random.Generator) -> Voice:
        female = bool(rng.random() < 0.5)
        base = int(rng.uniform(150, 235) if female else rng.uniform(72, 135))
        top = base + int(rng.uniform(0.3, 0.9) * base)
        tract = rng.uniform(1.02, 1.16) if female else rng.uniform(0.86, 1.02)
        formants = tuple((int(round(100 * tract * rng.uniform(0.95, 1.05))),
                          int(rng.uniform(70, 120)), int(rng.uniform(80, 160)))
                         for _ in range(9))
        breathy = rng.random() < 0.3
        breath = tuple(int(rng.integers(0, 5)) if breathy else 0 for _ in range(8))
        return cls(accent=ACCENTS[int(rng.integers(len(ACCENTS)))],
                   gender="female" if female else "male", pitch=(base, top), formants=formants,
                   breath=breath, roughness=int(rng.integers(0, 5)),
                   flutter=int(rng.integers(0, 30)), consonants=int(rng.uniform(80, 130)),
                   words_per_minute=int(rng.uniform(135, 190)))

    def variant_text(self, name: str) -> str:
        lines = ["language variant", f"name {name}", f"gender {self.gender}",
                 f"pitch {self.pitch[0]} {self.pitch[1]}"]
        lines += [f"formant {k} {f} {h} {w}" for k, (f, h, w) in enumerate(self.formants)]
        lines += ["breath " + " ".join(map(str, self.breath)), f"roughness {self.roughness}",
                  f"flutter {self.flutter}", f"consonants {self.consonants}"]
        return "\n".join(lines) + "\n"

    def label(self) -> str:
        """A short readable description: accent and gender (``gb-scotland-f``)."""
        return f"{self.accent.removeprefix('en-').replace('-x-', '-')}-{self.gender[0]}"


#: Voice variants per private data folder: espeak-ng lists at most 350 voices (its languages,
#: about 130, count too) and silently falls back to another voice beyond that.
VARIANTS_PER_FOLDER = 40


def _private_data(data: str, voices: dict[str, Voice], where: Path) -> Path:
    """An espeak-ng data folder (``where/espeak-ng-data``): the system's, symbolic links to
    ``data``, but for ``voices/``, which holds only our variants (``voices/!v``; the system's
    own variants and MBROLA voices are left out, so the voice list stays short)."""
    root = where / "espeak-ng-data"
    root.mkdir(parents=True)
    for entry in os.scandir(data):
        if entry.name != "voices":
            (root / entry.name).symlink_to(entry.path)
    (root / "voices" / "!v").mkdir(parents=True)
    for name, voice in voices.items():
        (root / "voices" / "!v" / name).write_text(voice.variant_text(name))
    return where


def _speak(program: str, path: Path | None, voice: str, text: str, *, speed: int, pitch: int,
           amplitude: int) -> np.ndarray:
    """``text`` spoken by ``voice`` (``path``: a private data folder, None: the system's)."""
    where = [f"--path={path}"] if path is not None else []
    command = [program, *where, "-v", voice, "-s", str(speed), "-p", str(pitch),
               "-a", str(amplitude), "--stdout", text]
    done = subprocess.run(command, capture_output=True, check=False)
    if done.returncode != 0 or not done.stdout:
        raise UserError(f"espeak-ng failed on voice {voice} (exit {done.returncode}: "
                        f"{done.stderr.decode(errors='replace').strip()[:120]}); reinstall "
                        "espeak-ng or report it")
    import soundfile

    samples, rate = soundfile.read(io.BytesIO(done.stdout), dtype="float64")
    if rate != ESPEAK_RATE:
        raise UserError(f"espeak-ng wrote {rate} Hz audio, expected {ESPEAK_RATE}; reinstall it")
    return samples * 32768.0


def _noise(kind: str, count: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "hum":
        t = np.arange(count) / SAMPLE_RATE
        mains = 50.0 if rng.random() < 0.5 else 60.0
        hum = sum(rng.uniform(0.2, 1.0) / h * np.sin(2 * np.pi * mains * h * t + rng.uniform(0, 6))
                  for h in range(1, 6))
        return hum + 0.1 * rng.standard_normal(count)
    if kind == "white":
        return rng.standard_normal(count)
    from scipy.fft import next_fast_len

    size = next_fast_len(count, real=True)  # a prime length would take 20x longer
    spectrum = np.fft.rfft(rng.standard_normal(size))
    f = np.maximum(np.fft.rfftfreq(size), 1.0 / size)
    spectrum /= np.sqrt(f) if kind == "pink" else f  # brown: 1/f^2 power
    return np.fft.irfft(spectrum, n=size)[:count]


@dataclasses.dataclass(frozen=True)
class _Session:
    tilt: float  # first-order filter coefficient: the channel's spectral tilt
    gain_db: float
    noise: str
    snr_db: float

    @classmethod
    def random(cls, rng: np.random.Generator) -> _Session:
        return cls(tilt=float(rng.uniform(-0.6, 0.6)), gain_db=float(rng.uniform(-8, 4)),
                   noise=("white", "pink", "brown", "hum")[int(rng.integers(4))],
                   snr_db=float(rng.uniform(5, 25)))


def _record(speech: np.ndarray, session: _Session, rng: np.random.Generator) -> np.ndarray:
    """Speech at 22,050 Hz (int16 scale) → a session's recording at 16 kHz, int16."""
    x = resample(speech, ESPEAK_RATE, SAMPLE_RATE)
    lead = np.zeros(int(rng.uniform(0.1, 0.4) * SAMPLE_RATE))
    trail = np.zeros(int(rng.uniform(0.1, 0.4) * SAMPLE_RATE))
    x = np.concatenate([lead, x, trail])
    if session.tilt:  # y[n] = x[n] + tilt * x[n-1]: brighter (> 0) or duller (< 0)
        x = x + session.tilt * np.concatenate([[0.0], x[:-1]])
    power = float(np.mean(speech ** 2)) or 1.0
    noise = _noise(session.noise, len(x), rng)
    noise *= np.sqrt(power / 10 ** (session.snr_db / 10) / max(np.mean(noise ** 2), 1e-12))
    x = (x + noise) * 10 ** (session.gain_db / 20)
    peak = np.abs(x).max()
    if peak > 32000:
        x *= 32000 / peak
    return np.rint(x).astype(np.int16)


def corpus_dir(cache: Path, *, seed: int) -> Path:
    return cache / f"speakers-v{FORMAT_VERSION}-seed{seed}"


def _fingerprint(version: str, *, seed: int, speakers: int, sessions: int,
                 utterances: int) -> str:
    text = "|".join(map(str, (FORMAT_VERSION, version, seed, speakers, sessions, utterances,
                              TRIALS_PER_UTTERANCE, ACCENTS)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


FINGERPRINT_FILE = ".fingerprint"
TRIALS_FILE = "trials.txt"


def _speaker_name(index: int, voice: Voice) -> str:
    return f"s{index:03d}-{voice.label()}"


def build_corpus(target: Path, *, seed: int = 0, speakers: int = SPEAKERS,
                 sessions: int = SESSIONS, utterances: int = UTTERANCES_PER_SESSION,
                 workers: int | None = None) -> Path:
    """Generate the corpus into ``target`` unless it is there with the same fingerprint;
    returns ``target``. ``speakers`` etc. make smaller corpora (tests)."""
    program = espeak_program()
    version, data = espeak_version()
    fingerprint = _fingerprint(version, seed=seed, speakers=speakers, sessions=sessions,
                               utterances=utterances)
    if _same_corpus(target, fingerprint):
        return target
    if speakers < 4 or sessions < 1 or utterances < 1 or sessions * utterances < 2:
        raise ValueError("a corpus needs >= 4 speakers and >= 2 utterances per speaker")
    started = time.perf_counter()
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        voices = {f"{_VARIANT_PREFIX}{k:04d}": Voice.random(np.random.default_rng([seed, k]))
                  for k in range(speakers)}
        names_in_order = list(voices)
        folders = []
        for start in range(0, speakers, VARIANTS_PER_FOLDER):
            chunk = {n: voices[n] for n in names_in_order[start:start + VARIANTS_PER_FOLDER]}
            folder = _private_data(data, chunk, work / ".espeak" / str(start))
            _check_variants_apply(program, folder, next(iter(chunk)), chunk)
            folders.append(folder)
        tree = work / "tree"
        jobs = [(k, s, u) for k in range(speakers) for s in range(sessions)
                for u in range(utterances)]
        names = [_speaker_name(k, v) for k, v in enumerate(voices.values())]

        variants = list(voices.items())

        def make(job: tuple[int, int, int]) -> None:
            k, s, u = job
            variant, voice = variants[k]
            session = _Session.random(np.random.default_rng([seed, k, s, 1_000_003]))
            rng = np.random.default_rng([seed, k, s, u])
            private = folders[k // VARIANTS_PER_FOLDER]
            speech = _speak(program, private, f"{voice.accent}+{variant}", sentence(rng),
                            speed=int(voice.words_per_minute * rng.uniform(0.9, 1.1)),
                            pitch=int(rng.uniform(38, 62)), amplitude=int(rng.uniform(90, 130)))
            audio = _record(speech, session, rng)
            path = tree / names[k] / f"session{s + 1}" / f"{u + 1:05d}.flac"
            path.parent.mkdir(parents=True, exist_ok=True)
            import soundfile

            soundfile.write(str(path), audio, SAMPLE_RATE, subtype="PCM_16", format="FLAC")

        with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool:
            list(pool.map(make, jobs))
        (tree / TRIALS_FILE).write_text(_trials(names, sessions, utterances, seed=seed))
        (tree / FINGERPRINT_FILE).write_text(fingerprint + "\n")
        _move_into_place(tree, target, fingerprint, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log.info("synthesised %d speakers x %d utterances with espeak-ng in %.1f s into %s",
             speakers, sessions * utterances, time.perf_counter() - started, target)
    return target


def _same_corpus(target: Path, fingerprint: str) -> bool:
    stamp = target / FINGERPRINT_FILE
    return stamp.is_file() and stamp.read_text().strip() == fingerprint


def _move_into_place(tree: Path, target: Path, fingerprint: str, work: Path) -> None:
    """``tree`` becomes ``target``; a stale corpus there is moved aside first (into ``work``,
    deleted with it), and one another process finished meanwhile is kept (it is the same)."""
    if _same_corpus(target, fingerprint):
        return
    if target.exists():
        os.replace(target, work / "stale")
    try:
        os.replace(tree, target)
    except OSError:
        if not _same_corpus(target, fingerprint):
            raise


def _check_variants_apply(program: str, private: Path, name: str,
                          voices: dict[str, Voice]) -> None:
    """espeak-ng silently falls back to the plain accent for a variant it cannot find (and to
    another voice when its voice list overflows): make sure the private folder speaks the accent
    as the system does and our variant differently (the corpus would otherwise hold 8 voices,
    not one per speaker)."""
    accent = voices[name].accent
    text = "checking the voice"
    def say(path: Path | None, voice: str) -> np.ndarray:
        return _speak(program, path, voice, text, speed=160, pitch=50, amplitude=100)

    ours, plain = say(private, f"{accent}+{name}"), say(None, accent)
    same = ours.shape == plain.shape and np.array_equal(ours, plain)
    accent_moved = say(private, accent)  # the private folder must speak the accent unchanged
    if same or accent_moved.shape != plain.shape or not np.array_equal(accent_moved, plain):
        raise UserError("espeak-ng ignored the built-in speakers' voice variants (its --path "
                        "option did not find them); reinstall espeak-ng, or report your "
                        "espeak-ng version")


def _trials(names: list[str], sessions: int, utterances: int, *, seed: int) -> str:
    """VoxCeleb-format trials among the test speakers (the second half of ``names``)."""
    rng = np.random.default_rng([seed, 7_777])
    test = names[len(names) // 2:]
    utts = [(speaker, f"{speaker}/session{s + 1}/{u + 1:05d}.flac") for speaker in test
            for s in range(sessions) for u in range(utterances)]
    lines = []
    per_speaker = sessions * utterances
    for k, (speaker, enrol) in enumerate(utts):
        first = (k // per_speaker) * per_speaker
        same = [j for j in range(first, first + per_speaker) if j != k]
        other = [j for j in range(len(utts)) if not first <= j < first + per_speaker]
        count = min(TRIALS_PER_UTTERANCE, len(same))
        for j in rng.choice(same, size=count, replace=False):
            lines.append(f"1 {enrol} {utts[j][1]}")
        for j in rng.choice(other, size=count, replace=False):
            lines.append(f"0 {enrol} {utts[j][1]}")
    return "\n".join(lines) + "\n"
