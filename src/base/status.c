/*
 * status.c — thread-local error messages for ember_status results.
 */
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[1024];

ember_status ember_error(ember_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

void ember_clear_error(void) { last_error[0] = '\0'; }

const char *ember_last_error(void) { return last_error; }

const char *ember_status_name(ember_status s)
{
    switch (s) {
    case EMBER_OK: return "EMBER_OK";
    case EMBER_ERR_INVALID_ARG: return "EMBER_ERR_INVALID_ARG";
    case EMBER_ERR_IO: return "EMBER_ERR_IO";
    case EMBER_ERR_FORMAT: return "EMBER_ERR_FORMAT";
    case EMBER_ERR_UNSUPPORTED: return "EMBER_ERR_UNSUPPORTED";
    case EMBER_ERR_NOT_FOUND: return "EMBER_ERR_NOT_FOUND";
    case EMBER_ERR_NOMEM: return "EMBER_ERR_NOMEM";
    case EMBER_ERR_RANGE: return "EMBER_ERR_RANGE";
    case EMBER_ERR_INTERNAL: return "EMBER_ERR_INTERNAL";
    }
    return "EMBER_ERR_UNKNOWN";
}
