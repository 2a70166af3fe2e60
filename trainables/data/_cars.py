"""The ``cars196`` dataset: Stanford Cars in the layout of ``cars_annos.mat``, file-backed.

A folder holding ``cars_annos.mat`` and ``car_ims/`` (``car_ims.tgz`` unpacked beside it); the
root may be that folder or the folder holding it. The ``annotations`` struct array of the
``.mat`` file gives each image's ``relative_im_path`` (``car_ims/000001.jpg``) and ``class``
(1–196); its ``class_names`` cell array names the classes (``class <id>`` if absent). Images keep
the file's order; class ids are sorted numerically, so the standard split (Psomas 2020 §3.1) trains
on classes 1–98 (8,054 images) and tests on 99–196 (8,131). The ``test`` flag of the annotations is
the classification split and is not used; bounding boxes are ignored (whole images, as the
reference code does).
"""

from __future__ import annotations

import logging
import os

import numpy as np

from dmlsearch.trainables.data._fileset import FileImageSet
from dmlsearch.trainables.data._imageset import Dataset
from dmlsearch.trainables.data._layout import check_files
from dmlsearch.trainables.data._layout import register_layout
from dmlsearch.trainables.data._transforms import TransformSpec
from dmlsearch.trainables.errors import UserError

__all__: list[str] = []

logger = logging.getLogger(__name__)

NAME = "cars196"
REQUIRED = ("cars_annos.mat", "car_ims")
LAYOUT = (
    "a folder (or the folder holding it) with cars_annos.mat (its 'annotations' struct array: "
    "relative_im_path, class, bbox_x1..bbox_y2, test) and car_ims/*.jpg"
)


def _read_annotations(path: str) -> tuple[list[str], np.ndarray, list[str] | None]:
    """``(relative paths, class ids, class names or None)`` of ``cars_annos.mat``."""
    import scipy.io  # only this reader needs SciPy; keep importing the package light

    try:
        mat = scipy.io.loadmat(path, squeeze_me=True)
    except (OSError, ValueError, TypeError, NotImplementedError) as exc:
        raise UserError(f"{NAME}: cannot read {path} as a MATLAB file ({exc})") from None
    annotations = mat.get("annotations")
    fields = getattr(getattr(annotations, "dtype", None), "names", None) or ()
    if annotations is None or not {"relative_im_path", "class"} <= set(fields):
        raise UserError(
            f"{NAME}: {path} has no 'annotations' struct array with fields relative_im_path "
            f"and class (variables: {', '.join(k for k in mat if not k.startswith('__'))}): "
            "restore the original cars_annos.mat"
        )
    annotations = np.atleast_1d(annotations)
    paths = [str(p).strip() for p in annotations["relative_im_path"]]
    try:
        classes = np.asarray([int(c) for c in annotations["class"]], dtype=np.int64)
    except (TypeError, ValueError):
        raise UserError(f"{NAME}: {path} has non-integer classes: restore the original file") \
            from None
    names = mat.get("class_names")
    class_names = None if names is None else [str(n).strip() for n in np.atleast_1d(names)]
    return paths, classes, class_names


@register_layout(
    NAME,
    description="Stanford Cars (CARS196): 196 classes, 16,185 photos (classes 1-98 train)",
    layout=LAYOUT,
    required=REQUIRED,
    image_size=224,
)
def read_cars196(top: str, image_size: int) -> Dataset:
    mat_path = os.path.join(top, "cars_annos.mat")
    paths, classes, names = _read_annotations(mat_path)
    if not paths:
        raise UserError(f"{NAME}: {mat_path} lists no images: restore the original file")
    class_ids = np.unique(classes)
    if names is not None and (class_ids.min() < 1 or class_ids.max() > len(names)):
        raise UserError(
            f"{NAME}: {mat_path} has classes {class_ids.min()}..{class_ids.max()} but "
            f"{len(names)} class_names: restore the original file"
        )
    check_files(top, paths, dataset=NAME, listed_in=mat_path)
    images = FileImageSet(
        root=top,
        files=np.asarray(paths, dtype=object),
        labels=np.searchsorted(class_ids, classes),
        class_names=tuple(
            names[c - 1] if names is not None else f"class {c}" for c in class_ids.tolist()
        ),
        transform=TransformSpec.for_size(image_size),
        dataset=NAME,
    )
    logger.info("cars196: %d images of %d classes in %s", len(images), class_ids.size, top)
    return Dataset.with_standard_split(name=NAME, images=images)
