/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

/*
 * The command of `tpctl stream -- CMD [ARGS...]`: started as the caller (environment, terminal,
 * process group), held before exec until the stream is live, so that its first system call is
 * traced. A thread waits for it and, once it exited, sends tpd a SYNC frame on the stream's socket
 * (include/tpd-protocol.h): the "sync" notice that comes back follows every record it wrote.
 * Signals sent to tpctl by a process go on to the command; those the terminal sends reach the
 * command from the terminal itself. tpctl then exits with the command's status, or of the same
 * signal.
 */

typedef struct Command {
        pid_t pid;
        int go_fd; /* the held child reads its go here: -1 once released or aborted */
        pthread_t waiter;
        bool waiting;
        int sync_fd;
        int status; /* waitpid()'s, once the waiter is joined */
} Command;

#define COMMAND_NULL ((Command){ .pid = -1, .go_fd = -1, .sync_fd = -1 })

/* Forks argv[0] (looked up in $PATH), held before exec. 0, or a negative errno (printed). */
int command_spawn(char **argv, Command *ret);
/* command_spawn() and command_forward_signals(): 0, or a negative errno (printed). */
int command_start(char **argv, Command *ret);
/* command_start(), then call(userdata, pid) asks tpd for the stream of it (0 with the stream's
 * socket in *ret_fd, or tpctl's exit status after printing why), and the command goes on, released
 * on that socket. 0, or tpctl's exit status with the command finished. */
typedef int (*CommandCallFn)(void *userdata, pid_t pid, int *ret_fd);
int command_start_streamed(char **argv, Command *ret, CommandCallFn call, void *userdata);
/* Lets it exec; from then on a thread waits for it and sends SYNC on sync_fd when it exits. */
int command_release(Command *c, int sync_fd);
/* Signals to tpctl go on to the command (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2). */
void command_forward_signals(Command *c);
/* Waits for the command to exit (a held one exits without exec) and returns tpctl's status for it:
 * its exit status, or after a signal, tpctl takes the same signal (128 + its number if it
 * survives). */
int command_finish(Command *c);
