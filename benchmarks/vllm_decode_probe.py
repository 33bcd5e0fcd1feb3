"""Decode step time of the in-process CPU vLLM engine for one request, by KV cache size.

    V=$(ls -d ~/.cache/topas/vllm-venv-*/ | head -1)
    $V/bin/python benchmarks/vllm_decode_probe.py 4          # 4 MiB KV cache
    $V/bin/python benchmarks/vllm_decode_probe.py 32         # 32 MiB
    $V/bin/python benchmarks/vllm_decode_probe.py 32 1920    # 32 MiB, max_model_len 1920

Each run is a fresh engine process (one OpenMP thread): 3 requests per context length, 59
decode steps each (the first, prefill, step is left out); prints median and mean step time.
Comparing runs shows how much the same decode step varies between engine processes and
configurations on this backend (docs/vllm.md, "Current figures").
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

if __name__ == "__main__":
    import numpy as np

    from topas.integrations.vllm.cli import default_model
    from topas.integrations.vllm.driver import make_llm, stage_stream
    from vllm import SamplingParams

    mb = float(sys.argv[1]) if len(sys.argv) > 1 else 32.0
    kw = {"max_model_len": int(sys.argv[2])} if len(sys.argv) > 2 else {}
    llm = make_llm(str(default_model()), "fcfs", kv_cache_bytes=int(mb * 2**20), **kw)
    eng = llm.llm_engine
    for ctx in (512, 1024):
        ts = []
        for rep in range(3):
            eng.add_request(
                f"probe-{ctx}-{rep}",
                {"prompt_token_ids": stage_stream(rep, "probe", ctx, 4096, 1)},
                SamplingParams(max_tokens=60, min_tokens=60, ignore_eos=True),
            )
            first = True
            while eng.has_unfinished_requests():
                t = time.perf_counter()
                eng.step()
                if not first:
                    ts.append(time.perf_counter() - t)
                first = False
        print(
            f"KV {mb:g} MiB, max_model_len {eng.model_config.max_model_len}, context {ctx}: "
            f"decode step median {np.median(ts) * 1e3:.2f} ms, mean {np.mean(ts) * 1e3:.2f} ms"
        )
