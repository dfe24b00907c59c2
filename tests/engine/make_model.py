"""Build a tiny random-weight Llama model that the real vLLM CPU engine can serve.

    python -m tests.engine.make_model DIR [--force]

Run it with the engine venv's python (scripts/engine-venv.sh) from the repository root. Nothing is
downloaded: the training text is generated here from a fixed word list and a seeded generator, a
byte-level BPE tokenizer (about 1,000 tokens) is trained on it with `tokenizers`, and a Llama with
random weights (hidden 128, 4 heads of 32, 2 layers) is saved with `save_pretrained`, together with
a ChatML-style chat template whose end-of-turn token <|im_end|> is the EOS token.

The output is deterministic: the same module with the same library versions writes byte-identical
files. DIR gets a stamp file holding a hash of those inputs; when it matches, nothing is rebuilt.
The model's output is meaningless text; it exists to exercise the serving path, not to answer.

This module must not import Django (it runs in the engine venv, which has none).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

SEED = 20240611
VOCAB_SIZE = 1000
CORPUS_SENTENCES = 6000

MODEL_SHAPE = {
    "hidden_size": 128,
    "num_attention_heads": 4,  # head size 32: vLLM's CPU attention rejects 16
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "intermediate_size": 256,
    "max_position_embeddings": 2048,
}

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, IM_END]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

STAMP_NAME = ".tiny-model.stamp"
EXPECTED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
VERSIONED_PACKAGES = ("torch", "transformers", "tokenizers", "safetensors")

# A fixed English-like vocabulary. The sentences built from it only have to give the BPE trainer
# realistic-looking text; their meaning does not matter.
_NOUNS = (
    "gpu card queue user key token request model server cluster node job batch team project "
    "lab student teacher report paper table chart window page minute hour day week month year "
    "river mountain city village garden kitchen window door house road bridge train car boat "
    "letter number word sentence story answer question problem idea plan rule limit share "
    "budget memory cache prefix prompt stream reply message history session engine worker "
    "scheduler gateway replica metric counter gauge latency throughput fairness priority"
).split()
_VERBS = (
    "runs waits serves sends reads writes counts holds takes gives finds keeps moves opens "
    "closes builds checks starts stops shares splits joins measures reports computes returns "
    "asks answers learns teaches grows falls rises drops lifts fills empties watches"
).split()
_ADJECTIVES = (
    "small large quick slow busy idle fair unfair new old long short warm cold bright dark "
    "simple careful late early empty full shared local remote quiet loud steady heavy light "
    "green blue red white black golden silver gentle rough"
).split()
_ADVERBS = "quickly slowly often rarely always never quietly carefully again soon now".split()
_DETERMINERS = "the a this that every each one some no another".split()
_PREPOSITIONS = "in on at with from into over under after before behind near beside".split()
_NAMES = "alice bob carol dave erin frank grace heidi ivan judy mallory olivia peggy".split()
_ROLES = ("system", "user", "assistant")


def _noun_phrase(rng: random.Random) -> str:
    words = [rng.choice(_DETERMINERS)]
    if rng.random() < 0.5:
        words.append(rng.choice(_ADJECTIVES))
    words.append(rng.choice(_NOUNS))
    return " ".join(words)


def _sentence(rng: random.Random) -> str:
    subject = rng.choice(_NAMES).capitalize() if rng.random() < 0.3 else _noun_phrase(rng)
    parts = [subject, rng.choice(_VERBS), _noun_phrase(rng)]
    if rng.random() < 0.4:
        parts += [rng.choice(_PREPOSITIONS), _noun_phrase(rng)]
    if rng.random() < 0.25:
        parts.append(rng.choice(_ADVERBS))
    if rng.random() < 0.15:
        parts.append(f"{rng.randint(0, 9999)} times")
    text = " ".join(parts)
    text = text[0].upper() + text[1:]
    return text + rng.choice((".", ".", ".", "!", "?", ";", ","))


def make_corpus(seed: int = SEED, sentences: int = CORPUS_SENTENCES) -> list[str]:
    """Deterministic training text: paragraphs of generated sentences and some chat turns."""
    rng = random.Random(seed)
    lines: list[str] = []
    while len(lines) < sentences // 4:
        paragraph = " ".join(_sentence(rng) for _ in range(rng.randint(2, 6)))
        if rng.random() < 0.3:
            role = rng.choice(_ROLES)
            paragraph = f"{IM_START}{role}\n{paragraph}{IM_END}\n"
        lines.append(paragraph)
    return lines


def _inputs_digest() -> str:
    """A hash of everything that decides the output: this file and the library versions."""
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    for name in VERSIONED_PACKAGES:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "absent"
        h.update(f"\n{name}=={version}".encode())
    return h.hexdigest()


def is_current(out_dir: Path) -> bool:
    stamp = out_dir / STAMP_NAME
    if not stamp.is_file() or not all((out_dir / f).is_file() for f in EXPECTED_FILES):
        return False
    return stamp.read_text().strip() == _inputs_digest()


def _build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(make_corpus(), trainer=trainer)
    return tok


def _normalise_json(path: Path) -> None:
    """Rewrite a JSON file with sorted keys so its bytes never depend on dict ordering."""
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(
        json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def build(out_dir: Path) -> None:
    """Write the model into out_dir (replacing whatever is there)."""
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    transformers.utils.logging.disable_progress_bar()

    raw = _build_tokenizer()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=None,
        bos_token=None,
        model_max_length=MODEL_SHAPE["max_position_embeddings"],
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE

    config = LlamaConfig(
        vocab_size=raw.get_vocab_size(),
        **MODEL_SHAPE,
        hidden_act="silu",
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        initializer_range=0.02,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=raw.token_to_id(IM_END),
        pad_token_id=raw.token_to_id(PAD_TOKEN),
        torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.float32).eval()

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        _ensure_chat_template_in_config(staging)
        for name in sorted(os.listdir(staging)):
            if name.endswith(".json"):
                _normalise_json(staging / name)
        (staging / STAMP_NAME).write_text(_inputs_digest() + "\n")
        staging.chmod(0o755)
        for name in os.listdir(staging):
            (staging / name).chmod(0o644)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _ensure_chat_template_in_config(directory: Path) -> None:
    """Keep the chat template in tokenizer_config.json, where every loader looks for it."""
    cfg_path = directory / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["chat_template"] = CHAT_TEMPLATE
    # The class name every transformers release resolves (5.x aliases it to its tokenizers backend).
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg), encoding="utf-8")
    jinja = directory / "chat_template.jinja"
    if jinja.exists():
        jinja.unlink()


def ensure_model(out_dir: str | os.PathLike, force: bool = False) -> Path:
    """Build the model into out_dir unless it already holds a current one; return the path."""
    path = Path(out_dir).resolve()
    if not force and is_current(path):
        return path
    build(path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="directory to write the model into")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args(argv)
    path = Path(args.dir).resolve()
    if not args.force and is_current(path):
        print(f"tiny model in {path} is up to date")
        return 0
    started = time.monotonic()
    build(path)
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    print(f"built tiny model in {path} ({size / 1e6:.1f} MB, {time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
