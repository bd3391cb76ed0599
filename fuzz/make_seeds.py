#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Writes fuzz/corpus/<target>/seed-* : small valid inputs of every format the
fuzz targets read, for libFuzzer to start from. Run from anywhere; files that
exist are rewritten. Inputs that once failed (regress-*) are kept by hand, as
are fuzz_topology_blob's seeds: topoEncode's output for two fixture files and
the spark sysfs tree, which change only with the blob format."""
import json
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(ROOT)
CORPUS = os.path.join(ROOT, "corpus")

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def policy():
    shutil.copy(os.path.join(REPO, "policies", "sample.yaml"), os.path.join(CORPUS, "fuzz_policy", "seed-sample.yaml"))
    put("fuzz_policy", "small.yaml", "classes:\n  default:\n    one_shot_max_bytes: 65536\n    nccl: [ring, tree]\n"
        "  single-host:\n    max_ranks: 8\nforce: nccl\n")
    put("fuzz_policy", "disable.yaml", "disable: true\n")


def topology():
    fixtures = os.path.join(REPO, "tests", "fixtures", "topology")
    for name in sorted(os.listdir(fixtures)):
        if name.endswith(".yaml") and os.path.getsize(os.path.join(fixtures, name)) < 8192:
            shutil.copy(os.path.join(fixtures, name), os.path.join(CORPUS, "fuzz_topology_file", "seed-" + name))


def launch_env():
    put("fuzz_launch_env", "torchrun", "RANK=1\nWORLD_SIZE=4\nLOCAL_RANK=1\nMASTER_ADDR=10.0.0.1\nMASTER_PORT=29500\n"
        "TORCHELASTIC_USE_AGENT_STORE=True\n")
    put("fuzz_launch_env", "openmpi", "OMPI_COMM_WORLD_RANK=2\nOMPI_COMM_WORLD_SIZE=8\nOMPI_COMM_WORLD_LOCAL_RANK=2\n"
        "MASTER_ADDR=node0\n")
    put("fuzz_launch_env", "pmi", "PMI_RANK=0\nPMI_SIZE=2\nMASTER_ADDR=127.0.0.1\nMASTER_PORT=1234\n")
    put("fuzz_launch_env", "slurm", "SLURM_PROCID=3\nSLURM_STEP_NUM_TASKS=4\nSLURM_LOCALID=0\nMASTER_ADDR=h\n")
    put("fuzz_launch_env", "sweep", "RCNBENCH_RANK=1\nRCNBENCH_NRANKS=2\nRCNBENCH_ID=00ff00ff\n")


def llama2c():
    dim, hidden, layers, heads, kv, vocab, seq = 8, 16, 1, 2, 2, 16, 8
    hd = dim // heads
    floats = (vocab * dim + layers * (2 * dim + heads * hd * dim + 2 * kv * hd * dim + dim * heads * hd
                                     + 3 * hidden * dim) + dim + seq * hd)
    weights = struct.pack("<%df" % floats, *[((i * 37) % 17 - 8) / 64.0 for i in range(floats)])
    put("fuzz_llama2c_checkpoint", "tiny.bin", struct.pack("<7i", dim, hidden, layers, heads, kv, vocab, seq) + weights)
    put("fuzz_llama2c_checkpoint", "header-only.bin", struct.pack("<7i", dim, hidden, layers, heads, kv, -vocab, seq))
    pieces = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % i for i in range(256)] + \
             [b" ", b"e", b"t", b"a", b" t", b"he", b" the", b"Once", b" upon", b"\xc3\xa9"]
    body = struct.pack("<i", max(len(p) for p in pieces))
    for i, p in enumerate(pieces):
        body += struct.pack("<fi", -float(i), len(p)) + p
    vocab_claim = bytes([len(pieces) // 4])  # the harness reads byte 0 as vocab / 4
    put("fuzz_llama2c_tokenizer", "tokenizer.bin", vocab_claim + body)


def safetensors():
    data = struct.pack("<8f", *range(8)) + struct.pack("<4H", 0x3F80, 0x4000, 0x4040, 0x4080)
    header = {"__metadata__": {"format": "pt"},
              "a": {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32]},
              "b": {"dtype": "BF16", "shape": [4], "data_offsets": [32, 40]}}
    text = json.dumps(header).encode()
    put("fuzz_safetensors", "two.safetensors", struct.pack("<Q", len(text)) + text + data)
    put("fuzz_safetensors_index", "index.json", json.dumps(
        {"metadata": {"total_size": 40}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                         "b": "model-00002-of-00002.safetensors"}}))


def hf_config():
    put("fuzz_hf_config", "llama.json", json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False, "eos_token_id": [1, 2],
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64}}))
    put("fuzz_hf_config", "qwen2.json", json.dumps({
        "architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 300, "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True, "sliding_window": 64,
        "use_sliding_window": False, "eos_token_id": 7}))


def tokenizer_json():
    vocab = ["h", "e", "l", "o", "w", "r", "d", "\u0120", "he", "ll", "lo", "hell", "hello", "\u0120w", "or", "\u0120wor"]
    merges = [["h", "e"], ["l", "l"], ["l", "o"], ["he", "ll"], ["hell", "o"], ["\u0120", "w"], ["o", "r"],
              ["\u0120w", "or"]]
    base = {"version": "1.0",
            "added_tokens": [{"id": 16, "content": "<|x|>", "special": True}],
            "normalizer": None, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": {v: i for i, v in enumerate(vocab)}, "merges": merges,
                      "ignore_merges": False}}
    llama = dict(base)
    llama["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    llama["post_processor"] = {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<|x|>", "type_id": 0}},
                                          {"Sequence": {"id": "A", "type_id": 0}}],
                               "special_tokens": {"<|x|>": {"id": "<|x|>", "ids": [16], "tokens": ["<|x|>"]}}}
    put("fuzz_tokenizer_json", "llama3.json", json.dumps(llama))
    gpt2 = dict(base)
    gpt2["model"] = dict(base["model"], merges=[a + " " + b for a, b in merges])
    gpt2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    gpt2["normalizer"] = {"type": "NFC"}
    put("fuzz_tokenizer_json", "gpt2.json", json.dumps(gpt2))


def pretokenizer():
    put("fuzz_pretokenizer", "llama3", LLAMA3 + "\nHello w\u00f6rld 12345 's\n\n  \u3000x")
    put("fuzz_pretokenizer", "gpt2", GPT2 + "\nGr\u00fc\u00dfe, \u4e16\u754c  a")
    put("fuzz_pretokenizer", "lookahead", "(?=\\p{Lu})\nabCdEf")


if __name__ == "__main__":
    for target in ["fuzz_policy", "fuzz_topology_file"]:
        os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    policy()
    topology()
    launch_env()
    llama2c()
    safetensors()
    hf_config()
    tokenizer_json()
    pretokenizer()
