#!/usr/bin/env python3
"""Make the hand-built GGUF files under tests/data/gguf/malformed/ and their
manifest expected.tsv (file, expected ember_status, substring of the message).

The bytes are packed here with `struct` from the format description (ggml
docs/gguf.md, gguf-py constants.py), independently of ember's writer, so the
reader is tested against files that ember did not make. A few VALID files
(expected EMBER_OK) are included so that each malformed variant is known to
differ from an accepted file only by the defect it names.

Run from the repository root:  python3 tests/data/gguf/make_malformed.py
"""
import pathlib
import struct

OUT = pathlib.Path(__file__).resolve().parent / "malformed"

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
T_F32, T_Q4_0, T_IQ2_XXS = 0, 2, 16


def u32(v): return struct.pack("<I", v)
def u64(v): return struct.pack("<Q", v)
def s(b): b = b.encode() if isinstance(b, str) else b; return u64(len(b)) + b


def header(n_tensors, n_kv, version=3):
    return b"GGUF" + u32(version) + u64(n_tensors) + u64(n_kv)


def kv(key, vtype, payload):
    return s(key) + u32(vtype) + payload


def arr(elem_type, items_payload, n):
    return u32(elem_type) + u64(n) + items_payload


def tinfo(name, ne, ttype, offset, n_dims=None):
    n_dims = len(ne) if n_dims is None else n_dims
    return s(name) + u32(n_dims) + b"".join(u64(x) for x in ne) + u32(ttype) + u64(offset)


def pad(b, align=32):
    return b + b"\0" * ((align - len(b) % align) % align)


def base_kvs():
    return [
        kv("general.architecture", STRING, s("llama")),
        kv("test.u32", U32, u32(7)),
        kv("test.tokens", ARRAY, arr(STRING, s("a") + s("bc") + s(""), 3)),
    ]


def build(kvs=None, tensors=None, data=None, version=3, align=32, n_kv=None, n_tensors=None):
    """A file from parts; counts default to the lengths of the lists."""
    kvs = base_kvs() if kvs is None else kvs
    tensors = [] if tensors is None else tensors
    b = header(len(tensors) if n_tensors is None else n_tensors,
               len(kvs) if n_kv is None else n_kv, version)
    b += b"".join(kvs) + b"".join(tensors)
    if data is not None:
        b = pad(b, align) + data
    return b


def two_tensors(off_a=0, off_b=32, ne_b=(4, 2), ttype_b=T_F32):
    return [tinfo("a", [8], T_F32, off_a), tinfo("b", list(ne_b), ttype_b, off_b)]


VALID = build(tensors=two_tensors(), data=struct.pack("<8f", *range(8)) + struct.pack("<8f", *range(8, 16)))


def nested(depth, leaf=arr(U8, b"\x01", 1)):
    v = leaf
    for _ in range(depth):
        v = arr(ARRAY, v, 1)
    return v


CASES = []  # (name, bytes, status, substring)


def case(name, data, status, sub):
    CASES.append((name, data, status, sub))


# --- valid references --------------------------------------------------------
case("valid_two_tensors", VALID, "EMBER_OK", "")
case("valid_v2", build(tensors=two_tensors(), version=2,
                       data=b"\0" * 64), "EMBER_OK", "")
case("valid_no_tensors_no_padding", build(), "EMBER_OK", "")
case("valid_nested_depth_16", build(kvs=[kv("n", ARRAY, nested(16))]), "EMBER_OK", "")

