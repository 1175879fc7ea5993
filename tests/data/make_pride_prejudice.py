#!/usr/bin/env python3
"""Extract the opening chapters of Jane Austen's "Pride and Prejudice" (1813,
public domain; Project Gutenberg's text) from Debian's r-cran-janeaustenr
package into tests/data/pride_prejudice.txt, the fixed text that perplexity
is measured on (tests/e2e/test_fidelity.py, tests/golden/runtime/).

The package (MIT licence for the packaging; the novel itself is in the public
domain) stores the novels as R lazy-load data: data/Rdata.rdx indexes
data/Rdata.rdb, whose entries are a 4-byte big-endian length plus a zlib
stream of an R serialization (XDR format 3) of a character vector, one
element per line of the book. We read just enough of that format for a
character vector: no R needed.

usage: make_pride_prejudice.py [DEB_OR_DIR]   (default: apt-get download it)
"""
import gzip
import os
import pathlib
import struct
import subprocess
import sys
import tempfile
import zlib

CHAPTERS = 14          # chapters 1..14: > 20,000 tokens under both models' tokenizers
OUT = pathlib.Path(__file__).resolve().parent / "pride_prejudice.txt"


def r_strings(buf, pos):
    """Parse an XDR-serialized R STRSXP at buf[pos:]; return its strings."""
    flags, n = struct.unpack_from(">iI", buf, pos)
    assert flags & 0xFF == 16, "not a character vector"
    pos += 8
    out = []
    for _ in range(n):
        cflags, ln = struct.unpack_from(">ii", buf, pos)
        assert cflags & 0xFF == 9, "not a CHARSXP"
        pos += 8
        if ln < 0:
            out.append("")
            continue
        out.append(buf[pos:pos + ln].decode("utf-8"))
        pos += ln
    return out


def load_novel(pkgdir, name):
    rdx = gzip.decompress((pkgdir / "data/Rdata.rdx").read_bytes())
    rdb = (pkgdir / "data/Rdata.rdb").read_bytes()
    # The index is small; find the (offset, length) pair stored for `name` by
    # position: variables are listed in the same order as the names vector.
    names_at = rdx.index(b"names")
    names = r_strings(rdx, names_at + len(b"names"))
    k = names.index(name)
    # the variables list: VECSXP of INTSXP pairs at the start of the object
    pairs = []
    pos = rdx.index(b"\x00\x00\x00\x0d\x00\x00\x00\x02")
    while len(pairs) < len(names):
        flags, n = struct.unpack_from(">iI", rdx, pos)
        assert flags & 0xFF == 13 and n == 2
        pairs.append(struct.unpack_from(">ii", rdx, pos + 8))
        pos += 16
    off, ln = pairs[k]
    blob = rdb[off:off + ln]
    data = zlib.decompress(blob[4:])
    assert data[:2] == b"X\n"
    # header: version, writer version, min reader version, then (v3) native encoding
    enc_len = struct.unpack_from(">i", data, 14)[0]
    return r_strings(data, 18 + enc_len)


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else None
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        if src is None:
            subprocess.run(["apt-get", "download", "r-cran-janeaustenr"], cwd=tmp, check=True)
            src = next(tmp.glob("r-cran-janeaustenr_*.deb"))
        src = pathlib.Path(src)
        if src.is_file():
            subprocess.run(["dpkg-deb", "-x", str(src), str(tmp / "x")], check=True)
            src = tmp / "x"
        pkgdir = next(src.glob("**/site-library/janeaustenr"))
        lines = load_novel(pkgdir, "prideprejudice")
    # keep from "Chapter 1" up to (not including) "Chapter CHAPTERS+1"
    start = lines.index("Chapter 1")
    end = lines.index(f"Chapter {CHAPTERS + 1}")
    text = "\n".join(lines[start:end]).strip() + "\n"
    OUT.write_text(text, encoding="utf-8")
    print(f"{OUT}: {len(text.encode())} bytes, {len(text.split())} words, chapters 1-{CHAPTERS}")


if __name__ == "__main__":
    main()
