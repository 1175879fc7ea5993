/*
 * jinja_render.c — test tool: render a chat template file with a JSON
 * context file through ember's Jinja interpreter and print the result.
 * Usage: jinja_render TEMPLATE.jinja CONTEXT.json [FIXED_NOW_UNIX]
 * Exit 0 on success, 1 on a template error (message on stderr), 2 on usage/IO.
 * Must not: be used by the server; it exists for tests and debugging.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja/jinja.h"

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) { free(b); b = NULL; }
    fclose(f);
    if (b) { b[len] = 0; *n = (size_t)len; }
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: %s TEMPLATE CONTEXT.json [NOW]\n", argv[0]); return 2; }
    size_t n = 0;
    char *src = slurp(argv[1], &n);
    if (!src) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
    json_error_t je;
    json_t *ctx = json_load_file(argv[2], 0, &je);
    if (!ctx) { fprintf(stderr, "%s: %s\n", argv[2], je.text); free(src); return 2; }
    ember_jinja_template *t = NULL;
    ember_jinja_error err;
    int rc = 0;
    if (ember_jinja_parse(src, n, &t, &err) != EMBER_OK) {
        fprintf(stderr, "parse error: %s\n", err.message);
        rc = 1;
    } else {
        ember_jinja_render_opts o = {0};
        if (argc > 3) { o.use_fixed_now = 1; o.fixed_now = strtoll(argv[3], NULL, 10); }
        char *out = NULL;
        size_t len = 0;
        if (ember_jinja_render(t, ctx, &o, &out, &len, &err) != EMBER_OK) {
            fprintf(stderr, "render error: %s\n", err.message);
            rc = 1;
        } else {
            fwrite(out, 1, len, stdout);
            free(out);
        }
    }
    ember_jinja_free(t);
    json_decref(ctx);
    free(src);
    return rc;
}