# --- header ------------------------------------------------------------------
case("empty", b"", "EMBER_ERR_FORMAT", "file of 0 bytes is too short for the magic")
case("truncated_magic", b"GG", "EMBER_ERR_FORMAT", "too short for the magic")
case("bad_magic", b"GGUX" + VALID[4:], "EMBER_ERR_FORMAT", "bad magic")
case("truncated_version", b"GGUF\x03\x00", "EMBER_ERR_FORMAT", "header version needs 4 bytes")
case("version_1", header(0, 0, version=1), "EMBER_ERR_UNSUPPORTED", "version 1 is not supported")
case("version_99", header(0, 0, version=99), "EMBER_ERR_UNSUPPORTED", "version 99 is not supported")
case("truncated_n_tensors", b"GGUF" + u32(3) + b"\0\0\0", "EMBER_ERR_FORMAT", "header n_tensors needs 8")
case("truncated_n_kv", b"GGUF" + u32(3) + u64(0) + b"\0", "EMBER_ERR_FORMAT", "header n_kv needs 8")
case("huge_n_kv", header(0, 1 << 60), "EMBER_ERR_FORMAT", "n_kv 1152921504606846976 cannot fit")
case("huge_n_tensors", header(1 << 62, 0), "EMBER_ERR_FORMAT", "n_tensors 4611686018427387904 cannot fit")
case("n_kv_more_than_present", build(n_kv=5) + b"\0" * 60, "EMBER_ERR_FORMAT", "kv[3]")

# --- keys and values ---------------------------------------------------------
case("truncated_key_length", build(n_kv=4) + b"\x05\0\0", "EMBER_ERR_FORMAT",
     "kv[3]: truncated: key needs 8 bytes, 3 remain")
case("key_length_past_eof", header(0, 1) + u64(1 << 63) + b"abc" + b"\0" * 20, "EMBER_ERR_FORMAT",
     "key length 9223372036854775808 exceeds")
case("empty_key", build(kvs=[kv("", U32, u32(1))]), "EMBER_ERR_FORMAT", "empty key")
case("key_with_nul", build(kvs=[kv(b"a\0b", U32, u32(1))]), "EMBER_ERR_FORMAT", "key contains a NUL byte")
case("truncated_value_type", build(n_kv=4) + s("k") + b"\x04", "EMBER_ERR_FORMAT",
     "kv[3] 'k': truncated: value type needs 4")
case("unknown_value_type", build(kvs=[kv("k", 13, u32(1))]), "EMBER_ERR_FORMAT", "unknown value type 13")
case("truncated_scalar", header(0, 1) + s("k") + u32(U64) + b"\1\2\3", "EMBER_ERR_FORMAT",
     "scalar value needs 8 bytes, 3 remain")
case("string_length_past_eof", header(0, 1) + s("k") + u32(STRING) + u64(1000) + b"short",
     "EMBER_ERR_FORMAT", "string value length 1000 exceeds the 5 bytes remaining")
case("string_length_2_64_minus_1", header(0, 1) + s("k") + u32(STRING) + u64((1 << 64) - 1),
     "EMBER_ERR_FORMAT", "string value length 18446744073709551615 exceeds")
case("duplicate_key", build(kvs=base_kvs() + [kv("test.u32", U32, u32(8))]), "EMBER_ERR_FORMAT",
     "kv[3] 'test.u32': duplicate key (first at kv[1])")

# --- arrays ------------------------------------------------------------------
case("array_unknown_elem_type", build(kvs=[kv("k", ARRAY, arr(77, b"", 0))]), "EMBER_ERR_FORMAT",
     "unknown element type 77")
case("array_count_2_60_u8", build(kvs=[kv("k", ARRAY, arr(U8, b"\0" * 16, 1 << 60))]), "EMBER_ERR_FORMAT",
     "array count 1152921504606846976 of u8")
case("array_count_2_64_minus_1_f64", build(kvs=[kv("k", ARRAY, arr(F64, b"", (1 << 64) - 1))]),
     "EMBER_ERR_FORMAT", "array count 18446744073709551615 of f64")
case("array_count_huge_strings", build(kvs=[kv("k", ARRAY, arr(STRING, s("x"), 1 << 40))]),
     "EMBER_ERR_FORMAT", "array count 1099511627776 of string")
case("array_numeric_past_eof", header(0, 1) + s("k") + u32(ARRAY) + arr(U32, b"\0" * 12, 4),
     "EMBER_ERR_FORMAT", "array count 4 of u32")
case("array_string_element_past_eof",
     header(0, 1) + s("k") + u32(ARRAY) + arr(STRING, s("ok") + u64(99) + b"xy", 2),
     "EMBER_ERR_FORMAT", "array string element length 99 exceeds the 2 bytes remaining")
