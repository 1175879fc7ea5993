/*
 * ember.h — the public C API of libember.
 *
 * Owns: status codes, error messages, and (as the runtime lands) opaque
 * handles for models, contexts and batches. Must not expose internal structs.
 *
 * Conventions: every function that can fail returns ember_status; on failure
 * a human-readable message naming the file, field or byte offset at fault is
 * available from ember_last_error() on the same thread.
 */
#ifndef EMBER_H
#define EMBER_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_VERSION "0.1.0"

typedef enum ember_status {
    EMBER_OK = 0,
    EMBER_ERR_INVALID_ARG,   /* caller passed a bad argument */
    EMBER_ERR_IO,            /* open/read/mmap/write failed */
    EMBER_ERR_FORMAT,        /* malformed input file or data */
    EMBER_ERR_UNSUPPORTED,   /* well-formed but not supported (type, arch, version) */
    EMBER_ERR_NOT_FOUND,     /* key, tensor or item absent */
    EMBER_ERR_NOMEM,         /* allocation failed or would exceed a limit */
    EMBER_ERR_RANGE,         /* value out of range (e.g. prompt longer than context) */
    EMBER_ERR_INTERNAL,      /* broken invariant inside ember */
} ember_status;

/* Short constant name of a status ("EMBER_ERR_FORMAT"). Never NULL. */
const char *ember_status_name(ember_status s);

/* Message of the last error set on this thread ("" if none). The pointer stays
 * valid until the next ember call on this thread that sets an error. */
const char *ember_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* EMBER_H */
