"""Write a tiny random-weight llama-architecture model as GGUF, for
tests/test_llm_real_engine.py (`make setup-llama`): a byte vocabulary (the
three control tokens and <0x00>..<0xFF>, so any prompt tokenizes by byte
fallback), 2 layers, embedding 64, about 0.7 MB in f32; it writes printable
ASCII only. The weights come from a
fixed seed: the same file every run (its SHA-256 is printed).

What it says is noise; what it is for is a real engine's serving path
(llama.cpp's loader, sampler and llama-cpp-python's OpenAI server) at the
cost of a few milliseconds of CPU per 32 tokens.

usage: tiny_gguf.py OUT.gguf
"""

import hashlib
import sys

import numpy as np
import gguf

SEED = 43  # any fixed seed: the same model, byte for byte, every run
N_EMBD, N_FF, N_LAYER, N_HEAD = 64, 256, 2, 4
N_CTX = 32768  # trained context: the server's --n_ctx may go up to it (a long stream holds its seat for seconds)
CONTROL = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2: unk, bos, eos


def vocab() -> tuple[list[str], list[float], list[int]]:
    tokens = CONTROL + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    return tokens, [0.0] * len(tokens), [int(t) for t in types]


def tensors(n_vocab: int) -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(SEED)

    def mat(rows: int, cols: int) -> np.ndarray:
        # 1/sqrt(fan-in): activations stay of order 1 through the layers
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    ones = np.ones(N_EMBD, dtype=np.float32)
    out = [("token_embd.weight", rng.standard_normal((n_vocab, N_EMBD)).astype(np.float32))]
    for i in range(N_LAYER):
        out += [
            (f"blk.{i}.attn_norm.weight", ones),
            (f"blk.{i}.attn_q.weight", mat(N_EMBD, N_EMBD)),
            (f"blk.{i}.attn_k.weight", mat(N_EMBD, N_EMBD)),
            (f"blk.{i}.attn_v.weight", mat(N_EMBD, N_EMBD)),
            (f"blk.{i}.attn_output.weight", mat(N_EMBD, N_EMBD)),
            (f"blk.{i}.ffn_norm.weight", ones),
            (f"blk.{i}.ffn_gate.weight", mat(N_FF, N_EMBD)),
            (f"blk.{i}.ffn_up.weight", mat(N_FF, N_EMBD)),
            (f"blk.{i}.ffn_down.weight", mat(N_EMBD, N_FF)),
        ]
    head = mat(n_vocab, N_EMBD)
    # Every token but the printable ASCII bytes has logit 0 whatever the
    # state, and some printable byte's is above 0 unless all 95 fall below
    # (odds 2^-95): greedy decoding (temperature 0) never picks </s>, so a
    # stream runs to its max_tokens, and never starts a multi-byte UTF-8
    # sequence, which llama-cpp-python holds back and then re-reads token by
    # token (a random byte stream took it 37 s for 500 tokens, against 0.5 s
    # for 100 printable ones).
    printable = np.zeros(n_vocab, dtype=bool)
    printable[len(CONTROL) + 0x20: len(CONTROL) + 0x7F] = True
    head[~printable] = 0.0
    out += [("output_norm.weight", ones), ("output.weight", head)]
    return out


def write(path: str) -> None:
    tokens, scores, types = vocab()
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("huntlb-tiny-random")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    for name, arr in tensors(len(tokens)):
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    write(sys.argv[1])
    with open(sys.argv[1], "rb") as f:
        print(f"{sys.argv[1]}: sha256 {hashlib.sha256(f.read()).hexdigest()}")
