/*
 * webui.c — the embedded web chat page (see webui.h).
 */
#include "server/webui.h"

#include <stddef.h>

/* build/generated/webui_index.c, written by cmake/embed.cmake */
extern const unsigned char ember_webui_index[];
extern const size_t ember_webui_index_len;

/* script-src/style-src 'unsafe-inline': the page is one file with its script
 * and style inline; connect-src 'self': it talks only to this server; no
 * frames, no forms posted elsewhere, no base URL changes (CSP level 3). */
#define WEBUI_CSP                                                                                              \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "        \
    "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

struct MHD_Response *webui_response(void)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(ember_webui_index_len, (void *)ember_webui_index,
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r) return NULL;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy", WEBUI_CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    return r;
}