case("truncated_array_header", header(0, 1) + s("k") + u32(ARRAY) + u32(U8) + b"\1\0",
     "EMBER_ERR_FORMAT", "truncated: array count needs 8")
case("nested_depth_bomb", build(kvs=[kv("n", ARRAY, nested(5000))]), "EMBER_ERR_FORMAT",
     "nested deeper than 16")
case("nested_depth_17", build(kvs=[kv("n", ARRAY, nested(17))]), "EMBER_ERR_FORMAT",
     "nested deeper than 16")
case("nested_huge_inner_count", build(kvs=[kv("n", ARRAY, nested(3, arr(I64, b"", 1 << 59)))]),
     "EMBER_ERR_FORMAT", "array count 576460752303423488 of i64")
case("nested_array_count_huge", build(kvs=[kv("n", ARRAY, arr(ARRAY, b"", 1 << 61))]),
     "EMBER_ERR_FORMAT", "array count 2305843009213693952 of array")

# --- alignment ---------------------------------------------------------------
case("alignment_zero", build(kvs=base_kvs() + [kv("general.alignment", U32, u32(0))]), "EMBER_ERR_FORMAT",
     "'general.alignment': value 0 is not a power of two")
case("alignment_not_power_of_two", build(kvs=base_kvs() + [kv("general.alignment", U32, u32(48))]),
     "EMBER_ERR_FORMAT", "'general.alignment': value 48 is not a power of two")
case("alignment_wrong_type", build(kvs=base_kvs() + [kv("general.alignment", U64, u64(64))]),
     "EMBER_ERR_FORMAT", "'general.alignment': has type u64, must be u32")

# --- tensor infos --------------------------------------------------------------
case("truncated_tensor_name", build(n_tensors=1),
     "EMBER_ERR_FORMAT", "tensor[0]: truncated: tensor name needs 8")
case("tensor_name_past_eof", build(n_tensors=1) + u64(500) + b"abc", "EMBER_ERR_FORMAT",
     "tensor name length 500 exceeds")
case("truncated_n_dims", build(n_tensors=1) + s("t") + b"\1", "EMBER_ERR_FORMAT",
     "tensor[0] 't': truncated: n_dims needs 4")
case("truncated_ne", build(n_tensors=1) + s("t") + u32(2) + u64(8) + b"\0\0", "EMBER_ERR_FORMAT",
     "truncated: ne needs 8")
case("truncated_tensor_type", build(n_tensors=1) + s("t") + u32(1) + u64(8), "EMBER_ERR_FORMAT",
     "truncated: tensor type needs 4")
case("truncated_tensor_offset", build(n_tensors=1) + s("t") + u32(1) + u64(8) + u32(T_F32) + b"\0",
     "EMBER_ERR_FORMAT", "truncated: tensor data offset needs 8")
case("n_dims_0", build(tensors=[tinfo("t", [], T_F32, 0)], data=b"\0" * 32), "EMBER_ERR_FORMAT",
     "'t': n_dims 0 is not in 1..4")
case("n_dims_5", build(tensors=[tinfo("t", [1, 1, 1, 1, 8], T_F32, 0)], data=b"\0" * 32), "EMBER_ERR_FORMAT",
     "n_dims 5 is not in 1..4")
case("n_dims_huge", build(tensors=[tinfo("t", [8], T_F32, 0, n_dims=0xFFFFFFFF)], data=b"\0" * 32),
     "EMBER_ERR_FORMAT", "n_dims 4294967295 is not in 1..4")
case("ne_negative", build(tensors=[tinfo("t", [8, (1 << 64) - 2], T_F32, 0)], data=b"\0" * 32),
     "EMBER_ERR_FORMAT", "ne[1] = 18446744073709551614 is negative")
case("ne_product_overflow", build(tensors=[tinfo("t", [1 << 32, 1 << 32, 1 << 32], T_F32, 0)], data=b"\0" * 32),
     "EMBER_ERR_FORMAT", "overflows int64 elements")
case("bytes_overflow", build(tensors=[tinfo("t", [1 << 62, 1], T_F32, 0)], data=b"\0" * 32),
     "EMBER_ERR_FORMAT", "shape [4611686018427387904, 1, 1, 1] of F32 overflows 64-bit bytes")
