"""TOPAS: task-oriented, prefix-aware scheduling (spec: shared/spec/topas.md, docs/topas.md).

Modules, by concept:

* :mod:`.terms` -- the Score's terms and their per-decision inputs (deferral ``D_t``, move
  costs, redo / revoke, reuse look-ahead, each task's ``E[LP]`` entry);
* :mod:`.aging` -- the aging weight ``g_i(t)`` (log aging, rank aging);
* :mod:`.context` -- one decision's candidates and gains (:class:`Context`);
* :mod:`.search` -- GREEDYPACK, the Score of a packed state, exhaustive and hierarchical
  search over prefix sets;
* :mod:`.parameters` -- the declared parameters and the defaults;
* :mod:`.core` -- the typed host class of the mixins (every parameter and cache declared);
* :mod:`.policy` -- the policy :class:`Topas`, ``topas-paper`` and its ablations;
* :mod:`.flagship` -- ``topas-hold`` (held contexts) and the flagship ``topas``
  (:data:`DEPARTURES`, :func:`flagship_params`).

Importing this package registers all of them.
"""

from topas.policies.topas.context import Context
from topas.policies.topas.flagship import DEPARTURES, TopasHold, flagship_params
from topas.policies.topas.parameters import DEFAULTS
from topas.policies.topas.policy import Topas, TopasOracle
from topas.policies.topas.search import Choice

__all__ = [
    "DEFAULTS",
    "DEPARTURES",
    "Choice",
    "Context",
    "Topas",
    "TopasHold",
    "TopasOracle",
    "flagship_params",
]
