/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "command.h"
#include "message.h"
#include "tpd-protocol.h"
#include "util.h"

/* The exit status of a command that could not be run, as a shell's: not found, or not runnable. */
#define COMMAND_NOT_FOUND 127
#define COMMAND_NOT_RUNNABLE 126

static const int forwarded_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };

static volatile pid_t forward_pid = -1;

int command_spawn(char **argv, Command *ret) {
        int pipefd[2];
        pid_t pid;

        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return log_error_errno(-errno, "cannot start '%s': %m", argv[0]);
        fflush(NULL);
        pid = fork();
        if (pid < 0) {
                int r = -errno;

                safe_close(pipefd[0]);
                safe_close(pipefd[1]);
                return log_error_errno(r, "cannot start '%s': %m", argv[0]);
        }
        if (pid == 0) {
                char go = 0;
                ssize_t n;

                close(pipefd[1]);
                /* tpctl ignores SIGPIPE for itself: the command gets the default, as from a shell. */
                (void) signal(SIGPIPE, SIG_DFL);
                do
                        n = read(pipefd[0], &go, 1);
                while (n < 0 && errno == EINTR);
                if (n != 1)
                        _exit(COMMAND_NOT_FOUND); /* the stream did not start: nothing runs */
                execvp(argv[0], argv);
                fprintf(stderr, "tpctl: cannot run '%s': %s\n", argv[0], strerror(errno));
                _exit(errno == ENOENT ? COMMAND_NOT_FOUND : COMMAND_NOT_RUNNABLE);
        }
        close(pipefd[0]);
        *ret = COMMAND_NULL;
        ret->pid = pid;
        ret->go_fd = pipefd[1];
        return 0;
}

static void command_on_signal(int sig, siginfo_t *si, void *context) {
        /* From the terminal (SI_KERNEL) the command, in tpctl's process group, got it too. */
        if (si->si_code <= 0 && forward_pid > 0)
                (void) kill(forward_pid, sig);
}

void command_forward_signals(Command *c) {
        struct sigaction sa = { .sa_sigaction = command_on_signal, .sa_flags = SA_SIGINFO | SA_RESTART };

        forward_pid = c->pid;
        for (size_t i = 0; i < ELEMENTSOF(forwarded_signals); i++)
                (void) sigaction(forwarded_signals[i], &sa, NULL);
}

int command_start(char **argv, Command *ret) {
        int r = command_spawn(argv, ret);

        if (r >= 0)
                command_forward_signals(ret);
        return r;
}

int command_start_streamed(char **argv, Command *ret, CommandCallFn call, void *userdata) {
        int fd = -1, r;

        if (command_start(argv, ret) < 0)
                return EXIT_FAILURE;
        r = call(userdata, ret->pid, &fd);
        /* The stream is live: what the command does from its exec on is traced. */
        if (r == 0 && command_release(ret, fd) < 0)
                r = EXIT_FAILURE;
        if (r != 0)
                (void) command_finish(ret);
        return r;
}

static void *command_wait(void *userdata) {
        Command *c = userdata;
        TpdFrame sync = { .type = TPD_FRAME_SYNC };
        int status = 0;

        while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR)
                ;
        c->status = status;
        /* Everything it wrote is in the kernel's buffers now: tpd reads it out before the notice. A
         * tpd gone already ends the stream anyway. */
        (void) write_all(c->sync_fd, &sync, sizeof(sync));
        return NULL;
}

int command_release(Command *c, int sync_fd) {
        char go = 'g';
        int r;

        c->sync_fd = sync_fd;
        r = write_all(c->go_fd, &go, 1);
        c->go_fd = safe_close(c->go_fd);
        if (r < 0)
                return log_error_errno(r, "cannot start the command: %m");
        r = -pthread_create(&c->waiter, NULL, command_wait, c);
        if (r < 0)
                return log_error_errno(r, "cannot wait for the command: %m");
        c->waiting = true;
        return 0;
}

int command_finish(Command *c) {
        int status = 0, sig;
        sigset_t set;

        if (c->pid <= 0)
                return EXIT_FAILURE;
        if (c->waiting)
                (void) pthread_join(c->waiter, NULL);
        else {
                c->go_fd = safe_close(c->go_fd); /* a held command exits without exec */
                while (waitpid(c->pid, &c->status, 0) < 0 && errno == EINTR)
                        ;
        }
        status = c->status;
        forward_pid = -1;
        if (WIFEXITED(status))
                return WEXITSTATUS(status);
        if (!WIFSIGNALED(status))
                return EXIT_FAILURE;
        /* As strace does: die of the same signal, without a core of tpctl's own. */
        sig = WTERMSIG(status);
        fflush(NULL);
        (void) setrlimit(RLIMIT_CORE, &(struct rlimit){ 0, 0 });
        (void) signal(sig, SIG_DFL);
        sigemptyset(&set);
        sigaddset(&set, sig);
        (void) sigprocmask(SIG_UNBLOCK, &set, NULL);
        (void) raise(sig);
        return 128 + sig;
}
