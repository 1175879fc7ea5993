/*
 * status.h — setting and reading error messages (thread-local).
 *
 * Owns: the per-thread last-error buffer behind ember_last_error().
 * Must not: allocate, log, or abort.
 */
#ifndef EMBER_BASE_STATUS_H
#define EMBER_BASE_STATUS_H

#include "ember.h"

/* Record a formatted message for `s` on this thread and return `s`, so that
 * callers can write `return ember_error(EMBER_ERR_FORMAT, "...", ...)`.
 * Messages longer than 1023 bytes are truncated. */
ember_status ember_error(ember_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clear this thread's last error. */
void ember_clear_error(void);

#endif
