"""Fixtures for tests and benchmarks (not used by the library or the CLI at run time).

:mod:`.hub` writes checkpoints in the Hugging Face hub's exact layout (and offline HF caches).
"""
