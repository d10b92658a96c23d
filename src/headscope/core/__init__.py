"""The model core: a checkpoint → validated config and weights in TransformerLens names → a white-box forward.

- :mod:`.config`       the family-neutral hyper-parameters (:class:`Config`) and config.json reading
- :mod:`.families`     one adapter module per model family (GPT-2: :mod:`.families.gpt2`)
- :mod:`.loading`      :class:`Model`, the lazily read :class:`Checkpoint`, weight sources, hub access
- :mod:`.in_memory`    ``headscope.load(a transformers model already in memory)``
- :mod:`.weights`      :class:`Weights`/:class:`Block` and processing (fold LN, centring, value biases)
- :mod:`.forward`      the forward pass with a named cache
- :mod:`.tokenizer`    the checkpoint's tokenizer
- :mod:`._safetensors` the streaming safetensors writer

Nothing here imports the analyses, the report or the commands.
"""
