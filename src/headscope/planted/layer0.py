"""Layer-0 mechanisms of seed 000 (to be planted)."""


def plant(w, space, tokenizer, rng) -> dict:
    return {}
