/*
 * signals.h — SIGINT/SIGTERM taken by sigwait in the main thread (signals.c).
 */
#ifndef EMBER_SERVER_SIGNALS_H
#define EMBER_SERVER_SIGNALS_H

/* Block SIGINT and SIGTERM in the calling thread (and so in every thread it
 * creates afterwards); ignore SIGPIPE (a client that hangs up). */
void server_block_signals(void);
/* Wait for SIGINT or SIGTERM; returns the signal number. */
int server_wait_for_signal(void);

#endif
