"""The ``sop`` dataset: Stanford Online Products in its official layout, file-backed.

``Stanford_Online_Products/`` holds ``Ebay_train.txt`` and ``Ebay_test.txt`` (a header line
``image_id class_id super_class_id path``, then one image per line, ``path`` relative to that
folder, e.g. ``bicycle_final/111085122871_0.JPG``); the root may be that folder or the folder
holding it. The standard split (Psomas 2020 §3.1) is the files' own: the classes of
``Ebay_train.txt`` (11,318 classes, 59,551 images) train, those of ``Ebay_test.txt`` (11,316,
60,502) test. Images keep the files' order (train file first); class ids are sorted numerically and
named ``<super-class folder>/<class_id>`` (e.g. ``bicycle_final/1``).
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

NAME = "sop"
REQUIRED = ("Ebay_train.txt", "Ebay_test.txt")
LAYOUT = (
    "the Stanford_Online_Products folder (or the folder holding it) with Ebay_train.txt and "
    "Ebay_test.txt (header 'image_id class_id super_class_id path', paths relative to that "
    "folder) and the <super_class>_final/*.JPG images they list"
)


def _read_list(path: str) -> tuple[list[int], list[str]]:
    """``(class ids, relative paths)`` of one ``Ebay_*.txt`` file."""
    rows = read_rows(path, dataset=NAME, columns=4, header="image_id")
    try:
        return [int(row[1]) for row in rows], [row[3] for row in rows]
    except ValueError:
        raise UserError(
            f"{NAME}: {path} has a non-integer class_id: restore the original file"
        ) from None


@register_layout(
    NAME,
    description="Stanford Online Products: 22,634 classes, 120,053 photos (Ebay_train classes "
    "train)",
    layout=LAYOUT,
    required=REQUIRED,
    folder="Stanford_Online_Products",
    image_size=224,
    # SOP's classes hold 2-12 photos, so the field reports Recall@1/10/100/1000 on it (Psomas
    # 2020 §4; Proxy-Anchor's code, evaluate_cos_SOP), not the 1/2/4/8 of CUB and CARS.
    recall_ks=(1, 10, 100, 1000),
)
def read_sop(top: str, image_size: int) -> Dataset:
    train_txt, test_txt = (os.path.join(top, name) for name in REQUIRED)
    train_ids, train_paths = _read_list(train_txt)
    test_ids, test_paths = _read_list(test_txt)
    shared = np.intersect1d(train_ids, test_ids)
    if shared.size:
        raise UserError(
            f"{NAME}: class ids {shared[:5].tolist()} are in both {train_txt} and {test_txt}; "
            "the official files share none: restore them"
        )
    check_files(top, train_paths, dataset=NAME, listed_in=train_txt)
    check_files(top, test_paths, dataset=NAME, listed_in=test_txt)
    ids = np.asarray(train_ids + test_ids, dtype=np.int64)
    paths = train_paths + test_paths
    class_ids, first = np.unique(ids, return_index=True)
    names = tuple(
        f"{os.path.dirname(paths[i]) or 'products'}/{c}"
        for c, i in zip(class_ids.tolist(), first.tolist())
    )
    images = FileImageSet(
        root=top,
        files=np.asarray(paths, dtype=object),
        labels=np.searchsorted(class_ids, ids),
        class_names=names,
        transform=TransformSpec.for_size(image_size),
        dataset=NAME,
    )
    logger.info("sop: %d images of %d classes in %s", len(images), class_ids.size, top)
    return Dataset(
        name=NAME,
        images=images,
        train_classes=np.searchsorted(class_ids, np.unique(train_ids)),
        test_classes=np.searchsorted(class_ids, np.unique(test_ids)),
    )
