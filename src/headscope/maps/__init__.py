"""Whole-model maps: every head of every layer from its weights (:mod:`.atlas`), and the attention
(:mod:`.patterns`) and MLP0 (:mod:`.activations`) statistics on texts that the report draws."""
