"""The ``cub200`` dataset: Caltech-UCSD Birds-200-2011 in its official layout, file-backed.

``CUB_200_2011/`` holds ``images.txt`` (``<image_id> <path>``), ``image_class_labels.txt``
(``<image_id> <class_id>``), ``classes.txt`` (``<class_id> <name>``) and ``images/<path>``; the
root may be that folder or the folder holding it. Images are listed in ``images.txt`` order; class
ids are sorted numerically, so the standard split (Psomas 2020 §3.1) trains on classes 1–100 (5,864
images) and tests on 101–200 (5,924). The official train/test image split
(``train_test_split.txt``) is a classification split and is not used.
"""

from __future__ import annotations

import os

import numpy as np

from dmlsearch.trainables.data._fileset import FileImageSet
from dmlsearch.trainables.data._imageset import Dataset
from dmlsearch.trainables.data._layout import check_files
from dmlsearch.trainables.data._layout import read_rows
from dmlsearch.trainables.data._layout import register_layout
from dmlsearch.trainables.data._transforms import TransformSpec
from dmlsearch.trainables.errors import UserError

__all__: list[str] = []

NAME = "cub200"
REQUIRED = ("images.txt", "image_class_labels.txt", "classes.txt", "images")
LAYOUT = (
    "the CUB_200_2011 folder (or the folder holding it) with images.txt (<image_id> <path>), "
    "image_class_labels.txt (<image_id> <class_id>), classes.txt (<class_id> <name>) and "
    "images/<path>"
)


def _int(text: str, path: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UserError(
            f"{NAME}: {path} has the id {text!r}, expected an integer: restore the original file"
        ) from None


@register_layout(
    NAME,
    description="CUB-200-2011 birds: 200 classes, 11,788 photos (classes 1-100 train)",
    layout=LAYOUT,
    required=REQUIRED,
    folder="CUB_200_2011",
    image_size=224,
)
def read_cub200(top: str, image_size: int) -> Dataset:
    images_txt, labels_txt, classes_txt = (os.path.join(top, n) for n in REQUIRED[:3])
    paths = {
        _int(i, images_txt): path
        for i, path in read_rows(images_txt, dataset=NAME, columns=2)
    }
    class_of = {
        _int(i, labels_txt): _int(c, labels_txt)
        for i, c in read_rows(labels_txt, dataset=NAME, columns=2)
    }
    names = {
        _int(c, classes_txt): name
        for c, name in read_rows(classes_txt, dataset=NAME, columns=2)
    }
    unlabelled = [i for i in paths if i not in class_of]
    if unlabelled:
        raise UserError(
            f"{NAME}: {len(unlabelled)} image ids of {images_txt} have no class in {labels_txt} "
            f"(e.g. {unlabelled[0]}): restore the original files"
        )
    unknown = sorted({class_of[i] for i in paths} - set(names))
    if unknown:
        raise UserError(
            f"{NAME}: class ids {unknown[:5]} of {labels_txt} are not in {classes_txt}: "
            "restore the original files"
        )
    class_ids = sorted(names)
    rank = {c: k for k, c in enumerate(class_ids)}
    files = [os.path.join("images", paths[i]) for i in paths]
    check_files(top, files, dataset=NAME, listed_in=images_txt)
    images = FileImageSet(
        root=top,
        files=np.asarray(files, dtype=object),
        labels=np.asarray([rank[class_of[i]] for i in paths], dtype=np.int64),
        class_names=tuple(names[c] for c in class_ids),
        transform=TransformSpec.for_size(image_size),
        dataset=NAME,
    )
    return Dataset.with_standard_split(name=NAME, images=images)
