#!/usr/bin/env python3
"""Writes block-hash-vectors.json: block hashes as vLLM names them with sha256_cbor.

The scheme, as read in vLLM v0.11 to v0.17 (vllm/v1/core/kv_cache_utils.py and
vllm/utils/hashing.py): the seed hash is sha256 over the canonical CBOR of PYTHONHASHSEED as a
text string; block i's hash is sha256 over the canonical CBOR of the tuple
(parent hash, tuple of the block's token ids, extra keys), extra keys None for plain text; only
full blocks are hashed; the integer form in KV events is the low 64 bits, big-endian.

This script is the team's own restatement of that scheme, run with Python's cbor2 (the encoder
vLLM uses), so the vectors come from a second implementation, not from the TypeScript under test.
Run: python3 spec/runner/protocol/block-hash-vectors.py > spec/runner/protocol/block-hash-vectors.json
"""
import hashlib
import json

import cbor2


def sha256_cbor(value):
    return hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()


def chain(seed, tokens, block_size):
    parent = sha256_cbor(seed)
    hashes = []
    for end in range(block_size, len(tokens) + 1, block_size):
        parent = sha256_cbor((parent, tuple(tokens[end - block_size:end]), None))
        hashes.append(parent)
    return hashes


def case(name, seed, tokens, block_size):
    hashes = chain(seed, tokens, block_size)
    return {
        "name": name,
        "seed": seed,
        "blockSize": block_size,
        "tokens": tokens,
        "seedHash": sha256_cbor(seed).hex(),
        "hashes": [h.hex() for h in hashes],
        "ints": [str(int.from_bytes(h, "big") & ((1 << 64) - 1)) for h in hashes],
    }


cases = [
    case("one block, seed 0, small ids", "0", list(range(16)), 16),
    case("two blocks and a partial third, ids across every CBOR width",
         "0", [0, 23, 24, 255, 256, 65535, 65536, 151643, 128000, 4294967295, 1, 2, 3, 4, 5, 6] +
         [7] * 16 + [9, 9, 9], 16),
    case("another seed changes every hash", "1234", list(range(16)) * 2, 16),
    case("block size 4", "0", [100, 200, 300, 400, 500, 600, 700, 800, 900], 4),
    case("shorter than a block: no hashes", "0", [1, 2, 3], 16),
    case("empty seed string", "", [5] * 32, 16),
]
print(json.dumps({"scheme": "vLLM sha256_cbor, v0.11-v0.17", "cases": cases}, indent=1))
