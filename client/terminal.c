/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "terminal.h"
#include "util.h"

static int parse_colors(const char *s) {
        static const char *const yes[] = { "1", "yes", "y", "true", "t", "on", "16", "256", "24bit" };
        static const char *const no[] = { "0", "no", "n", "false", "f", "off" };

        for (size_t i = 0; i < ELEMENTSOF(yes); i++)
                if (strcasecmp(s, yes[i]) == 0)
                        return 1;
        for (size_t i = 0; i < ELEMENTSOF(no); i++)
                if (strcasecmp(s, no[i]) == 0)
                        return 0;
        return -1;
}

bool terminal_colors(int fd) {
        static int cached[3] = { -1, -1, -1 };
        const char *e;
        int r;

        if (fd < 1 || fd > 2)
                return false;
        if (cached[fd] >= 0)
                return cached[fd];

        e = getenv("NO_COLOR"); /* https://no-color.org: set and not empty */
        if (e && *e)
                r = 0;
        else if ((e = getenv("SYSTEMD_COLORS")) && parse_colors(e) >= 0)
                r = parse_colors(e);
        else if ((e = getenv("TERM")) && streq(e, "dumb"))
                r = 0;
        else
                r = isatty(fd);
        cached[fd] = r;
        return r;
}

const char *terminal_color(int fd, const char *ansi) {
        return terminal_colors(fd) ? ansi : "";
}

size_t terminal_json_safe(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) s[i];

                if ((c < 0x20 && c != '\n') || c == 0x7f ||
                    (c == 0xc2 && i + 1 < n && (unsigned char) s[i + 1] >= 0x80 &&
                     (unsigned char) s[i + 1] <= 0x9f))
                        return i;
        }
        return n;
}

size_t terminal_json_escape(const char *s, size_t n, char out[static 6], size_t *ret_used) {
        static const char hex[] = "0123456789abcdef";
        unsigned char c = (unsigned char) s[0];

        if (c == 0xc2 && n > 1 && (unsigned char) s[1] >= 0x80 && (unsigned char) s[1] <= 0x9f) {
                c = (unsigned char) s[1];
                *ret_used = 2;
        } else if (c == 0x7f)
                *ret_used = 1;
        else {
                *ret_used = 1;
                out[0] = c < 0x20 && c != '\n' ? ' ' : (char) c;
                return 1;
        }
        memcpy(out, "\\u00", 4);
        out[4] = hex[c >> 4];
        out[5] = hex[c & 15];
        return 6;
}

static pid_t pager_pid;

static void pager_exec(void) {
        const char *pager = getenv("SYSTEMD_PAGER");
        const char *less = getenv("SYSTEMD_LESS");

        if (!pager)
                pager = getenv("PAGER");
        (void) setenv("LESS", less ?: "FRSXMK", 1);
        if (pager) {
                execl("/bin/sh", "sh", "-c", pager, (char *) NULL);
                _exit(EXIT_FAILURE);
        }
        execlp("pager", "pager", (char *) NULL);
        execlp("less", "less", (char *) NULL);
        execlp("more", "more", (char *) NULL);

        /* No pager at all: be cat. */
        for (;;) {
                char buf[65536];
                ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));

                if (n <= 0 || write(STDOUT_FILENO, buf, (size_t) n) != n)
                        _exit(n == 0 ? EXIT_SUCCESS : EXIT_FAILURE);
        }
}

bool pager_open(bool no_pager) {
        const char *pager = getenv("SYSTEMD_PAGER");
        int fd[2];
        pid_t pid;

        if (no_pager || pager_pid > 0 || !isatty(STDOUT_FILENO))
                return false;
        if (!pager)
                pager = getenv("PAGER");
        if (pager && (!*pager || streq(pager, "cat")))
                return false;

        /* Colour is decided for the terminal the pager writes to, before stdout becomes a pipe. */
        (void) terminal_colors(STDOUT_FILENO);
        if (fflush(stdout) != 0 || pipe2(fd, O_CLOEXEC) < 0)
                return false;
        pid = fork();
        if (pid < 0) {
                safe_close(fd[0]);
                safe_close(fd[1]);
                return false;
        }
        if (pid == 0) {
                if (dup2(fd[0], STDIN_FILENO) < 0)
                        _exit(EXIT_FAILURE);
                pager_exec();
        }
        if (dup2(fd[1], STDOUT_FILENO) < 0) {
                /* Keep the terminal: the pager gets EOF and ends. */
                safe_close(fd[0]);
                safe_close(fd[1]);
                (void) waitpid(pid, NULL, 0);
                return false;
        }
        safe_close(fd[0]);
        safe_close(fd[1]);
        /* A person quitting the pager early is not an error: writes then fail with EPIPE. */
        (void) signal(SIGPIPE, SIG_IGN);
        pager_pid = pid;
        return true;
}

int pager_close(void) {
        int r = 1;

        if (pager_pid <= 0)
                return 0;
        errno = 0;
        if ((fflush(stdout) != 0 || ferror(stdout)) && errno != EPIPE)
                r = errno > 0 ? -errno : -EIO;
        (void) fclose(stdout);
        (void) waitpid(pager_pid, NULL, 0);
        pager_pid = 0;
        return r;
}
