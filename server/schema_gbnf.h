/* schema_gbnf.h - JSON Schema to GBNF, the grammar text constrained decoding runs for
 * response_format json_schema (OpenAI), guided_json (vLLM), json_schema (llama-server) and
 * tool-call arguments. The text is llama.cpp's GBNF as engine/constrain/gbnf.c reads it.
 *
 * What the grammar accepts is a subset of the schema's instances, written one way:
 *  - Whitespace: between two tokens nothing, one space, or a newline and up to 20 spaces or
 *    tabs, so a model cannot pad forever. Nothing before or after the value.
 *  - Objects: the properties in the schema's `properties` order; required ones present,
 *    optional ones may be left out. additionalProperties false or absent: no other keys (the
 *    strict behaviour OpenAI's structured outputs have), except that a schema with none of
 *    properties / required / additionalProperties is a free-form object (as llama.cpp does).
 *    true or a schema: extra keys, after the declared ones, with values of that schema (true:
 *    any JSON value); an extra key may be any string, even a declared name (a CFG cannot say
 *    "not one of these"), and jansson then keeps the last. A required name that properties
 *    lacks is a declared property of the additionalProperties schema (any value if none).
 *  - Keys and enum / const values: their compact JSON text exactly (strings escaped the way
 *    jansson writes them, reals in the shortest form that reads back). enum values are
 *    filtered by "type"; the other keywords are not checked against them.
 *  - Numbers: at most 18 integer digits, 20 fraction digits and 2 exponent digits, so
 *    jansson reads every one; integers never "-0". Integer minimum / maximum /
 *    exclusiveMinimum / exclusiveMaximum (draft 4 booleans too) become exact digit ranges.
 *    Number bounds are supported when they are integers (then no exponent is written), else
 *    STRATA_EUNSUPPORTED.
 *  - Strings: \u escapes never write U+0000 or a lone surrogate (jansson refuses both).
 *    minLength / maxLength (at most 1000) count characters, an escape being one. "pattern"
 *    goes through constrain_regex_gbnf and its match is the raw content between the quotes:
 *    its classes and `.` cannot match '"', '\\' or a control character, and such characters
 *    written literally in it are written as their JSON escapes. format date-time, date, time
 *    (RFC 3339, offset required), uuid and email have a grammar; other formats are ignored
 *    (a plain string), as OpenAI does. At most one of pattern, a supported format and length
 *    bounds (else STRATA_EUNSUPPORTED).
 *  - Arrays: items, prefixItems (or the draft 4 items array), minItems / maxItems up to 100
 *    (STRATA_EUNSUPPORTED beyond); uniqueItems false only.
 *  - anyOf / oneOf: alternation (oneOf's exclusivity is not enforced); no sibling constraint
 *    keywords. allOf (and $ref with sibling constraints): one constraining part, or object
 *    parts merged. $ref: local JSON pointers ("#", "#/$defs/X", "#/definitions/X", ...);
 *    each target is one rule, so recursion works; a cycle back to itself before any object or
 *    array, or a schema no finite value satisfies, is STRATA_EINVALID.
 *  - Any value ({} or true, items without a schema): nesting at most 16 deep.
 *  - Type from keywords: without "type", object / array / string / number keywords imply
 *    those types; with none, any value.
 * Annotation and unknown keywords are ignored (as JSON Schema says); not, if/then/else,
 * patternProperties, dependentRequired, dependentSchemas, dependencies, multipleOf,
 * min/maxProperties, contains, propertyNames, unevaluated*, uniqueItems true and the
 * like are STRATA_EUNSUPPORTED naming the keyword and the JSON pointer where it was
 * found; a malformed schema is STRATA_EINVALID naming the pointer; more than 64 levels of
 * nesting or 1 MiB of grammar is STRATA_EUNSUPPORTED. Pure functions: any thread. */
#ifndef STRATA_SCHEMA_GBNF_H
#define STRATA_SCHEMA_GBNF_H

#include <jansson.h>

#include "engine/base/err.h"
#include "engine/base/strbuf.h"

/* Appends to out GBNF rules whose rule `name` ([A-Za-z0-9-]+) matches the JSON texts valid
 * for schema (within the limits above). Helper rules are named name-<suffix>, so calls with
 * different names can share one grammar. On error out may hold partial rules: discard it. */
int schema_gbnf(const json_t *schema, const char *name, strbuf *out, strata_err *err);

/* A whole grammar: rule root for the schema, plus its helper rules. */
int schema_gbnf_root(const json_t *schema, strbuf *out, strata_err *err);

#endif
