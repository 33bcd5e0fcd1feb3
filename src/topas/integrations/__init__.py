"""Integrations of topas policies with real serving engines (see :mod:`topas.integrations.vllm`).

Nothing here is imported by the simulator or by policies: engines call policies, never the
other way round.
"""
