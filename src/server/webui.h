/*
 * webui.h — the web chat page served at GET / (and /index.html).
 *
 * The page is one self-contained HTML file (src/server/webui/index.html:
 * markup, CSS and JavaScript inline, nothing fetched from elsewhere) that
 * CMake embeds into the binary as a byte array (cmake/embed.cmake). In the
 * browser it talks to this server's own OpenAI API: streamed
 * POST /v1/chat/completions (server-sent events), GET /v1/models, with the
 * key of --api-key sent as "Authorization: Bearer KEY". As llama-server's
 * page, it is served without the key (a browser cannot send one when it
 * navigates); every API call it makes still needs it.
 *
 * Owns: the page's bytes and the headers it is served with. Must not: know
 * about routes, requests or the engine (http.c routes to it).
 */
#ifndef EMBER_SERVER_WEBUI_H
#define EMBER_SERVER_WEBUI_H

#include <microhttpd.h>

/* A new response holding the page (a persistent buffer, not copied) with
 * Content-Type text/html, a Content-Security-Policy that lets it run only its
 * own inline script and style and connect only to this origin, nosniff, and
 * Cache-Control no-cache (a rebuilt binary serves its new page at once).
 * The caller adds its common headers, queues and destroys it. NULL when
 * libmicrohttpd is out of memory. */
struct MHD_Response *webui_response(void);

#endif
