"""The ``mini_imagenet`` dataset: Ravi & Larochelle's Mini-ImageNet split, file-backed.

A folder holding ``train.csv``, ``val.csv``, ``test.csv`` (header ``filename,label``, then one
``<file>,<wnid>`` per image) and ``images/<file>``; the root may be that folder or the folder
holding it. The three files hold disjoint classes, 64 / 16 / 20 of 600 images each (Monteiro et al.
2020: open-set, 64/16/20 classes). Class ids run over train.csv's classes, then val.csv's, then
test.csv's (each group sorted by wnid), images in that order too:

* ``train_classes``: train.csv's 64 classes (the search splits its validation classes off these,
  like every other dataset);
* ``test_classes``: test.csv's 20 classes;
* ``val_classes``: val.csv's 16 classes, exposed but in neither train nor test. They are the
  official model-selection classes of the E2E reference; a protocol may ask for them
  (``Dataset.val()``), the search's own protocols (Psomas 2020 ch. 5) do not use them, and the
  final test never does.

The usual distribution's images are already 84 × 84, so the default ``image_size`` is 84 and the
evaluation transform resizes to the crop size (``Resize(size) + CenterCrop(size)``: the image as it
is, as the reference evaluates it); training takes RandomResizedCrop(size) + flip.
"""

from __future__ import annotations

import logging
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

logger = logging.getLogger(__name__)

NAME = "mini_imagenet"
SPLITS = ("train.csv", "val.csv", "test.csv")
REQUIRED = SPLITS + ("images",)
LAYOUT = (
    "a folder (or the folder holding it) with the Ravi & Larochelle split files train.csv, "
    "val.csv and test.csv (header 'filename,label') and images/<filename>"
)
NATIVE_SIZE = 84


@register_layout(
    NAME,
    description="Mini-ImageNet (Ravi & Larochelle csv split): 64/16/20 classes of 600 images "
    "(train.csv classes train, test.csv test)",
    layout=LAYOUT,
    required=REQUIRED,
    image_size=NATIVE_SIZE,
)
def read_mini_imagenet(top: str, image_size: int) -> Dataset:
    files: list[str] = []
    wnids: list[str] = []
    groups: list[list[str]] = []
    seen: dict[str, str] = {}
    for split in SPLITS:
        path = os.path.join(top, split)
        rows = read_rows(path, dataset=NAME, columns=2, header="filename", sep=",")
        classes = sorted({label for _, label in rows})
        for label in classes:
            if label in seen:
                raise UserError(
                    f"{NAME}: class {label} is in both {seen[label]} and {split}; the official "
                    "files share no class: restore them"
                )
            seen[label] = split
        check_files(top, [os.path.join("images", f) for f, _ in rows], dataset=NAME,
                    listed_in=path)
        # images of the split in class order, each class in the file's order
        order = {label: k for k, label in enumerate(classes)}
        rows = sorted(rows, key=lambda row: order[row[1]])
        files += [os.path.join("images", f) for f, _ in rows]
        wnids += [label for _, label in rows]
        groups.append(classes)
    class_names = tuple(name for group in groups for name in group)
    rank = {name: k for k, name in enumerate(class_names)}
    bounds = np.cumsum([0] + [len(g) for g in groups])
    images = FileImageSet(
        root=top,
        files=np.asarray(files, dtype=object),
        labels=np.asarray([rank[w] for w in wnids], dtype=np.int64),
        class_names=class_names,
        transform=TransformSpec(size=image_size, resize=image_size, train_mode="rrc"),
        dataset=NAME,
    )
    logger.info("mini_imagenet: %d images of %d classes in %s", len(images), len(rank), top)
    return Dataset(
        name=NAME,
        images=images,
        train_classes=np.arange(bounds[0], bounds[1]),
        val_classes=np.arange(bounds[1], bounds[2]),
        test_classes=np.arange(bounds[2], bounds[3]),
    )
