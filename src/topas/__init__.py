"""topas: task-oriented, prefix-aware scheduling for multi-agent LLM workflows."""

__version__ = "0.1.0"
