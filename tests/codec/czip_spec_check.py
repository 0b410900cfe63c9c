#!/usr/bin/env python3
"""An independent CZIP reader written from docs/format.md alone.

Packs a sample with `densefs czip pack` in every mode (header and footer,
plain and encrypted, raw and zstd) and reads each result with this code,
which follows the spec's tables and key derivations, not codec/czip.cpp. Also
decodes the golden hex dump printed in docs/format.md. A mismatch means the
code and the spec disagree.

usage: czip_spec_check.py DENSEFS_BINARY SOURCE_DIR
Exit 77 (skipped) without the Python `cryptography` package or the zstd CLI.
"""
import hashlib
import hmac
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

try:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
except ImportError:
    print("skipped: the Python cryptography package is missing")
    sys.exit(77)
if shutil.which("zstd") is None:
    print("skipped: the zstd command is missing")
    sys.exit(77)

MAGIC = b"\x89CZIP\r\n\x1a"
HEADER = 256
ENTRY = 96


def read_czip(data, passphrase=None):
    """The original bytes of a czip, checking every hash on the way."""
    front, back = data[:HEADER], data[-HEADER:]
    if front[:8] == MAGIC and not struct.unpack_from("<H", front, 10)[0] & 1 \
            and struct.unpack_from("<Q", front, 24)[0] == len(data):
        header, body = front, data[HEADER:]
    else:
        header, body = back, data[:-HEADER]
        assert struct.unpack_from("<H", header, 10)[0] & 1, "trailer not flagged"
    assert header[:8] == MAGIC, "magic"
    assert struct.unpack_from("<H", header, 8)[0] == 1, "version"
    assert struct.unpack_from("<I", header, 12)[0] == HEADER, "header size"
    assert zlib.crc32(header[:252]) == struct.unpack_from("<I", header, 252)[0], "CRC"
    original_size, czip_size, count, array_offset, array_size = \
        struct.unpack_from("<5Q", header, 16)
    assert czip_size == len(data), "czip_size"
    assert header[56] == 1 and header[57] == 32, "hash format"
    assert hashlib.sha256(body).digest() == header[144:176], "czip_hash"
    array = data[array_offset:array_offset + array_size]
    assert hashlib.sha256(array).digest() == header[176:208], "chunk_array_hash"
    encrypted = header[59] == 1
    if encrypted:
        log2_n, r, p, salt = header[76], header[77], header[78], header[80:96]
        key = hashlib.scrypt(passphrase, salt=salt, n=1 << log2_n, r=r, p=p,
                             maxmem=1 << 30, dklen=32)
        aad = b"densefs czip v1 chunk array" + struct.pack("<QQ", original_size, count)
        plain = AESGCM(key).decrypt(b"\0" * 12, array, aad)
        original_hash, entries = plain[:32], plain[32:]
        assert header[112:144] == b"\0" * 32, "original_hash must be zero"
    else:
        original_hash, entries = header[112:144], array
    assert len(entries) == count * ENTRY
    out = bytearray()
    for i in range(count):
        e = entries[i * ENTRY:(i + 1) * ENTRY]
        original_offset, czip_offset, size, stored_size, codec = \
            struct.unpack_from("<QQIIB", e, 0)
        plain_hash, stored_hash = e[32:64], e[64:96]
        assert original_offset == len(out), "original_offset"
        stored = data[czip_offset:czip_offset + stored_size]
        assert hashlib.sha256(stored).digest() == stored_hash, "stored_hash"
        if encrypted:
            chunk_key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                             info=b"densefs czip v1 chunk key").derive(plain_hash)
            chunk_aad = bytes([codec]) + struct.pack("<I", size)
            nonce = stored[:12]
            stored = AESGCM(chunk_key).decrypt(nonce, stored[12:], chunk_aad)
            mac = hmac.new(chunk_key, chunk_aad + stored, hashlib.sha256).digest()
            assert mac[:12] == nonce, "chunk nonce"
        if codec == 0:
            chunk = stored
        elif codec == 1:
            chunk = subprocess.run(["zstd", "-dcq"], input=stored, capture_output=True,
                                   check=True).stdout
        else:
            raise AssertionError("codec %d not handled here" % codec)
        assert len(chunk) == size and hashlib.sha256(chunk).digest() == plain_hash
        out += chunk
    assert len(out) == original_size
    assert hashlib.sha256(out).digest() == original_hash, "original_hash"
    return bytes(out)


def golden_from_docs(source_dir):
    text = open(os.path.join(source_dir, "docs", "format.md")).read()
    section = text[text.index("### Golden example"):]
    dump = section[section.index("```") + 3:]
    dump = dump[:dump.index("```")]
    return bytes.fromhex("".join(re.findall(r"^[0-9a-f]{4}: ((?:[0-9a-f]{2} ?)+)$", dump,
                                            re.M)).replace(" ", ""))


def main():
    densefs, source_dir = sys.argv[1], sys.argv[2]
    assert read_czip(golden_from_docs(source_dir)) == b"abcd" * 33
    rng = random.Random(1)
    block = bytes(rng.getrandbits(8) for _ in range(20000))
    sample = b"".join(block + b"line %d\n" % i * 50 for i in range(12))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "in")
        with open(path, "wb") as f:
            f.write(sample)
        env = dict(os.environ, DENSEFS_CZIP_PASSPHRASE="spec check")
        runs = 0
        for codec in ("raw", "zstd"):
            for chunker in ("fixed:size=4K", "cdc:min=1K:avg=4K:max=16K"):
                for encrypt in ([], ["--encrypt"]):
                    base = [densefs, "czip", "pack", "--codec", codec, "--chunker", chunker]
                    header_mode = os.path.join(tmp, "h.czip")
                    subprocess.run(base + encrypt + [path, header_mode], env=env, check=True)
                    footer_mode = subprocess.run(base + encrypt + [path, "-"], env=env,
                                                 check=True, capture_output=True).stdout
                    for data in (open(header_mode, "rb").read(), footer_mode):
                        assert read_czip(data, b"spec check") == sample
                        runs += 1
    print("czip spec check: golden example and %d czips read by the spec's rules" % runs)


if __name__ == "__main__":
    main()
