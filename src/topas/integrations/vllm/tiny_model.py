"""``topas tiny-model PATH``: a random tiny Llama plus a locally trained byte-level BPE
tokenizer, so the real vLLM engine runs on machines without GPUs or model downloads.

The model is random (its text is noise) but its *cost* behaves like a real decoder: prefill
scales with prompt length, decode with batch and context, and vLLM's prefix cache works on it
exactly as on a real model.  That is all the scheduling experiments need.

Shape (fixed so calibrated profiles stay valid): hidden 256, 4 layers, 4 query heads of 64,
2 KV heads, vocab 4096, up to 16384 positions.  ``mu`` = 2 * 4 * 2 * 64 * 2 bytes = 2 KiB per
KV token in bf16.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HIDDEN = 256
LAYERS = 4
Q_HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // Q_HEADS
INTERMEDIATE = 512
VOCAB = 4096
MAX_POSITIONS = 16384
DTYPE = "bfloat16"

#: what a calibrated profile copies as its model shape (parameter count filled in on build)
SHAPE = {
    "name": "tiny-llama",
    "layers": LAYERS,
    "hidden": HIDDEN,
    "q_heads": Q_HEADS,
    "kv_heads": KV_HEADS,
    "head_dim": HEAD_DIM,
}


def _corpus(seed: int, n_lines: int = 4000) -> list[str]:
    """Deterministic training text: pseudo-words over a fixed alphabet, so the tokenizer is the
    same for the same seed on every machine (no local files that may differ)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, size=int(rng.integers(2, 9)))) for _ in range(3000)]
    words += [
        "agent",
        "task",
        "stage",
        "plan",
        "code",
        "test",
        "review",
        "def",
        "return",
        "import",
        "class",
        "the",
        "and",
        "of",
        "to",
        "in",
    ]
    lines = []
    for _ in range(n_lines):
        k = int(rng.integers(5, 20))
        idx = rng.integers(0, len(words), size=k)
        lines.append(" ".join(words[i] for i in idx) + ".")
    return lines


def build_tokenizer(path: Path, seed: int = 0):
    """Train a byte-level BPE tokenizer of :data:`VOCAB` ids and save it (HF fast format)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<s>", "</s>", "<unk>"]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=special,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=MAX_POSITIONS,
    )
    fast.save_pretrained(str(path))
    return fast


def build_tiny_model(path: str | Path, seed: int = 0) -> Path:
    """Write a random tiny Llama and its tokenizer to ``path`` (created); returns the path.

    Seeded: the same ``seed`` gives the same weights and tokenizer.  Takes seconds on a CPU.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"tiny-model path {out}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(out, seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=Q_HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=None,
        torch_dtype=DTYPE,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(getattr(torch, DTYPE))
    model.save_pretrained(str(out), safe_serialization=True)
    n_params = sum(p.numel() for p in model.parameters())
    (out / "topas_tiny_model.json").write_text(
        json.dumps({**SHAPE, "params": n_params, "seed": seed, "dtype": DTYPE}, indent=2) + "\n"
    )
    return out
