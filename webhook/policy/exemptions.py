"""Which opt-outs a user may write on an object, as the admin decides (chart
`webhook.exemptions`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Exemptions:
    """Which of the two opt-outs a user may write on an object, as the admin decides
    (chart `webhook.exemptions`): the project's label, GKE's skip annotation."""

    opt_out_label: bool = True  # tpu-webhook.io/ignore: "true": neither checked nor patched
    skip_annotation: bool = True  # cloud.google.com/skip-tpu-webhook-check: "true": not checked


EXEMPTIONS = Exemptions()  # both, as GKE's own check honours its annotation
NO_EXEMPTIONS = Exemptions(opt_out_label=False, skip_annotation=False)
