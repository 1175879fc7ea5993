/*
 * json_schema.h — JSON Schema to GBNF, and the request fields that ask for a
 * grammar.
 *
 * Owns: compiling a JSON Schema (jansson value) to GBNF text for grammar.h,
 * and reading the OpenAI / llama.cpp request fields response_format,
 * grammar and json_schema into GBNF. Must not: parse GBNF, sample, or answer
 * HTTP (the server maps errors to 400).
 *
 * Supported (JSON Schema 2020-12 / draft-07 terms): type (one or a list),
 * properties, required, additionalProperties (true, false or a schema;
 * default true as the specification says), enum, const, items, prefixItems,
 * minItems, maxItems, nested objects, anyOf, oneOf, $ref to "#", "#/$defs/..",
 * "#/definitions/.." (any local JSON pointer; recursion allowed), minLength,
 * maxLength, format (date, time, date-time, uuid, email, ipv4), boolean
 * schemas true / false, and:
 *  - minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, draft 6+
 *    form): exact for "integer" (any numeric bounds within +-1e15); for
 *    "number" exact when the bounds are integers, in plain decimal form (no
 *    exponent is produced under bounds); a non-integer bound of a number is
 *    reported unsupported;
 *  - pattern: an ECMA-262 subset, exact — literals, escapes, [classes] with
 *    ranges and \d \w \s, '.', ( ) (?: ) groups, '|', * + ? {m} {m,} {m,n}
 *    (lazy forms accepted), '^' / '$' at the ends (unanchored ends match
 *    anything, as JSON Schema says); \d \w \s are ASCII classes (ECMA-262;
 *    Python's re differs on non-ASCII). Back-references, lookaround, \b,
 *    anchors elsewhere, anchors around a top-level '|', and pattern together
 *    with min/maxLength or format are reported unsupported. A non-ASCII
 *    character written as a \u escape is not recognised under a pattern.
 * Known limits (the grammar is then looser or stricter than the schema):
 * properties must appear in the order of "properties" and additional
 * properties after them (an additional key is any string but a declared
 * name, though a declared name spelt with a \u escape slips through);
 * oneOf is treated as anyOf; multipleOf, minProperties/maxProperties,
 * numeric bounds without a "type", and uniqueItems are not enforced
 * (uniqueItems cannot be in general: "no two items equal" is not a
 * context-free property of the text; the output may repeat an item); not
 * and allOf are reported as unsupported; a date is checked by shape
 * (2023-02-30 passes); an integer in exponent or ".0" form (which JSON Schema
 * counts as an integer) is not produced. Whitespace
 * between tokens: nothing, one space, or one or two newlines and at most 20
 * spaces/tabs of indentation (llama.cpp's SPACE_RULE, common/
 * json-schema-to-grammar.cpp), so a small model cannot spin on blank lines.
 * Reference for the generated grammar's shape: llama.cpp's
 * examples/json_schema_to_grammar.py (facts only, our own code).
 */
#ifndef EMBER_SAMPLE_JSON_SCHEMA_H
#define EMBER_SAMPLE_JSON_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>

#include "ember.h"

/* Compile `schema` to GBNF with start rule "root". *out is malloc'd,
 * NUL-terminated; caller frees. Errors: EMBER_ERR_INVALID_ARG (not an object
 * or boolean, a keyword of the wrong type; the message names the JSON
 * pointer), EMBER_ERR_NOT_FOUND (a $ref that resolves to nothing),
 * EMBER_ERR_UNSUPPORTED (allOf, not, remote $ref, unknown type or format),
 * EMBER_ERR_NOMEM. */
ember_status ember_json_schema_to_gbnf(const json_t *schema, char **out);

/* The syntax a schema's instances are written in:
 *  EMBER_SCHEMA_JSON       JSON text (RFC 8259).
 *  EMBER_SCHEMA_GEMMA4     Gemma 4's tool-call argument syntax
 *      (src/chat/formats/gemma4.c): {key:<|"|>text<|"|>,n:1,b:true,o:{..},l:[..]}
 *      with bare keys (quoted with <|"|> when not [A-Za-z0-9_.-]+), raw
 *      strings and no whitespace.
 *  EMBER_SCHEMA_XML_PARAMS the parameters of a Qwen3-Coder call
 *      (src/chat/formats/qwen3_coder.c): each property of the root object as
 *      <parameter=KEY>\nVALUE\n</parameter>\n, VALUE raw text when the
 *      property is typed "string", else JSON text. The root must be a plain
 *      object schema (no $ref/anyOf at the top).
 * In the Gemma 4 and XML syntaxes the grammar is stricter than the schema:
 * no properties beyond the declared ones, and raw strings never contain '<'
 * (so no closing tag or <|"|> can start inside them). */
typedef enum ember_schema_syntax {
    EMBER_SCHEMA_JSON = 0,
    EMBER_SCHEMA_GEMMA4,
    EMBER_SCHEMA_XML_PARAMS,
} ember_schema_syntax;

/* ember_json_schema_to_gbnf for instances written in syntax `syn`. Errors:
 * as ember_json_schema_to_gbnf, and EMBER_ERR_UNSUPPORTED (XML_PARAMS with a
 * root that is not a plain object schema). */
ember_status ember_json_schema_to_gbnf_syntax(const json_t *schema, ember_schema_syntax syn, char **out);

/* GBNF for any JSON object (response_format json_object). Caller frees. */
ember_status ember_json_object_gbnf(char **out);

/* Read the grammar a request asks for (a JSON request body object):
 *   "grammar": "<GBNF>"                          (llama.cpp)
 *   "json_schema": {...}                         (llama.cpp)
 *   "response_format": {"type": "text"}          (OpenAI: no grammar)
 *   "response_format": {"type": "json_object"}   (OpenAI; an optional
 *        "schema" member is llama.cpp's extension)
 *   "response_format": {"type": "json_schema",
 *        "json_schema": {"name": .., "schema": {...}, "strict": ..}}  (OpenAI)
 * *out: malloc'd GBNF, or NULL when the request asks for none. Errors:
 * EMBER_ERR_INVALID_ARG naming the field (wrong type, unknown
 * response_format type, both grammar and a schema given), and those of
 * ember_json_schema_to_gbnf. */
ember_status ember_grammar_from_request(const json_t *body, char **out);

#endif
