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


# The network frames' targets read the structs of the C++ code, little-endian
# as on every host rocenante runs on; these helpers write them.
def sockaddr_in(port, ip=(127, 0, 0, 1)):
    return struct.pack("<H", 2) + struct.pack(">H", port) + bytes(ip) + bytes(8)


def wire_address(addr):
    return struct.pack("<I", len(addr)) + addr.ljust(64, b"\0")


def unique_id(addr):
    handle = bytes(range(32)) + addr.ljust(64, b"\0") + struct.pack("<I", len(addr))
    return handle.ljust(128, b"\0")


def bootstrap_frames():
    def join(rank, nranks, port):
        return struct.pack("<ii", rank, nranks) + wire_address(sockaddr_in(port) if port else b"")

    def reply(verdict, nranks, joined, culprit=0, size=0):
        return struct.pack("<6iq", verdict, nranks, joined, culprit, size, 0, 5000)

    headers = struct.pack("<QQ", 1, 64) * 2
    table = b"".join(wire_address(sockaddr_in(40000 + r)) for r in range(4))
    put("fuzz_bootstrap_frames", "complete-4", bytes([4]) + b"".join(join(r, 4, 40000 + r) for r in (2, 0, 3, 1)) +
        bytes([1, 4]) + reply(0, 4, 4) + table + headers)
    put("fuzz_bootstrap_frames", "one-rank", bytes([1]) + join(0, 1, 0) + bytes([0, 1]) + reply(0, 1, 1) +
        wire_address(b"") + headers)
    put("fuzz_bootstrap_frames", "duplicate", bytes([2]) + join(1, 4, 40001) + join(1, 4, 40002) + bytes([0, 4]) +
        reply(4, 4, 2, 1) + headers)
    put("fuzz_bootstrap_frames", "size-mismatch", bytes([2]) + join(0, 2, 40000) + join(1, 3, 40001) + bytes([0, 2]) +
        reply(3, 2, 2, 1, 3) + struct.pack("<QQQQ", 1, 64, 2, 64))
    # The listener's side of the handshake: a challenge, then a verdict
    # whose proof cannot hold (the harness's key is not this one).
    challenge = b"RCNAUTH1" + bytes(range(16))
    put("fuzz_bootstrap_frames", "handshake-accepted", bytes([0, 0, 1]) + reply(0, 1, 1) + wire_address(b"") +
        headers + challenge + struct.pack("<II", 1, 0) + bytes(32))
    put("fuzz_bootstrap_frames", "handshake-refused", bytes([0, 0, 1]) + reply(0, 1, 1) + wire_address(b"") +
        headers + challenge + struct.pack("<II", 0, 0) + bytes(32))
    put("fuzz_bootstrap_frames", "timeout", bytes([1]) + join(0, 3, 40000) + bytes([0, 3]) + reply(2, 3, 1) +
        bytes([1, 0, 0]) + headers)


def rendezvous_frames():
    def join(rank, nranks):
        return struct.pack("<ii", rank, nranks)

    def reply(refusal, nranks, addr):
        return struct.pack("<ii", refusal, nranks) + (unique_id(addr) if refusal == 0 else bytes(128))

    # nranks is 2 + byte % 63: byte 2 is a world of 4.
    put("fuzz_rendezvous_frames", "accepted", bytes([2, 3]) + join(1, 4) + join(3, 4) + join(2, 4) + bytes([0]) +
        reply(0, 4, sockaddr_in(29500)))
    put("fuzz_rendezvous_frames", "refused", bytes([2, 4]) + join(1, 4) + join(1, 4) + join(4, 4) + join(1, 8) +
        bytes([1]) + reply(3, 4, b""))
    put("fuzz_rendezvous_frames", "other-size", bytes([0, 1]) + join(1, 3) + bytes([0]) + reply(1, 2, b""))


def tcp_wire_frames():
    def frame(kind, offset, length, payload=b""):
        return struct.pack("<IIQQ", 0x52434E46, kind, offset, length) + payload

    hellos = bytes([3]) + struct.pack("<iI", 0, 0) + struct.pack("<iI", 2, 0) + struct.pack("<iI", 0, 0) + \
        struct.pack("<iI", 3, 0)
    address = sockaddr_in(41000).ljust(128, b"\0") + struct.pack("<I", 16) + bytes(4)
    layout = struct.pack("<H", 256) + bytes([8])
    put("fuzz_tcp_wire_frames", "data-flag-bye", layout + frame(1, 0, 16, bytes(range(16))) + frame(2, 3, 7) +
        frame(1, 240, 16, bytes(16)) + frame(1, 0, 0) + frame(3, 0, 0) + hellos + address)
    put("fuzz_tcp_wire_frames", "abort", layout + frame(2, 0, 1) + frame(4, 0, 11, b"rank 2 died") + hellos + address)
    put("fuzz_tcp_wire_frames", "refused", layout + frame(1, 250, 16, bytes(16)) + hellos + address)


def shm_wire_segment():
    def identity(host, ns, pid):
        return struct.pack("<QQii", host, ns, pid, 0)

    peers = identity(7, 9, 1) + identity(7, 9, 2)
    region = 512
    put("fuzz_shm_wire_segment", "fits", struct.pack("<Hh", region, 0) + bytes([1, 0]) + peers +
        bytes(region) + struct.pack("<I", 1))
    put("fuzz_shm_wire_segment", "short", struct.pack("<Hh", region, -64) + bytes([1, 1]) + peers + bytes(region))
    put("fuzz_shm_wire_segment", "other-host", struct.pack("<Hh", 64, 0) + bytes([1, 0]) + identity(7, 9, 1) +
        identity(8, 9, 2) + bytes(128))


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
    bootstrap_frames()
    rendezvous_frames()
    tcp_wire_frames()
    shm_wire_segment()
