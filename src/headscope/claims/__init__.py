"""The seed studies' claims, each against a null (issue 32): the package behind ``headscope reproduce``.

One job per module, imports running down this list:

* :mod:`~headscope.claims.null`: the null machinery every row shares (null heads, forms and readouts
  of the model under test, the comparison with a stated margin);
* :mod:`~headscope.claims.table`: a row, the result, a row's verdict, the registry of checks (:func:`claim`);
* :mod:`~headscope.claims.reference`: what the rows compare with (the seeds' figures or a planted manifest);
* :mod:`~headscope.claims.work`: the measurements the rows share, computed once per run;
* :mod:`~headscope.claims.seed000_heads`, :mod:`~headscope.claims.seed000_neurons`,
  :mod:`~headscope.claims.seed000_context`, :mod:`~headscope.claims.seed002`,
  :mod:`~headscope.claims.seed002_clusters`: one check function per claim;
* :mod:`~headscope.claims.details`: the JSON's supporting figures;
* :mod:`~headscope.claims.run`: the runner (:func:`~headscope.claims.run.reproduce`).

A claim is one check function decorated with ``@claim("<id>")`` plus its entry in
``data/seed_claims.json``. The public names are re-exported by :mod:`headscope.reproduce`.
"""

from .null import (HEAD_DRAWS, READOUT_DRAWS, WEIGHT_DRAWS, NullComparison, compare, form_null, gaussian_like, generator,
                   negative_mass, null_head_models, null_heads, random_readouts, readout_null, sym_eigenvalues)

__all__ = ["HEAD_DRAWS", "READOUT_DRAWS", "WEIGHT_DRAWS", "NullComparison", "compare", "form_null", "gaussian_like", "generator",
           "negative_mass", "null_head_models", "null_heads", "random_readouts", "readout_null", "sym_eigenvalues"]
