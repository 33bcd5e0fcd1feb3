"""Roofline cost model of one serving-engine iteration, and engine profiles.

One iteration processes a batch: some prefill tokens (chunked) and one decode token for each
decoding request.  Its time is

    t = overhead_s + max(flops / (peak_flops * compute_eff),
                         bytes / (hbm_bytes_per_s * memory_eff))

    flops = 2 * params * (prefill_tokens + decode_requests)        (weights GEMMs)
          + 4 * layers * q_heads * head_dim * attn_pairs / attn_eff (QK^T and AV)
    bytes = weight_bytes + mu * kv_read_tokens                      (weights + KV reads)

where ``attn_pairs`` counts (query token, key token) pairs and ``kv_read_tokens`` the KV
tokens read (decode: every request reads its whole context, its agent prefix included).
``attn_eff`` (default 1.0) is the attention kernels' achieved fraction of the GEMM FLOP rate:
1.0 on GPUs where both are tensor-core bound; far below 1 on a CPU backend, where a few new
tokens attending to a long cached prefix cost much more than their FLOP count suggests.
``mu`` (bytes per KV token) = 2 (K and V) * layers * kv_heads * head_dim * kv_dtype_bytes.
A prefix transfer over the host link takes ``mu * tokens / swap_bytes_per_s`` (``B_swap``).

While the batch does not change, decode iterations are regular: every request's context grows
by one token per iteration, so both roofline arms grow linearly and the time of ``n``
iterations has a closed form (:meth:`CostModel.decode_run_time`).  The simulator uses it to
jump from event to event instead of stepping token by token.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Hardware:
    name: str
    peak_flops: float  #: dense FLOP/s at the compute dtype
    hbm_bytes_per_s: float
    swap_bytes_per_s: float  #: effective host<->device bandwidth (B_swap)
    compute_eff: float = 0.6  #: achieved fraction of peak FLOP/s
    memory_eff: float = 0.8  #: achieved fraction of HBM bandwidth
    overhead_s: float = 0.004  #: fixed per-iteration cost (scheduling, kernel launches, sampling)
    source: str = ""
    #: achieved fraction of the GEMM FLOP rate in attention (QK^T, AV); 1.0 = same rate
    attn_eff: float = 1.0


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    params: float
    weight_bytes_per_param: float = 2.0
    kv_dtype_bytes: int = 2
    source: str = ""

    @property
    def kv_bytes_per_token(self) -> int:
        """``mu``: bytes of K and V for one token across all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_dtype_bytes

    @property
    def weight_bytes(self) -> float:
        return self.params * self.weight_bytes_per_param


@dataclass(frozen=True, slots=True)
class Profile:
    """An engine profile: hardware, model and the engine's own constants."""

    name: str
    hardware: Hardware
    model: ModelShape
    kv_budget_tokens: int
    host_capacity_tokens: int
    block_size: int = 1
    prefill_chunk_tokens: int = 8192
    max_batch_requests: int = 256
    preemption: str = "sglang"
    notes: str = ""
    calibration: dict[str, Any] = field(default_factory=dict)

    def cost_model(self) -> CostModel:
        return CostModel(self.hardware, self.model)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def with_overrides(self, **kw: Any) -> Profile:
        return replace(self, **kw)

    def time_scaled(self, factor: float) -> Profile:
        """The same profile on a machine ``factor`` times slower: every iteration time (fixed
        overhead, compute and memory arms alike) multiplied by ``factor``; the host link is
        left as it is.  Used to replay a calibrated profile at an engine's measured speed."""
        if not (factor > 0 and math.isfinite(factor)):
            raise ValueError(f"profile {self.name!r}: time factor {factor} must be finite and > 0")
        h = self.hardware
        return replace(
            self,
            hardware=replace(
                h,
                overhead_s=h.overhead_s * factor,
                peak_flops=h.peak_flops / factor,
                hbm_bytes_per_s=h.hbm_bytes_per_s / factor,
            ),
        )


