#!/usr/bin/env python3
"""Goldens for the JSON-schema compiler: schemas, JSON texts, and whether
each text is a valid instance, as decided by the Python `jsonschema` package
(Draft 2020-12 validator with its FormatChecker) after `json.loads`.

The C test (tests/unit/sample/test_grammar_schema.c) compiles each schema to
GBNF, runs each text through the grammar matcher, and requires
grammar-accepts == jsonschema-valid. Texts are written with object keys in
the order of the schema's "properties" (a documented limit of the compiler),
in several whitespace styles.

Run:  python3 -m venv /work/venv-grammar-oracle
      /work/venv-grammar-oracle/bin/pip install jsonschema rfc3339-validator
      /work/venv-grammar-oracle/bin/python tests/golden/json_schema/make_goldens.py
Writes tests/golden/json_schema/cases.json.
"""
import json
import os

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))

S, I = [], []   # noqa


def case(name, schema, docs, raw=()):
    """docs: Python values serialised 3 ways; raw: literal texts."""
    S.append((name, schema, list(docs), list(raw)))


def texts(v):
    out = [json.dumps(v, ensure_ascii=False, separators=(",", ":")),
           json.dumps(v, ensure_ascii=False)]
    ind = json.dumps(v, ensure_ascii=False, indent=2)
    if ind not in out and max((len(l) - len(l.lstrip(" ")) for l in ind.split("\n")), default=0) <= 18:
        out.append(ind)
    return out


# --- types ---
case("type-string", {"type": "string"}, ["", "hello", "é日本 \"q\" \\ \n\t", 5, None, ["x"]],
     ['"unterminated', "'single'", '"\\u00e9"', '"bad \\x escape"', '"ctl \u0001"'])
case("type-integer", {"type": "integer"}, [0, -7, 123456789012345678, 1.5, "1", True],
     ["007", "-0", "+1", "- 1", "12a"])  # 1e3 counts as an integer for JSON Schema: a documented limit
case("type-number", {"type": "number"}, [0, -7.25, 1e-9, 3.5e+30, "x", None],
     ["1.", ".5", "1e", "-0.0", "2E-3", "0x10"])
case("type-boolean", {"type": "boolean"}, [True, False, 0, "true"], ["True", "nul"])
case("type-null", {"type": "null"}, [None, 0, False, ""], ["Null"])
case("type-list", {"type": ["string", "null"]}, ["a", None, 1, [None]])
case("type-any", {}, [1, "x", None, [1, {"a": []}], {"k": {"n": [True]}}], ["{", "[1,]", "{\"a\" 1}"])
case("boolean-true", True, [1, {"a": 2}, []], ["nope"])
# --- objects ---
person = {"type": "object",
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name"]}
case("object-required", person,
     [{"name": "Al"}, {"name": "Al", "age": 3}, {"age": 3}, {}, {"name": 5}, {"name": "Al", "age": "3"},
      {"name": "Al", "age": 3, "extra": [1]}, {"name": "Al", "agex": "3"}, {"name": "Al", "ag": "3"}, []]
     )  # a declared key spelt with a \u escape ("a\u0067e") is a documented limit
case("object-additional-false", dict(person, additionalProperties=False),
     [{"name": "Al"}, {"name": "Al", "age": 3}, {"name": "Al", "x": 1}, {"name": "Al", "age": 1, "z": None}])
case("object-additional-schema", dict(person, additionalProperties={"type": "number"}),
     [{"name": "Al", "x": 1}, {"name": "Al", "x": 1.5, "y": -2}, {"name": "Al", "x": "s"}, {"name": "Al"},
      {"name": "Al", "age": 2.5}, {"name": "Al", "\"q\"": 1, "n\u00e9v": 2}])
case("object-all-optional", {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "string"}},
                             "additionalProperties": False},
     [{}, {"a": True}, {"b": None}, {"c": "x"}, {"a": False, "c": "y"}, {"a": True, "b": None, "c": ""},
      {"b": 1}, {"d": 1}], ["{,}", "{\"a\":true,}", "{\"a\":true \"b\":null}"])
case("object-all-required", {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                             "required": ["x", "y"], "additionalProperties": False},
     [{"x": 1, "y": 2}, {"x": 1}, {"y": 2}, {"x": 1, "y": 2, "z": 3}])
