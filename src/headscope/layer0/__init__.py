"""Seed 000: layer 0 of a GPT-2 — the content + position split and what it explains.

- :mod:`.split`         the split itself (the one home of the layer-0 view and its kernels' maths);
                        its names are re-exported here, so ``headscope.layer0.view`` keeps working
- :mod:`.split_windows` the split over whole windows of text and its TV against the model's pattern
                        (block by block); :mod:`.split` re-exports its names
- :mod:`.kernels`       positional kernels, categories, TV of the split
- :mod:`.denominators`  softmax-denominator stability across texts
- :mod:`.calibration`   sampled denominators on a calibration text
- :mod:`.contextual`    the contextual circuit (head selection, token weights, fidelity)
- :mod:`.neurons`       contextual MLP0 neurons through the circuit
- :mod:`.rotary_split`  the split of rotary models (relative kernel × content factor), which
                        :mod:`.split` hands them to (docs/rotary-layer0.md)
"""

from .split import (  # noqa: F401
    view, check_split, token_id, measure_c, resolve_c, ln1, queries, positional_term,
    positional_basis, key_split, Frame, score_readouts, positional_logits, query_frames,
    positional_kernels, positional_kernel, frame, log_content_factors, seed_log_denominator, log_Z,
    fixed_query_scores, fixed_query_log_denominators, split_scores, approx_pattern, approx_tv,
    text_positional_kernels, text_content_factors,
    true_pattern, crude_pattern, tv_distance, SEED_QUERY, GPT2_C, CONTENT_CHUNK,
)