class CostModel:
    """Iteration, prefill, decode and swap times for one hardware + model pair (seconds)."""

    __slots__ = (
        "hardware",
        "model",
        "mu",
        "_c_lin",
        "_c_attn",
        "_flop_rate",
        "_byte_rate",
        "_w_bytes",
        "overhead_s",
        "swap_s_per_token",
    )

    def __init__(self, hardware: Hardware, model: ModelShape) -> None:
        self.hardware = hardware
        self.model = model
        self.mu = model.kv_bytes_per_token
        self._c_lin = 2.0 * model.params
        if not hardware.attn_eff > 0:
            raise ValueError(
                f"hardware {hardware.name!r}: attn_eff {hardware.attn_eff} must be > 0"
            )
        # folding 1/attn_eff into the per-pair FLOP count keeps iteration_time and the
        # closed-form decode arms (which both use _c_attn) consistent
        self._c_attn = 4.0 * model.layers * model.q_heads * model.head_dim / hardware.attn_eff
        self._flop_rate = hardware.peak_flops * hardware.compute_eff
        self._byte_rate = hardware.hbm_bytes_per_s * hardware.memory_eff
        self._w_bytes = model.weight_bytes
        self.overhead_s = hardware.overhead_s
        self.swap_s_per_token = self.mu / hardware.swap_bytes_per_s

    # -- one iteration ---------------------------------------------------------------------
    def iteration_time(
        self, linear_tokens: float, attn_pairs: float, kv_read_tokens: float
    ) -> float:
        """Time of one iteration that pushes ``linear_tokens`` tokens through the weights,
        computes ``attn_pairs`` attention pairs and reads ``kv_read_tokens`` KV tokens."""
        flops = self._c_lin * linear_tokens + self._c_attn * attn_pairs
        byts = self._w_bytes + self.mu * kv_read_tokens
        return self.overhead_s + max(flops / self._flop_rate, byts / self._byte_rate)

    def prefill_chunk_terms(self, tokens: int, context_before: int) -> tuple[float, float]:
        """(attn_pairs, kv_read_tokens) of prefilling ``tokens`` new tokens after
        ``context_before`` cached ones (causal attention inside the chunk)."""
        return tokens * (context_before + (tokens + 1) / 2.0), float(context_before)

    def prefill_time(self, tokens: int, context_before: int = 0) -> float:
        """Time to prefill ``tokens`` in one iteration alone (no decode in the batch)."""
        pairs, reads = self.prefill_chunk_terms(tokens, context_before)
        return self.iteration_time(tokens, pairs, reads)

    def decode_step_time(self, batch: int, context_tokens: int) -> float:
        """One decode iteration for ``batch`` requests whose contexts total ``context_tokens``."""
        return self.iteration_time(batch, context_tokens, context_tokens)

    def swap_time(self, tokens: int) -> float:
        """Host-link transfer time of ``tokens`` KV tokens: ``mu * tokens / B_swap``."""
        return tokens * self.swap_s_per_token

    # -- closed forms for a regular decode run ---------------------------------------------
    def _decode_arms(self, batch: int, context_tokens: int) -> tuple[float, float, float, float]:
        """Iteration k of a regular run costs overhead + max(a0 + a1*k, b0 + b1*k)."""
        a0 = (self._c_lin * batch + self._c_attn * context_tokens) / self._flop_rate
        a1 = self._c_attn * batch / self._flop_rate
        b0 = (self._w_bytes + self.mu * context_tokens) / self._byte_rate
        b1 = self.mu * batch / self._byte_rate
        return a0, a1, b0, b1

    def decode_run_time(self, batch: int, context_tokens: int, steps: int) -> float:
        """Total time of ``steps`` decode iterations of a fixed batch whose contexts total
        ``context_tokens`` at the first one (each iteration adds ``batch`` tokens)."""
        if steps <= 0:
            return 0.0
        a0, a1, b0, b1 = self._decode_arms(batch, context_tokens)
        total = steps * self.overhead_s
        d0, d_last = a0 - b0, (a0 - b0) + (a1 - b1) * (steps - 1)  # arm A minus arm B
        if d0 >= 0 and d_last >= 0:
            return total + _arith(a0, a1, 0, steps)
        if d0 <= 0 and d_last <= 0:
            return total + _arith(b0, b1, 0, steps)
        # the arms cross once inside the run: first k on the other side of the crossing
        split = min(max(math.ceil(-d0 / (a1 - b1)), 1), steps - 1)
        if d0 > 0:
            return total + _arith(a0, a1, 0, split) + _arith(b0, b1, split, steps)
        return total + _arith(b0, b1, 0, split) + _arith(a0, a1, split, steps)

    def decode_steps_within(
        self, batch: int, context_tokens: int, horizon_s: float, max_steps: int
    ) -> int:
        """Largest ``n <= max_steps`` whose run time is ``<= horizon_s``."""
        if horizon_s <= 0 or max_steps <= 0:
            return 0
        if self.decode_run_time(batch, context_tokens, max_steps) <= horizon_s:
            return max_steps
        lo, hi = 0, max_steps  # run_time(lo) <= horizon < run_time(hi)
        step0 = self.decode_step_time(batch, context_tokens)
        guess = min(max_steps - 1, int(horizon_s / step0)) if step0 > 0 else 0
        # the run time grows by at least one iteration's time per step (orders of magnitude
        # above its rounding), so it is monotone and the answer is the one n with
        # run_time(n) <= horizon < run_time(n + 1); iterations only get longer, so it is
        # almost always the guess or the one below: test those before bisecting
        if guess > 0:
            if self.decode_run_time(batch, context_tokens, guess) <= horizon_s:
                lo = guess
                if self.decode_run_time(batch, context_tokens, guess + 1) > horizon_s:
                    return guess
                lo = guess + 1
            else:
                hi = guess
                if self.decode_run_time(batch, context_tokens, guess - 1) <= horizon_s:
                    return guess - 1
                hi = guess - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.decode_run_time(batch, context_tokens, mid) <= horizon_s:
                lo = mid
            else:
                hi = mid
        return lo

    # -- a request alone on an empty engine (for lower bounds and priors) ------------------
    def call_time_alone(
        self,
        prompt_tokens: int,
        output_tokens: int,
        context_before: int = 0,
        chunk_tokens: int = 8192,
    ) -> float:
        """Latency of one call alone on the engine: prefill ``prompt_tokens`` after
        ``context_before`` cached tokens (chunked), the last chunk yields the first token, then
        ``output_tokens - 1`` decode iterations."""
        t = 0.0
        done = 0
        while done < prompt_tokens:
            chunk = min(chunk_tokens, prompt_tokens - done)
            t += self.prefill_time(chunk, context_before + done)
            done += chunk
        ctx = context_before + prompt_tokens + 1
        return t + self.decode_run_time(1, ctx, output_tokens - 1)