case("tensor_type_unknown", build(tensors=[tinfo("t", [8], 200, 0)], data=b"\0" * 32), "EMBER_ERR_FORMAT",
     "unknown tensor type id 200")
case("tensor_type_unsupported", build(tensors=[tinfo("t", [256], T_IQ2_XXS, 0)], data=b"\0" * 96),
     "EMBER_ERR_UNSUPPORTED", "tensor type 16 is a ggml type ember does not support")
case("ne0_not_block_multiple", build(tensors=[tinfo("t", [33], T_Q4_0, 0)], data=b"\0" * 64),
     "EMBER_ERR_FORMAT", "ne[0] = 33 is not a multiple of the Q4_0 block size 32")
case("duplicate_tensor_name", build(tensors=[tinfo("a", [8], T_F32, 0), tinfo("a", [8], T_F32, 32)],
                                    data=b"\0" * 64),
     "EMBER_ERR_FORMAT", "tensor[1] 'a': duplicate tensor name (first at tensor[0])")
case("tensor_name_with_nul", build(tensors=[tinfo(b"a\0b", [8], T_F32, 0)], data=b"\0" * 32),
     "EMBER_ERR_FORMAT", "tensor name contains a NUL byte")

# --- tensor data ---------------------------------------------------------------
case("tensor_offset_unaligned", build(tensors=two_tensors(off_b=36), data=b"\0" * 96), "EMBER_ERR_FORMAT",
     "'b': data offset 36 is not a multiple of the alignment 32")
case("tensor_offset_out_of_range", build(tensors=two_tensors(off_b=1 << 40), data=b"\0" * 64),
     "EMBER_ERR_FORMAT", "'b': data [1099511627776, +32) lies outside the 64-byte data section")
case("tensor_offset_2_64_minus_32", build(tensors=two_tensors(off_b=(1 << 64) - 32), data=b"\0" * 64),
     "EMBER_ERR_FORMAT", "lies outside")
case("tensor_data_truncated", VALID[:-4], "EMBER_ERR_FORMAT", "'b': data [32, +32) lies outside the 60-byte")
case("tensors_overlap", build(tensors=[tinfo("a", [16], T_F32, 0), tinfo("b", [8], T_F32, 32)],
                              data=b"\0" * 64),
     "EMBER_ERR_FORMAT", "tensor[1] 'b': data [32, +32) overlaps tensor 'a' [0, +64)")
case("data_section_past_eof", build(tensors=two_tensors()), "EMBER_ERR_FORMAT",
     "data section would start at byte offset")
case("alignment_huge_data_past_eof",
     build(kvs=base_kvs() + [kv("general.alignment", U32, u32(1 << 31))], tensors=two_tensors()) + b"\0" * 64,
     "EMBER_ERR_FORMAT", "data section would start at byte offset 2147483648")

# --- regressions found by tests/fuzz/fuzz_gguf (raw inputs kept in ../fuzz/) ---
FUZZ = pathlib.Path(__file__).resolve().parent / "fuzz"
FUZZ_CASES = [
    # message named a key through a pointer into the string blob after the
    # blob had been reallocated (heap-use-after-free in the error path)
    ("uaf_key_name_after_blob_realloc", "EMBER_ERR_FORMAT",
     "kv[3] 'test.tokens': array string element length 13194139533312 exceeds the 4 bytes remaining"),
]
for _name, _status, _sub in FUZZ_CASES:
    case("fuzz_" + _name, (FUZZ / f"{_name}.gguf").read_bytes(), _status, _sub)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.gguf"):
        old.unlink()
    names = set()
    lines = ["# file\texpected ember_status\tsubstring of ember_last_error() (made by make_malformed.py)"]
    for name, data, status, sub in CASES:
        assert name not in names, name
        names.add(name)
        (OUT / f"{name}.gguf").write_bytes(data)
        lines.append(f"{name}.gguf\t{status}\t{sub}")
    (OUT / "expected.tsv").write_text("\n".join(lines) + "\n")
    print(f"wrote {len(CASES)} files to {OUT}")


if __name__ == "__main__":
    main()
