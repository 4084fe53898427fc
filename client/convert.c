/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capdir.h"
#include "convert.h"
#include "datconvert.h"
#include "message.h"
#include "perfetto.h"
#include "replay.h"
#include "util.h"

static bool has_suffix(const char *s, const char *suffix) {
        size_t n = strlen(s), k = strlen(suffix);

        return n >= k && streq(s + n - k, suffix);
}

static void fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}

/* OUT's directory and name; an OUT that exists (a link included) is refused, never replaced. */
static int output_open(const char *out, int *ret_dirfd, char **ret_name) {
        int r = capdir_open(out, ret_dirfd, ret_name);

        if (r < 0)
                return log_error_errno(r, "cannot write '%s': %m", out);
        if (faccessat(*ret_dirfd, *ret_name, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
                log_error("'%s' exists: tpctl convert does not replace a file.", out);
                log_hint("Name another file, or remove it.");
                return -EEXIST;
        }
        return 0;
}

/* The records of the capture, as `tpctl replay IN` prints them in a child, through a pipe, each to
 * the writer: memory stays bounded whatever the capture's size. The trace holds what the capture
 * holds: it is made as a capture's files are (capdir.h), 0600 under a private name, and takes OUT's
 * name only once whole, never over a file that is there. */
static int convert(const char *in, const char *out) {
        _cleanup_close_ int ofd = -1, dirfd = -1;
        _cleanup_(fclosep) FILE *f = NULL;
        _cleanup_free_ char *line = NULL, *name = NULL, *tmp = NULL;
        PerfettoWriter *w = NULL;
        int fds[2], status = EXIT_FAILURE, child, r;
        size_t size = 0;
        ssize_t n;
        pid_t pid;

        if (output_open(out, &dirfd, &name) < 0)
                return EXIT_FAILURE;
        ofd = capdir_mktemp(dirfd, ".tpctl-convert-", O_WRONLY, &tmp);
        if (ofd < 0)
                return log_error_errno(ofd, "cannot create a file next to '%s': %m", out), EXIT_FAILURE;
        if (pipe2(fds, O_CLOEXEC) < 0) {
                log_error_errno(-errno, "cannot make a pipe: %m");
                goto fail;
        }
        pid = fork();
        if (pid < 0) {
                log_error_errno(-errno, "cannot fork: %m");
                safe_close(fds[0]);
                safe_close(fds[1]);
                goto fail;
        }
        if (pid == 0) {
                safe_close(fds[0]);
                _exit(replay_file(in, &(ReplayOptions){ .out_fd = fds[1] }));
        }
        safe_close(fds[1]);
        f = fdopen(fds[0], "r");
        if (!f) {
                safe_close(fds[0]);
                r = -ENOMEM;
        } else
                r = perfetto_writer_new(ofd, &w);
        while (r >= 0 && (n = getline(&line, &size, f)) > 0)
                r = perfetto_writer_add_line(w, line, (size_t) n);
        /* A read that failed is not the end: the child, which then gets EPIPE, ends with 0. */
        if (r >= 0 && f && ferror(f))
                r = -EIO;
        /* A writer that failed leaves the child to an EPIPE, which ends it. */
        if (f)
                fclose(TAKE_PTR(f));
        while (waitpid(pid, &child, 0) < 0)
                if (errno != EINTR) {
                        child = -1;
                        break;
                }
        if (r < 0) {
                log_error_errno(r, "cannot write '%s': %m", out);
                goto fail;
        }
        if (child == -1 || !WIFEXITED(child)) {
                log_error("the replay of '%s' ended %s%s", in, child == -1 ? "unseen" : "by signal ",
                          child == -1 ? "" : sigabbrev_np(WTERMSIG(child)) ?: "?");
                goto fail;
        }
        if (WEXITSTATUS(child) != EXIT_SUCCESS) {
                status = WEXITSTATUS(child); /* the child said why */
                goto fail;
        }
        r = perfetto_writer_finish(w);
        if (r >= 0)
                r = capdir_move(dirfd, tmp, dirfd, name, false);
        if (r < 0) {
                log_error_errno(r, "cannot write '%s': %m", out);
                goto fail;
        }
        perfetto_writer_free(w);
        return EXIT_SUCCESS;

fail:
        perfetto_writer_free(w);
        (void) unlinkat(dirfd, tmp, 0);
        return status;
}

/* NDJSON to a trace-cmd data file (datconvert.c), as a capture's files are written. */
static int convert_dat(const char *in, const char *out) {
        _cleanup_close_ int dirfd = -1;
        _cleanup_free_ char *name = NULL;

        if (output_open(out, &dirfd, &name) < 0)
                return EXIT_FAILURE;
        return convert_to_dat(in, dirfd, name);
}

int convert_verb(const CommonOptions *c, char **args, size_t n) {
        (void) n;
        if (c->format && !streq(c->format, "perfetto") && !streq(c->format, "dat"))
                return usage_error("--format takes perfetto or dat, not '%s'", c->format);
        if (c->format ? streq(c->format, "dat") : has_suffix(args[1], ".dat"))
                return convert_dat(args[0], args[1]);
        if (!c->format && !has_suffix(args[1], ".perfetto-trace") && !has_suffix(args[1], ".pftrace"))
                return usage_error("cannot tell the format to write '%s' in: name it *.perfetto-trace, "
                                   "*.pftrace or *.dat, or give --format=perfetto or --format=dat",
                                   args[1]);
        return convert(args[0], args[1]);
}
