/*
 * jinja.h — a Jinja2 interpreter for the subset that model chat templates use.
 *
 * Owns: parsing a template once into a compiled form, and rendering it against
 * a JSON context the way Python jinja2 renders it inside transformers'
 * apply_chat_template (ImmutableSandboxedEnvironment with trim_blocks=True,
 * lstrip_blocks=True, the loopcontrols extension, transformers' tojson filter,
 * raise_exception and strftime_now globals; see
 * transformers/utils/chat_template_utils.py).
 * One named difference, taken from llama.cpp's Jinja: a string + an
 * undefined value or None is the string (jinja2 raises; stock templates such
 * as firefunction-v2 rely on it). tests/golden/jinja/make_goldens.py
 * renders the cases jinja2 fails with that one rule added.
 * Must not: read files, touch global state, or abort on any template or
 * context. Every failure is an ember_status with a message naming the
 * template line and column.
 *
 * Thread safety: a compiled template is immutable after parse; any number of
 * threads may render it at once. Parse and render switch the calling thread
 * to the "C" locale while they run (uselocale), so numbers format as Python's.
 */
#ifndef EMBER_CHAT_JINJA_H
#define EMBER_CHAT_JINJA_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "ember.h"

typedef struct ember_jinja_template ember_jinja_template;

/* Where and why a parse or render failed. line and column are 1-based
 * positions in the template source (column counts bytes); 0 when the failure
 * has no position (e.g. out of memory). message holds the full text, already
 * prefixed with "line L, column C: ". */
typedef struct ember_jinja_error {
    int line;
    int column;
    char message[512];
} ember_jinja_error;

/* Parse `len` bytes of template source (UTF-8) into a compiled template.
 * `err` may be NULL. Also records the message with ember_error().
 * Errors: EMBER_ERR_INVALID_ARG (NULL src/out), EMBER_ERR_FORMAT (syntax
 * error: unknown tag, unclosed block, bad expression, nesting deeper than
 * 200), EMBER_ERR_NOMEM. On error *out is NULL. */
ember_status ember_jinja_parse(const char *src, size_t len, ember_jinja_template **out,
                               ember_jinja_error *err);

/* Free a compiled template. NULL is a no-op. */
void ember_jinja_free(ember_jinja_template *t);

/* Options for one render. Zero-initialised means defaults. */
typedef struct ember_jinja_render_opts {
    /* strftime_now() formats this instant (seconds since the Unix epoch,
     * taken as UTC) when use_fixed_now is nonzero, else the current local
     * time, as Python's datetime.now().strftime does. */
    int use_fixed_now;
    int64_t fixed_now;
    /* Limits that keep a hostile template from hanging or exhausting memory;
     * 0 picks the default: 10,000,000 evaluation steps, 100 nested macro
     * calls, 64 MiB of output, 512 MiB of working memory. C recursion is
     * bounded too (parse nesting 200, evaluation depth 600 + 4 per allowed
     * macro level), so a render needs well under 1 MiB of stack. */
    uint64_t max_steps;
    int max_call_depth;
    size_t max_output;
    size_t max_memory;
} ember_jinja_render_opts;

/* Render `t` with `context`, a JSON object whose members become the template's
 * top-level variables (for chat: messages, tools, add_generation_prompt,
 * bos_token, eos_token, and chat_template_kwargs such as enable_thinking).
 * JSON null is Python None; objects keep their key order.
 * On success *out is a malloc'd NUL-terminated UTF-8 string (free() it) and
 * *out_len (may be NULL) its length in bytes. `opts` and `err` may be NULL.
 * Errors: EMBER_ERR_INVALID_ARG (NULL arguments, context not an object),
 * EMBER_ERR_FORMAT (the template failed: raise_exception, undefined value
 * used, type error, unknown filter; message has line and column),
 * EMBER_ERR_RANGE (a limit in opts was hit), EMBER_ERR_NOMEM. On error
 * *out is NULL. */
ember_status ember_jinja_render(const ember_jinja_template *t, const json_t *context,
                                const ember_jinja_render_opts *opts, char **out,
                                size_t *out_len, ember_jinja_error *err);

#endif
