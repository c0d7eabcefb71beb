"""byte_level.py - GPT-2's byte -> printable character table, the alphabet byte-level BPE
vocabularies (tokenizer.json "ByteLevel", GGUF "gpt2") are written in.

Imported by tools/gguf_shapes.py, tools/gen_gguf_fixtures.py, tools/tok_conformance/gen.py
and tests/http/test_tool_calls.sh (each puts tools/ on sys.path).
"""


def bytes_to_unicode():
    """{byte: character}: the printable Latin-1 bytes stand for themselves, the other 68
    take 256, 257, ... in byte order. The printable ones come first (GPT-2's order)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def byte_symbols():
    """The same table as a list indexed by byte."""
    table = bytes_to_unicode()
    return [table[b] for b in range(256)]
