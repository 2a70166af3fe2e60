"""Random English sentences for the built-in speakers: a small grammar over a few hundred words.

Every utterance of the built-in set says something else (speaker verification must not hinge on
the words), in sentences of 4 to 11 words with articles, adjectives, numbers, places and times,
so the prosody and the phones vary as in conversational speech.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sentence"]

_NOUNS = (
    "farmer", "teacher", "river", "garden", "window", "engine", "letter", "bottle", "island",
    "market", "doctor", "village", "candle", "basket", "mountain", "pencil", "kitchen", "rabbit",
    "harbour", "painter", "ladder", "blanket", "bridge", "captain", "forest", "orange", "pocket",
    "student", "tunnel", "violin", "wagon", "jacket", "lantern", "meadow", "needle", "parcel",
    "sailor", "hammer", "mirror", "button", "camera", "desert", "feather", "kettle", "library",
    "monkey", "notebook", "ocean", "pilot", "quilt", "saddle", "tiger", "umbrella", "valley",
    "whistle", "yacht", "zebra", "cottage", "dragon", "elephant", "fountain", "guitar", "helmet",
    "journal", "lemon", "magnet", "planet", "radio", "silver", "tractor", "vessel", "wizard",
)
_VERBS = (
    "carried", "painted", "opened", "followed", "watched", "borrowed", "repaired", "noticed",
    "delivered", "collected", "measured", "discovered", "described", "protected", "visited",
    "remembered", "polished", "wrapped", "lifted", "ordered", "counted", "answered", "pushed",
    "checked", "cleaned", "covered", "dropped", "finished", "gathered", "handled", "joined",
    "kicked", "loaded", "mentioned", "packed", "questioned", "rescued", "shared", "turned",
)
_ADJECTIVES = (
    "quiet", "green", "heavy", "bright", "narrow", "ancient", "gentle", "broken", "golden",
    "hollow", "curious", "distant", "famous", "frozen", "hungry", "lonely", "modern", "nervous",
    "patient", "purple", "rapid", "simple", "strange", "tiny", "wooden", "yellow", "careful",
    "cheerful", "dusty", "elegant", "fragile", "humble", "polite", "rusty", "silent", "smooth",
)
_ADVERBS = (
    "slowly", "quickly", "carefully", "suddenly", "quietly", "happily", "eagerly", "gently",
    "rarely", "nearly", "almost", "finally", "simply", "clearly", "barely",
)
_PLACES = (
    "across the river", "behind the station", "near the old mill", "under the bridge",
    "beside the harbour", "through the forest", "along the coast", "inside the museum",
    "at the market", "over the hill", "around the corner", "past the library",
)
_TIMES = (
    "yesterday", "this morning", "last winter", "on Tuesday", "after lunch", "before dawn",
    "every Sunday", "in the evening", "two weeks ago", "at midnight", "next summer", "today",
)
_NUMBERS = ("two", "three", "four", "five", "seven", "eight", "eleven", "twelve", "twenty",
            "forty", "a hundred", "several", "many", "a few")
_NAMES = ("Anna", "Peter", "Maria", "Oliver", "Grace", "Samuel", "Lucy", "Daniel", "Emma",
          "Victor", "Helen", "Thomas", "Nora", "George", "Alice", "Martin")
_QUESTIONS = ("Who", "Which of them", "Nobody knows who", "Do you know who")


def _pick(rng: np.random.Generator, words: tuple[str, ...]) -> str:
    return words[int(rng.integers(len(words)))]


def _noun_phrase(rng: np.random.Generator) -> str:
    kind = int(rng.integers(4))
    if kind == 0:
        return _pick(rng, _NAMES)
    if kind == 1:
        return f"{_pick(rng, _NUMBERS)} {_pick(rng, _ADJECTIVES)} {_pick(rng, _NOUNS)}s"
    article = "the" if rng.random() < 0.6 else "a"
    adjective = _pick(rng, _ADJECTIVES)
    if article == "a" and adjective[0] in "aeiou":
        article = "an"
    return f"{article} {adjective} {_pick(rng, _NOUNS)}"


def sentence(rng: np.random.Generator) -> str:
    """One random sentence (statement or question) of about 4 to 11 words."""
    subject, obj = _noun_phrase(rng), _noun_phrase(rng)
    verb = _pick(rng, _VERBS)
    extras = []
    where = rng.random()
    if where < 0.3:
        extras.append(_pick(rng, _PLACES))
    elif where < 0.6:
        extras.append(_pick(rng, _TIMES))
    tail = " ".join(extras)
    if rng.random() < 0.2:
        text = f"{_pick(rng, _QUESTIONS)} {verb} {obj} {tail}".strip() + "?"
    else:
        adverb = f"{_pick(rng, _ADVERBS)} " if rng.random() < 0.4 else ""
        text = f"{subject} {adverb}{verb} {obj} {tail}".strip() + "."
    return text[0].upper() + text[1:]
