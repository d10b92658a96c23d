"""The claims of the two seed studies, measured on a checkpoint: one row per claim.

Every row holds the published figure, headscope's figure on the model, the tolerance
and pass / fail. The published column is one of two references:

* ``seed (GPT-2 Small)``: the figures of the seed studies (``data/seed_claims.json``);
  they refer to GPT-2 Small, so on another model a row compares that model with GPT-2
  Small (a note says so when the shapes differ);
* ``planted manifest``: for a checkpoint written by ``headscope plant``, the mechanisms
  its ``planted.json`` documents (contextual heads, keyword heads, kernel categories,
  contextual neurons, semantic head and categories, eigenvalue signs, symmetric W_QK).
  A claim the manifest does not plant (the TV of the key split, the steering gains)
  keeps the seed's threshold and says so.

Layer-0 rows do not rest on headscope's own head-choice thresholds: the downstream
rows (neuron count, neuron 704's lists and texts, circuit fidelity, worst denominators)
use the *published* heads (0, 2, 6, 8, 9, 10 for GPT-2 Small; the manifest's for a
planted model), or the set given by ``heads=`` (``--heads``: indices, ``seed``,
``code`` = 0, 2, 6, 8, 9, 10, 11 as Gibson's code, or ``auto``). The automatic choice
(:data:`headscope.contextual.SELECTION`) is its own row, ``contextual_heads_auto``.

Every row is also measured against a null (issue 32, :mod:`headscope.claims.null`): the same
statistic on seeded components of the model under test with the structure removed (null heads,
forms, readouts, sign-flipped windows, the model's other head sets). A row passes only when the
component passes AND clears the null by the margin of its ``null`` entry in seed_claims.json;
else "indistinguishable from random" (:func:`verdict`).

Each measurement reuses headscope's own analyses (query ' the', the shipped calibration
and sample texts, seeded category prompts). The survey's rank rows follow the L1H5
authors' prompt recipe (:data:`headscope.survey.PRESETS` ``seed``); the neuron rows use
the contribution variant ``paper`` (or ``variant=``) and the details give the neuron
count under every variant of :data:`NEURON_VARIANTS`. docs/fidelity.md compares every
definition with the authors' code. A claim that cannot be measured on the model (no
head 1.5, no neuron 704) is a failing row whose note gives the reason; it never stops
the other rows.

The claims live in :mod:`headscope.claims` (one check function per claim plus its entry in
seed_claims.json; docs/architecture.md); this module is their public face.
"""

from __future__ import annotations

from .claims.details import NEURON_VARIANTS
from .claims.reference import (PLANTED_REFERENCE, SEED_REFERENCE, Reference, planted_reference, reference_for,
                               resolve_heads, seed_reference)
from .claims.run import GPT2_SMALL, reproduce
from .claims.seed000_heads import FIDELITY_NEAR, fidelity_near, subset_spreads
from .claims.seed000_neurons import LABEL_TEXTS, list_agreement, set_agreement
from .claims.seed002 import pair_attention, pair_prompts, rules_by_category
from .claims.table import CHECKS, RANDOM, ClaimRow, ReproduceResult, claim, verdict
from .claims.work import FIDELITY_STRIDE, KERNEL_WINDOWS, TOP, Work, held_out_text
from .shipped import seed_claims

__all__ = ["CHECKS", "FIDELITY_NEAR", "FIDELITY_STRIDE", "GPT2_SMALL", "KERNEL_WINDOWS", "LABEL_TEXTS",
           "NEURON_VARIANTS", "PLANTED_REFERENCE", "RANDOM", "SEED_REFERENCE", "TOP", "ClaimRow", "Reference",
           "ReproduceResult", "Work", "claim", "fidelity_near", "held_out_text", "list_agreement", "pair_attention",
           "pair_prompts", "planted_reference", "reference_for", "reproduce", "resolve_heads", "rules_by_category",
           "seed_claims", "seed_reference", "set_agreement", "subset_spreads", "verdict"]
