/*
 * signals.c — graceful shutdown on SIGINT/SIGTERM for `ember serve`.
 *
 * The signals are blocked in every thread (call server_block_signals before
 * creating any: model thread pools, the engine, libmicrohttpd) and taken
 * synchronously with sigwait by the main thread, so no handler runs inside
 * a lock. Must not: do the shutdown itself (the caller orders it).
 */
#include "server/signals.h"

#include <signal.h>
#include <pthread.h>

void server_block_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int server_wait_for_signal(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {}
    return sig;
}