def _arith(c0: float, c1: float, k_from: int, k_to: int) -> float:
    """sum_{k=k_from}^{k_to-1} (c0 + c1*k)."""
    n = k_to - k_from
    if n <= 0:
        return 0.0
    return c0 * n + c1 * (k_from + k_to - 1) * n / 2.0


# --------------------------------------------------------------------------------------
# Profiles.  Every constant has its source next to it; docs/engine.md lists them.
# --------------------------------------------------------------------------------------
A100_80G = Hardware(
    name="a100-80g",
    peak_flops=312e12,  # NVIDIA A100 datasheet, dense BF16 tensor core
    hbm_bytes_per_s=2.039e12,  # A100 80GB SXM datasheet, HBM2e
    swap_bytes_per_s=25e9,  # PCIe 4.0 x16, effective (spec section 6)
    compute_eff=0.6,  # gives ~1 s to prefill 3k tokens of a 32B model (spec section 6)
    memory_eff=0.8,  # gives ~40 ms per decode step at small batch (spec: 35-50 ms)
    overhead_s=0.004,
    source="NVIDIA A100 datasheet; efficiencies set so the spec's reference timings hold",
)
H100_80G = Hardware(
    name="h100-80g",
    peak_flops=989e12,
    hbm_bytes_per_s=3.35e12,
    swap_bytes_per_s=50e9,
    compute_eff=0.55,
    memory_eff=0.8,
    overhead_s=0.003,
    source="NVIDIA H100 SXM datasheet (dense BF16); PCIe 5.0 x16 effective",
)
H200 = Hardware(
    name="h200",
    peak_flops=1979e12,
    hbm_bytes_per_s=4.8e12,
    swap_bytes_per_s=50e9,
    compute_eff=0.5,
    memory_eff=0.8,
    overhead_s=0.003,
    source="NVIDIA H200 SXM datasheet (dense FP8, weights in FP8); PCIe 5.0 x16 effective",
)
QWEN25_32B = ModelShape(
    name="qwen2.5-32b",
    layers=64,
    hidden=5120,
    q_heads=40,
    kv_heads=8,
    head_dim=128,
    params=32.5e9,
    source="Qwen2.5-32B-Instruct config.json (spec section 6)",
)
LLAMA3_8B = ModelShape(
    name="llama-3-8b",
    layers=32,
    hidden=4096,
    q_heads=32,
    kv_heads=8,
    head_dim=128,
    params=8.03e9,
    source="Meta-Llama-3-8B config.json",
)
LLAMA3_70B = ModelShape(
    name="llama-3-70b",
    layers=80,
    hidden=8192,
    q_heads=64,
    kv_heads=8,
    head_dim=128,
    params=70.6e9,
    weight_bytes_per_param=1.0,
    source="Meta-Llama-3-70B config.json; FP8 weights so it fits one H200, BF16 KV",
)

