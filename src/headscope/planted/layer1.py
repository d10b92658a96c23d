"""Layer-1 semantic head of seed 002 (to be planted)."""


def plant(w, space, tokenizer, rng) -> dict:
    return {}
