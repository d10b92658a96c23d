"""The seed studies' claims, each against a null (issue 32).

:mod:`headscope.claims.null`: the null machinery every row of ``headscope reproduce`` shares
(null heads and readouts of the model under test, the comparison with a stated margin).
The claims table itself is :mod:`headscope.reproduce`.
"""

from .null import (HEAD_DRAWS, READOUT_DRAWS, WEIGHT_DRAWS, NullComparison, compare, form_null, gaussian_like, generator,
                   negative_mass, null_head_models, null_heads, random_readouts, readout_null, sym_eigenvalues)

__all__ = ["HEAD_DRAWS", "READOUT_DRAWS", "WEIGHT_DRAWS", "NullComparison", "compare", "form_null", "gaussian_like", "generator",
           "negative_mass", "null_head_models", "null_heads", "random_readouts", "readout_null", "sym_eigenvalues"]
