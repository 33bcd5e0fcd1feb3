"""What a policy returns: the decision, and the error an engine raises for a bad one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: the default of both mapping fields (their key types differ; nothing is ever looked up in it)
_EMPTY: Mapping[Any, float] = MappingProxyType({})


class DecisionError(RuntimeError):
    """A policy returned a decision the engine cannot carry out (never silently clipped)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A post-decision state, expressed as changes to the current one.

    The engine applies it in this order: ``release`` held contexts, ``preempt``, ``drop``,
    ``evict``, ``hold``, ``load``, ``admit``.  After that, the resident prefixes plus the KV of
    every admitted request plus every held context must fit the budget, or the engine raises
    :class:`DecisionError`.

    * ``admit`` -- waiting request ids to start now, in order.  A request whose agent prefix is
      not resident makes it resident: swapped in if a host copy exists, else recomputed as part
      of the request's prefill.
    * ``preempt`` -- running request ids to stop (the engine's preemption semantics apply).
    * ``load`` -- agent prefixes to make resident now without admitting anything (prefetch).
    * ``evict`` -- resident prefixes to swap out to the host tier (dropped when there is no host
      tier or it is full).  ``drop`` -- resident prefixes to discard without a host copy.
      A prefix with admitted users can be neither.
    * ``hold`` -- ``{(task_id, stage): expires_s}``: keep a finished call's context KV resident
      until ``expires_s`` (only contexts in ``snapshot.held`` can be held; a context whose
      ``expires_s`` is not in the future is released after this decision unless held here).
      ``release`` -- held contexts to free now.
    * ``credit`` -- ``{request_id: seconds}`` recorded on the request (``RequestState.credit_s``),
      for policies that keep a ledger of what they granted at admission.
    * ``cache_priority`` -- ``{request_id: priority}`` recorded on the request
      (``RequestState.cache_priority``, default 0): when the engine's context cache (the KV of
      finished calls kept in free memory) must give up room, the contexts of lower-priority
      requests go first, least recently finished first within a priority (SGLang's
      ``--radix-eviction-policy priority``, where a cached node keeps its request's priority).

    Everything not mentioned stays as it is: keeping a prefix resident needs no entry.
    """

    admit: tuple[int, ...] = ()
    preempt: tuple[int, ...] = ()
    load: tuple[str, ...] = ()
    evict: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    hold: Mapping[tuple[int, str], float] = field(default_factory=lambda: _EMPTY)
    release: tuple[tuple[int, str], ...] = ()
    credit: Mapping[int, float] = field(default_factory=lambda: _EMPTY)
    cache_priority: Mapping[int, float] = field(default_factory=lambda: _EMPTY)

    @property
    def empty(self) -> bool:
        return not (
            self.admit
            or self.preempt
            or self.load
            or self.evict
            or self.drop
            or self.hold
            or self.release
            or self.credit
            or self.cache_priority
        )


NOOP = Decision()
