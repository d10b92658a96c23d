"""Seed 002: semantic heads (GPT-2's L1H5) — the survey on category prompts, the QK bilinear form
over effective embeddings (:mod:`.bilinear`), token clusters (:mod:`.clustering`), one head end to
end (:mod:`.head`) and steering by eigenvalue scaling (:mod:`.steering`)."""
