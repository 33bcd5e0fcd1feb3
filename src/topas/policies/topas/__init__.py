"""TOPAS: task-oriented, prefix-aware scheduling (spec: shared/spec/topas.md, docs/topas.md).

The paper's policy ``topas-paper`` and its ablations are in :mod:`.policy`; the flagship
``topas`` and ``topas-hold`` (held contexts) in :mod:`.flagship`.  Importing this package
registers all of them.
"""

from topas.policies.topas.flagship import DEPARTURES, TopasHold, flagship_params
from topas.policies.topas.policy import DEFAULTS, Choice, Topas, TopasOracle, _Context

__all__ = ["DEFAULTS", "DEPARTURES", "Choice", "Topas", "TopasHold", "TopasOracle",
           "flagship_params", "_Context"]
