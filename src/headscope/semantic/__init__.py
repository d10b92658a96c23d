"""Seed 002: semantic heads (GPT-2's L1H5) — category prompts (:mod:`.prompts`), the survey on
them (:mod:`.survey`), the QK bilinear form over effective embeddings (:mod:`.bilinear`), token
clusters (:mod:`.clustering`; Leiden in a child process: :mod:`._leiden`), one head end to end (:mod:`.head`), steering by eigenvalue scaling
(:mod:`.steering`), and their options as frozen values (:mod:`.options`)."""
