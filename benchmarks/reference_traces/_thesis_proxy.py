"""The thesis proxy loss's reference traces, both variants: the thesis code's loss and loop.

From billpsomas/metric-learning (the code of Psomas 2020): ``losses.py``'s active
``Proxy_Anchor`` block (lines 101-171) is the thesis's loss, variant 2 (Eq. 6.2): the pull of
Proxy-Anchor and a push between proxies through the batch, ``cos_cnt_cnt = cos.T @ cos``
(line 128, unscaled), averaged over all C proxies with a ones-minus-identity mask (lines 141,
156, 161). Variant 1 (Eq. 6.1) is the commented line 133, ``cos_cnt_cnt = F.linear(l2_norm(P),
l2_norm(P))``: the trace ``thesis_proxy_v1`` runs their file with that line uncommented (in
memory; it then overrides line 128's value), nothing else changed.

The loop is the thesis's ``train.py``, the same procedure as Proxy-Anchor's (its lines cited in
:data:`THESIS_LINES`; the proxies' group is ``criterion.proxies`` at lr x 100, train.py:289-290),
run by :func:`_proxy_anchor.run_train_py` with the same arguments as the Proxy-Anchor trace
(their train.py defaults but ``--lr-decay-step 1``; 2 epochs x 3 steps; ``--warm 1``,
``--bn-freeze 1``).

The loss computes ``log(1 + Σ exp(α(g + λ)))`` without a log-sum-exp: each step records the
largest push exponent ``α(g + λ)`` it met (``extra``), below float32's overflow at 88.7 on
these traces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.reference_traces import common
from benchmarks.reference_traces._proxy_anchor import ADAPTATIONS_TRAIN_PY
from benchmarks.reference_traces._proxy_anchor import ARGS as PA_ARGS
from benchmarks.reference_traces._proxy_anchor import CLIP
from benchmarks.reference_traces._proxy_anchor import Lines
from benchmarks.reference_traces._proxy_anchor import load_losses
from benchmarks.reference_traces._proxy_anchor import run_train_py
from benchmarks.reference_traces.common import LinePatch
from benchmarks.reference_traces.common import Setup
from benchmarks.reference_traces.common import Trace

OPTION = "--thesis"
REPOSITORY = "billpsomas/metric-learning"
COMMIT = "a77063fe407f9c6a40b96771c8b008ee9015a897"

THESIS_LINES = Lines(
    file="train.py", bn_freeze_ctor="net/bn_inception.py:34-39",
    groups="train.py:284-288", proxy_group="train.py:289-290",
    optimizer="train.py:305-306", scheduler="train.py:308",
    train_mode="train.py:317", bn_eval="train.py:318-323",
    warm="train.py:328-339", forward="train.py:344", loss="train.py:345",
    zero_grad="train.py:347", backward="train.py:348",
    clip="train.py:350-352", step="train.py:355", scheduler_step="train.py:365",
)
ARGS: dict[str, Any] = dict(PA_ARGS)

EQUATION = {2: "Eq. 6.2, push through the batch, cos.T @ cos unscaled",
            1: "Eq. 6.1, push by the proxies cosines"}
VARIANT_1 = LinePatch(
    line=133, expected="#cos_cnt_cnt = F.linear(l2_norm(P), l2_norm(P))",
    replacement="cos_cnt_cnt = F.linear(l2_norm(P), l2_norm(P))",
)


def _push_exponent(variant: int, proxies: torch.Tensor, embeddings: torch.Tensor) -> float:
    """The largest exponent their line 147 met: alpha * (g + mrg) off the diagonal, with g =
    cos.T @ cos (variant 2) or the proxies' cosines (variant 1)."""
    with torch.no_grad():
        p = F.normalize(proxies, dim=1)
        cos = F.normalize(embeddings, dim=1) @ p.t()
        g = cos.t() @ cos if variant == 2 else p @ p.t()
        off = ~torch.eye(g.shape[0], dtype=torch.bool)
        return float((ARGS["alpha"] * (g + ARGS["mrg"]))[off].max())


def record(checkout: Path, setup: Setup) -> list[Trace]:
    traces = []
    for variant, patches in ((2, ()), (1, (VARIANT_1,))):
        losses = load_losses(checkout, f"thesis_authors_losses_v{variant}", patches)
        with common.cuda_as_cpu():
            criterion = losses.Proxy_Anchor(nb_classes=common.NUM_CLASSES,
                                            sz_embed=ARGS["sz_embedding"], mrg=ARGS["mrg"],
                                            alpha=ARGS["alpha"])
        with torch.no_grad():
            criterion.proxies.copy_(setup.proxies())
        # Diagnostics (not part of their procedure): the exponent uses the proxies the loss saw
        # at the forward, copied there (the diagnosis runs after opt.step).
        seen: dict[str, torch.Tensor] = {}
        criterion.register_forward_pre_hook(
            lambda module, inputs: seen.__setitem__("proxies", module.proxies.detach().clone()))

        def diag(embeddings: torch.Tensor, labels: torch.Tensor,
                 variant: int = variant) -> dict[str, Any]:
            return {"max_push_exponent": _push_exponent(variant, seen["proxies"], embeddings)}

        initial, steps = run_train_py(setup, criterion, criterion.proxies, args=ARGS,
                                      lines=THESIS_LINES, diagnose=diag)
        worst = max(s.extra["max_push_exponent"] for s in steps)
        if worst >= 88.0:
            raise SystemExit(f"variant {variant}: the push exponent reached {worst:.1f}: exp "
                             "overflows float32 in their loss; the setup must be changed")
        clipped = [i + 1 for i, s in enumerate(steps) if s.max_abs_grad > CLIP]
        how = ("losses.py imported from the checkout unchanged (its active Proxy_Anchor block "
               "is variant 2)") if variant == 2 else (
               "losses.py imported with one line changed in memory: "
               + VARIANT_1.describe("losses.py")
               + " (uncommented: it then overrides line 128's cos.T @ cos, giving Eq. 6.1's "
                 "proxy-to-proxy cosines; nothing else changed)")
        traces.append(Trace(
            name=f"thesis_proxy_v{variant}",
            description=f"Thesis proxy loss, variant {variant} ({EQUATION[variant]}) "
                        "with the thesis train.py loop: frozen BN, head warm-up 1 epoch, proxies "
                        "at lr x 100, AdamW with weight decay on every group, clip_grad_value_ "
                        "10, StepLR per epoch; 2 epochs x 3 steps.",
            provenance=common.provenance(
                repository=REPOSITORY, checkout=checkout, expected_commit=COMMIT,
                files=[checkout / "losses.py", checkout / "train.py",
                       checkout / "net" / "bn_inception.py"],
                adaptations=[a.replace("_proxy_anchor.py:run_train_py",
                                       "_proxy_anchor.py:run_train_py (with the thesis "
                                       "train.py's line numbers, _thesis_proxy.THESIS_LINES)")
                             for a in ADAPTATIONS_TRAIN_PY] + [
                    how + "; Proxy_Anchor's proxies are overwritten with the setup's after "
                          "construction.",
                ],
                command="python -m benchmarks.reference_traces.record --thesis "
                        f"{checkout} --out DIR",
            ),
            authors_args={**ARGS, "variant": variant},
            initial=initial,
            steps=steps,
            notes=[
                f"largest push exponent alpha*(g + mrg) met: {worst:.2f} (float32 exp "
                "overflows past 88.7; their loss has no log-sum-exp)",
                f"gradient clipping at {CLIP} changed the gradients at steps {clipped}"
                if clipped else f"no gradient exceeded {CLIP}: clipping is a no-op here",
            ],
        ))
    return traces
