#!/usr/bin/env python3
"""Goldens for GBNF string acceptance: each GBNF grammar below describes a
regular language that is also written as a Python regular expression; the
verdict for each test string (full match) comes from Python's `re` module,
an implementation independent of ember's matcher (the one non-regular case,
balanced parentheses, is checked by a two-line Python function).

Run: python3 tests/golden/grammar/make_goldens.py  (writes cases.json)
"""
import json
import os
import random
import re

HERE = os.path.dirname(os.path.abspath(__file__))

CASES = [
    # (name, gbnf, python regex, alphabet for random strings, handwritten strings)
    ("literal-alt", 'root ::= "cat" | "car" | "dog"', r"cat|car|dog", "cardogt", ["", "ca", "cat", "cart"]),
    ("star-plus-opt", 'root ::= "a"* "b"+ "c"?', r"a*b+c?", "abc", ["", "b", "aab", "bbc", "abcc", "ca"]),
    ("classes", 'root ::= [a-c0-9]+ [^a-z]', r"[a-c0-9]+[^a-z]", "ab09z!X", ["a!", "09Z", "a", "z!"]),
    ("braces", 'root ::= "x"{2} "y"{1,3} "z"{2,}', r"x{2}y{1,3}z{2,}", "xyz", ["xxyzz", "xxyyyzzz", "xxyyyyzz", "xyzz"]),
    ("groups-nested", 'root ::= ( "a" ( "b" | "c" )* "d" )+\n', r"(a[bc]*d)+", "abcd", ["ad", "abcbd", "adad", "abd a"]),
    ("rules-and-comments", '# a comment\nroot ::= word ( " " word )*  # trailing comment\nword ::= [a-z]+\n  | [0-9]+\n',
     r"([a-z]+|[0-9]+)( ([a-z]+|[0-9]+))*", "ab1 ", ["ab 12 c", "ab  c", " ab", "a1"]),
    ("unicode", 'root ::= [ぁ-ゟ]+ "é" | "日本" [\\u00e0-\\u00ff]?', r"[ぁ-ゟ]+é|日本[\u00e0-\u00ff]?", "ぁゟéa日本ÿ",
     ["ぁé", "日本", "日本ÿ", "日本ā", "é"]),
    ("escapes", 'root ::= "\\x41\\n" [\\t\\]\\-]* "\\u263A" "\\\\" "\\""', r"A\n[\t\]\-]*\u263A\\\"", "A\n\t]-☺\\\"",
     ["A\n☺\\\"", "A\n\t-]☺\\\"", "A\n\tx☺\\\""]),
    ("dot", 'root ::= "<" . . ">"', r"<..>", "<>ab\n", ["<ab>", "<a>", "<\n\n>", "<日本>"]),
    ("empty-alt", 'root ::= "a" opt "b"\nopt ::= "x" | ', r"a(x|)b", "axb", ["ab", "axb", "axxb"]),
    ("right-recursion", 'root ::= item\nitem ::= "(" item ")" | "i"', None, "()i", ["i", "(i)", "((i))", "((i)", "(i))"]),
]


def balanced(s):
    # oracle for right-recursion: ( ^n i )^n
    n = len(s) - len(s.lstrip("("))
    return s == "(" * n + "i" + ")" * n


def main():
    rnd = random.Random(1234)
    out = []
    for name, gbnf, rx, alpha, hand in CASES:
        strs = list(hand)
        for _ in range(60):
            strs.append("".join(rnd.choice(alpha) for _ in range(rnd.randint(0, 8))))
        seen, uniq = set(), []
        for s in strs:
            if s not in seen:
                seen.add(s)
                uniq.append(s)
        inst = []
        for s in uniq:
            if rx is None:
                ok = balanced(s)
            else:
                ok = re.fullmatch(rx, s, re.S) is not None
            inst.append({"text": s, "match": ok})
        out.append({"name": name, "gbnf": gbnf, "instances": inst})
    with open(os.path.join(HERE, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(len(out), "grammars", sum(len(c["instances"]) for c in out), "strings")


if __name__ == "__main__":
    main()
