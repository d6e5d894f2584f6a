"""A small trained-looking model saved as a directory `dataflow serve` loads."""
import json
import numpy as np
import dataflow as df
from dataflow.io import tokenizer as tokenizers
from dataflow.models import Llama, LlamaConfig


CONTEXT = 256


TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|bos|>{{ m['role'] }}\n{{ m['content'] }}<|eos|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|bos|>assistant\n{% endif %}")


def save_model(directory, chat_template=TEMPLATE):
    tok = tokenizers.default()
    with df.Handle("host") as h:
        config = LlamaConfig(vocab_size=tok.vocab_size, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT)
        model = Llama(h, config)
        rng = np.random.default_rng(0)
        model.load_state_dict({n: np.ones(s, np.float32) if len(s) == 1 else
                               rng.normal(0, 0.25, size=s).astype(np.float32) for n, s in model.shapes().items()})
        model.save_pretrained(str(directory))
        model.close()
    tok.save(str(directory))
    if chat_template:
        (directory / "tokenizer_config.json").write_text(json.dumps(
            {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "chat_template": chat_template}))
    return directory