case("object-nested", {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"id": {"type": "integer"},
                                                   "tags": {"type": "array", "items": {"type": "string"}}},
                 "required": ["id"], "additionalProperties": False},
        "ok": {"type": "boolean"}}, "required": ["user", "ok"], "additionalProperties": False},
     [{"user": {"id": 1}, "ok": True}, {"user": {"id": 1, "tags": ["a", "b"]}, "ok": False},
      {"user": {"tags": []}, "ok": True}, {"user": {"id": 1, "tags": [1]}, "ok": True}, {"user": {"id": 1}}])
case("object-no-type", {"properties": {"a": {"type": "string"}}, "required": ["a"]},
     [{"a": "x"}, {"a": 1}, {}])
case("object-unicode-keys", {"type": "object", "properties": {"név": {"type": "string"}, "a\"b": {"type": "integer"}},
                             "required": ["név", "a\"b"], "additionalProperties": False},
     [{"név": "x", "a\"b": 1}, {"név": "x"}, {"nev": "x", "a\"b": 1}])
# --- enum / const ---
case("enum-strings", {"enum": ["red", "green", "blue"]}, ["red", "blue", "Red", "yellow", 1])
case("enum-mixed", {"enum": [1, "one", None, True, [1, 2], {"a": 1}]},
     [1, "one", None, True, [1, 2], {"a": 1}, 2, False, [2, 1], {"a": 2}])
case("const-string", {"const": "fixed"}, ["fixed", "fixe", "fixedd", None])
case("const-object", {"const": {"k": [1, "x"], "z": None}}, [{"k": [1, "x"], "z": None}, {"k": [1], "z": None}])
case("enum-in-object", {"type": "object", "properties": {"unit": {"type": "string", "enum": ["c", "f"]}},
                        "required": ["unit"], "additionalProperties": False},
     [{"unit": "c"}, {"unit": "f"}, {"unit": "k"}, {}])
# --- arrays ---
case("array-items", {"type": "array", "items": {"type": "integer"}}, [[], [1], [1, 2, 3], [1, "2"], ["a"], {}],
     ["[1,]", "[,1]", "[1 2]"])
case("array-min-max", {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4},
     [["a", "b"], ["a", "b", "c", "d"], ["a"], [], ["a", "b", "c", "d", "e"], ["a", 1]])
case("array-min-only", {"type": "array", "items": {"type": "boolean"}, "minItems": 1},
     [[True], [True, False, True, True, False], []])
case("array-max-zero", {"type": "array", "maxItems": 0}, [[], [1]])
case("array-max-one", {"type": "array", "items": {"type": "null"}, "maxItems": 1}, [[], [None], [None, None]])
case("array-exact", {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3},
     [[1, 2, 3], [1, 2], [1, 2, 3, 4]])
case("array-prefix-items", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
     [[], ["a"], ["a", 1], ["a", 1, 2], [1, "a"]])
case("array-prefix-then-items", {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "boolean"}, "minItems": 2},
     [["a", True], ["a", True, False], ["a"], ["a", "b"]])
case("array-of-objects", {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}},
                                                      "required": ["n"], "additionalProperties": False}, "maxItems": 3},
     [[], [{"n": 1}], [{"n": 1}, {"n": 2}], [{"n": 1}, {}], [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}]])
case("array-no-type", {"items": {"type": "string"}, "maxItems": 2}, [["a"], ["a", "b", "c"], [1]])
# --- anyOf / oneOf ---
case("anyof-primitive", {"anyOf": [{"type": "string"}, {"type": "integer"}]}, ["x", 3, 2.5, None])
case("oneof-objects", {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "rect"}, "w": {"type": "number"}, "h": {"type": "number"}}, "required": ["kind", "w", "h"], "additionalProperties": False}]},
     [{"kind": "circle", "r": 1}, {"kind": "rect", "w": 1, "h": 2}, {"kind": "rect", "r": 1}, {"kind": "circle"}, {"kind": "tri"}])
case("anyof-nullable-object", {"type": "object", "properties": {"v": {"anyOf": [{"type": "number"}, {"type": "null"}]}},
                               "required": ["v"], "additionalProperties": False},
     [{"v": 1}, {"v": None}, {"v": "x"}])