GiB = 1024**3

PROFILES: dict[str, Profile] = {}


def register_profile(p: Profile) -> Profile:
    PROFILES[p.name] = p
    return p


register_profile(
    Profile(
        name="a100-80g/qwen2.5-32b",
        hardware=A100_80G,
        model=QWEN25_32B,
        # 80 GB - 65 GB weights - activations leaves ~8-9 GB of KV: 32k tokens of 256 KiB
        # (spec section 6: "roughly 25-40 k tokens").
        kv_budget_tokens=32_768,
        host_capacity_tokens=(64 * GiB) // QWEN25_32B.kv_bytes_per_token,  # 64 GiB host tier
        notes="The paper's setup: one A100-80GB serving Qwen2.5-32B-Instruct (SGLang v0.5.3).",
    )
)
register_profile(
    Profile(
        name="h100-80g/llama-3-8b",
        hardware=H100_80G,
        model=LLAMA3_8B,
        # 0.9 * 80 GB - 16 GB weights - ~4 GB activations = ~52 GB of 128 KiB tokens
        kv_budget_tokens=400_000,
        host_capacity_tokens=(128 * GiB) // LLAMA3_8B.kv_bytes_per_token,
    )
)
register_profile(
    Profile(
        name="h200/llama-3-70b",
        hardware=H200,
        model=LLAMA3_70B,
        # 0.9 * 141 GB - 70.6 GB FP8 weights - ~4 GB activations = ~52 GB of 320 KiB tokens
        kv_budget_tokens=160_000,
        host_capacity_tokens=(256 * GiB) // LLAMA3_70B.kv_bytes_per_token,
    )
)

DEFAULT_PROFILE = "a100-80g/qwen2.5-32b"


def profile_from_dict(d: Mapping[str, Any], where: str = "profile") -> Profile:
    try:
        hw = Hardware(**d["hardware"])
        model = ModelShape(**d["model"])
        rest = {k: v for k, v in d.items() if k not in ("hardware", "model")}
        return Profile(hardware=hw, model=model, **rest)
    except (KeyError, TypeError) as e:
        raise ValueError(f"{where}: not a valid profile ({e})") from None


def get_profile(name_or_path: str) -> Profile:
    """A registered profile by name, or a profile JSON file (for example one written by the
    vLLM calibration) by path."""
    if name_or_path in PROFILES:
        return PROFILES[name_or_path]
    p = Path(name_or_path)
    if p.suffix == ".json" and p.exists():
        try:
            return profile_from_dict(json.loads(p.read_text()), where=str(p))
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}: not valid JSON ({e.msg} at line {e.lineno})") from None
    # calibrated profiles shipped with the package
    shipped = Path(__file__).with_name("profiles") / (name_or_path.replace("/", "__") + ".json")
    if shipped.exists():
        return register_profile(profile_from_dict(json.loads(shipped.read_text()), str(shipped)))
    known = ", ".join(sorted(PROFILES))
    raise ValueError(f"profile {name_or_path!r}: unknown (known: {known}; or a path to a .json)")


def list_profiles() -> list[str]:
    names = set(PROFILES)
    d = Path(__file__).with_name("profiles")
    if d.is_dir():
        names.update(f.stem.replace("__", "/") for f in d.glob("*.json"))
    return sorted(names)