# --- $ref / $defs ---
case("ref-defs", {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                                   "required": ["x", "y"], "additionalProperties": False}},
                  "type": "object", "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"}},
                  "required": ["a"], "additionalProperties": False},
     [{"a": {"x": 1, "y": 2}}, {"a": {"x": 1, "y": 2}, "b": {"x": 0, "y": 0}}, {"a": {"x": 1}}, {"b": {"x": 1, "y": 2}}])
case("ref-definitions", {"definitions": {"name": {"type": "string", "minLength": 1}},
                         "type": "array", "items": {"$ref": "#/definitions/name"}},
     [["a", "bc"], [""], [1]])
case("ref-recursive", {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                                        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                                          "required": ["v"], "additionalProperties": False}},
                       "$ref": "#/$defs/node"},
     [{"v": 1}, {"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4}]}]}, {"v": 1, "kids": [{}]}, {"kids": []}])
# --- strings ---
case("string-length", {"type": "string", "minLength": 2, "maxLength": 4}, ["ab", "abcd", "a", "abcde", "日本", "\n\t"])
case("string-max-length", {"type": "string", "maxLength": 3}, ["", "abc", "abcd", "é\"x"])
case("format-date", {"type": "string", "format": "date"}, ["2024-01-31", "1999-12-01", "2024-13-01", "2024-1-01", "24-01-01", "x"])
case("format-time", {"type": "string", "format": "time"}, ["12:30:00Z", "23:59:59.123+02:00", "24:00:00Z", "12:30Z", "12:30:00"])
case("format-date-time", {"type": "string", "format": "date-time"},
     ["2024-01-31T12:30:00Z", "2024-01-31T12:30:00.5-05:00", "2024-01-31 12:30:00Z", "2024-01-31T25:00:00Z", "2024-01-31"])
case("format-uuid", {"type": "string", "format": "uuid"},
     ["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000", "123e4567e89b12d3a456426614174000",
      "123e4567-e89b-12d3-a456-42661417400", "g23e4567-e89b-12d3-a456-426614174000"])
case("format-email", {"type": "string", "format": "email"}, ["a@b.c", "first.last@example.org", "no-at-sign", ""])
case("format-ipv4", {"type": "string", "format": "ipv4"}, ["127.0.0.1", "255.255.255.255", "256.1.1.1", "1.2.3", "01.2.3.4"])
case("object-with-formats", {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
                                                             "id": {"type": "string", "format": "uuid"}},
                             "required": ["when", "id"], "additionalProperties": False},
     [{"when": "2024-01-31T12:30:00Z", "id": "123e4567-e89b-12d3-a456-426614174000"},
      {"when": "yesterday", "id": "123e4567-e89b-12d3-a456-426614174000"}])
# --- numeric bounds (plain decimal texts: an exponent form is a documented limit under bounds) ---
case("int-min-max", {"type": "integer", "minimum": -15, "maximum": 120},
     [-15, -16, -1, 0, 7, 99, 100, 119, 120, 121, 1000, -100, 5.5, "7"], ["-0", "007", "+5"])
case("int-exclusive", {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1000},
     [0, 1, 9, 10, 99, 500, 999, 1000, 1001, -5])
case("int-min-only", {"type": "integer", "minimum": 37}, [36, 37, 38, 99, 100, 12345, -37, 0, 3, 40])
case("int-max-only-negative", {"type": "integer", "maximum": -20}, [-20, -19, -21, -1000, 0, 5, -2, -200])
case("int-fractional-bounds", {"type": "integer", "minimum": 2.5, "maximum": 7.5}, [2, 3, 5, 7, 8])
case("int-exclusive-negative", {"type": "integer", "exclusiveMinimum": -10, "maximum": -3},
     [-10, -9, -3, -2, 0, -11, -5])
case("int-both-keywords", {"type": "integer", "minimum": 5, "exclusiveMinimum": 5, "maximum": 9,
                           "exclusiveMaximum": 20}, [4, 5, 6, 9, 10])
case("number-min-max", {"type": "number", "minimum": -2, "maximum": 3},
     [-2, -2.0, -2.5, -1.999, 0, 0.5, 3, 3.0, 3.0001, 2.999, 4, -3, 1.25],
     ["-0.0", "-0", "3.000", "-2.000", "-2.001"])
case("number-exclusive", {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
     [0, 0.0, 0.5, 1, 1.0, 0.999, 0.001, -0.5, 2], ["0.000", "-0.0", "0.0001", "1.00"])
case("number-min-only", {"type": "number", "minimum": 10}, [9.99, 10, 10.5, 100, 1000.25, -10, 11])
case("number-max-only", {"type": "number", "exclusiveMaximum": -1}, [-1, -1.0, -1.5, -2, 0, 3.5, -100.25])
case("object-int-bounds", {"type": "object", "properties": {"days": {"type": "integer", "minimum": 1, "maximum": 14}},
                           "required": ["days"]},
     [{"days": 1}, {"days": 14}, {"days": 0}, {"days": 15}, {"days": 7}])
# --- pattern (an ECMA-262 subset; JSON Schema patterns are not anchored) ---
case("pattern-anchored", {"type": "string", "pattern": "^[a-z]+-[0-9]{2,3}$"},
     ["abc-12", "abc-1234", "Abc-12", "a-123", "-12", "abc-12x", "z-99", 5])
case("pattern-unanchored", {"type": "string", "pattern": "ab+c"}, ["xabbcx", "ac", "abc", "", "ABC", "abbbc!"])
case("pattern-digits", {"type": "string", "pattern": "^\\d{3}-\\d{4}$"}, ["555-1234", "5551234", "55-1234", "555-12345"])
case("pattern-quotes", {"type": "string", "pattern": "^\"[^\"]*\"$"}, ['"hi"', '"', 'hi"', '""', '"a"b"'])
case("pattern-dot", {"type": "string", "pattern": "^a.c$"}, ["abc", "a\nc", "a.c", "ac", "a\u00e9c", "a\\c", "abbc"])
case("pattern-group-alt", {"type": "string", "pattern": "^(cat|dog)s?$"}, ["cat", "dogs", "cats", "bird", "catss", "dog"])
case("pattern-shorthands", {"type": "string", "pattern": "^\\w+\\s\\w+$"},
     ["hello world", "hello  world", "hello\tworld", "hi", "a_1 b_2", "x-y z"])
# (\w \d \s are ASCII classes in ECMA-262, as JSON Schema specifies and ember compiles them;
#  Python's re, which jsonschema uses, makes them Unicode: "é x" would divide the oracles)
case("pattern-negated-class", {"type": "string", "pattern": "^[^a-c]*$"}, ["xyz", "xaz", "tab\t", 'q"\\', "", "C"])
case("pattern-optional-start", {"type": "string", "pattern": "^(?:\\+1 )?\\(\\d{3}\\) \\d{3}$"},
     ["+1 (555) 123", "(555) 123", "+1 555 123", "(55) 123"])
case("pattern-in-object", {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}[0-9]+$"}},
                           "required": ["id"], "additionalProperties": False},
     [{"id": "AB123"}, {"id": "ab123"}, {"id": "AB"}, {"id": "ABC1"}, {"id": "XY0"}])
# --- a tool-call shaped schema ---
case("tool-call", {"type": "object", "properties": {
        "name": {"const": "get_weather"},
        "arguments": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]},
                                                       "days": {"type": "integer"}},
                      "required": ["city"], "additionalProperties": False}},
        "required": ["name", "arguments"], "additionalProperties": False},
     [{"name": "get_weather", "arguments": {"city": "Oslo"}},
      {"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c", "days": 3}},
      {"name": "get_weather", "arguments": {"unit": "c"}},
      {"name": "get_time", "arguments": {"city": "Oslo"}},
      {"name": "get_weather", "arguments": {"city": "Oslo", "unit": "k"}}])


def main():
    out = []
    for name, schema, docs, raw in S:
        cls = jsonschema.validators.validator_for(schema if isinstance(schema, dict) else {})
        cls = jsonschema.Draft202012Validator
        cls.check_schema(schema)
        v = cls(schema, format_checker=cls.FORMAT_CHECKER)
        inst = []
        all_texts = []
        for d in docs:
            all_texts += texts(d)
        all_texts += raw
        for t in all_texts:
            try:
                val = json.loads(t)
                ok = v.is_valid(val)
            except json.JSONDecodeError:
                ok = False
            inst.append({"text": t, "valid": ok})
        out.append({"name": name, "schema": schema, "instances": inst})
    path = os.path.join(HERE, "cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n = sum(len(c["instances"]) for c in out)
    nv = sum(i["valid"] for c in out for i in c["instances"])
    print(f"{len(out)} schemas, {n} instances ({nv} valid) -> {path}")


if __name__ == "__main__":
    main()
