/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "capdir.h"
#include "connection.h"
#include "datfile.h"
#include "log.h"
#include "loss.h"
#include "output.h"
#include "record.h"
#include "tpd-protocol.h"

#define READ_SIZE (1024U * 1024U)
/* Seconds tpd gets to send a recording's last names once asked: one read of the kernel's table. */
#define RECORD_LAST_NAMES_WAIT 0.5
#define PAGE_MISSED_STORED (1ULL << 30)
#define PAGE_MISSED_EVENTS (1ULL << 31)

static volatile sig_atomic_t stop_requested;

static int exit_status_oom(void) {
        log_oom();
        return EXIT_FAILURE;
}

static void on_signal(int sig) {
        (void) sig;
        stop_requested = 1;
}

static double now_s(void) {
        return (double) now_usec(CLOCK_MONOTONIC) / 1e6;
}

RecordFormat record_format_for(const char *path) {
        const char *dot = strrchr(path, '.');

        if (dot && (streq(dot, ".ndjson") || streq(dot, ".json") || streq(dot, ".jsonl")))
                return RECORD_FORMAT_NDJSON;
        return RECORD_FORMAT_DAT;
}

typedef struct CaptureFile {
        char *name;
        struct stat st; /* to remove it with --keep only while it is the file written */
} CaptureFile;

typedef struct Capture {
        const RecordOptions *o;
        int dir_fd; /* the output's directory: every name below is in it */
        char *name; /* the output's name in it */
        /* Files: the current one and those finished, oldest first. */
        CaptureFile *done;
        size_t n_done;
        unsigned serial;
        char *current;
        double file_start;
        uint64_t finished_bytes; /* of the files finished and kept or not */
        /* A data file's, or an NDJSON file's descriptor. */
        DatMeta *meta;
        DatFile *dat;
        int fd;
        uint64_t fd_bytes;
        /* Counters for the status line and the summary. */
        uint64_t records;
        uint64_t lost;
        uint64_t lost_unknown; /* losses flagged without a count */
        uint64_t bytes;
        bool size_reached;
        bool names_only; /* a data file at --size: of what follows, only names go in */
        bool tty;        /* stderr shows a status line */
} Capture;

static bool capture_rotates(const Capture *c) {
        return c->o->rotate_size || c->o->rotate_time > 0;
}

/* The output's name split at its extension: "cap.dat" is "cap" and ".dat". */
static size_t name_stem_len(const char *name) {
        const char *dot = strrchr(name, '.');

        return dot ? (size_t) (dot - name) : strlen(name);
}

/* The name of the next file: the output itself, or with rotation "STEM-NNNN.EXT". */
static int capture_next_name(Capture *c, char **ret) {
        size_t stem = name_stem_len(c->name);

        if (!capture_rotates(c))
                return (*ret = strdup(c->name)) ? 0 : -ENOMEM;
        c->serial++;
        if (asprintf(ret, "%.*s-%04u%s", (int) stem, c->name, c->serial, c->name + stem) < 0)
                return -ENOMEM;
        return 0;
}

/* Before anything is recorded: a name the capture would write must not exist, unless --force (see
 * docs/operating.md, "Recording"). Rotation refuses any "STEM-NNNN.EXT", as a run of the same -o made. */
static int capture_check_names(const Capture *c) {
        _cleanup_free_ char *found = NULL, *stem = NULL;
        struct stat st;
        int r;

        if (!capture_rotates(c)) {
                if (fstatat(c->dir_fd, c->name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        return errno == ENOENT ? 0
                                               : log_error_errno(negative_errno(), "cannot look at %s: %m",
                                                                 c->o->output);
                if (S_ISDIR(st.st_mode))
                        return log_error_errno(-EISDIR, "cannot record into %s: %m", c->o->output);
                if (c->o->force)
                        return 0;
                log_error("%s exists: tpctl record does not replace a file", c->o->output);
                log_hint("Name another file, remove it, or give --force to replace it.");
                return -EEXIST;
        }
        if (c->o->force)
                return 0;
        stem = strndup(c->name, name_stem_len(c->name));
        if (!stem)
                return log_oom();
        r = capdir_find_rotated(c->dir_fd, stem, c->name + strlen(stem), &found);
        if (r < 0)
                return log_error_errno(r, "cannot read the directory of %s: %m", c->o->output);
        if (r == 0)
                return 0;
        log_error("'%s' exists next to %s: tpctl record does not replace the files of a rotation", found,
                  c->o->output);
        log_hint("Name another file, remove them, or give --force to replace them.");
        return -EEXIST;
}

/* An NDJSON file, written in place (it can be followed while recorded): created afresh, or with
 * --force made under a private name and renamed over what is there, never written through. */
static int capture_create_ndjson(Capture *c, const char *name) {
        _cleanup_free_ char *tmp = NULL;
        int fd, r;

        if (!c->o->force)
                return capdir_create(c->dir_fd, name, O_WRONLY);
        fd = capdir_mktemp(c->dir_fd, ".tpctl-record-", O_WRONLY, &tmp);
        if (fd < 0)
                return fd;
        r = capdir_move(c->dir_fd, tmp, c->dir_fd, name, true);
        if (r < 0) {
                (void) unlinkat(c->dir_fd, tmp, 0);
                safe_close(fd);
                return r;
        }
        return fd;
}

static int capture_open(Capture *c) {
        _cleanup_free_ char *name = NULL;
        int r = capture_next_name(c, &name);

        if (r < 0)
                return log_oom();
        c->file_start = now_s();
        if (c->o->format == RECORD_FORMAT_DAT)
                r = datfile_new(c->meta, &c->dat);
        else {
                r = capture_create_ndjson(c, name);
                if (r >= 0) {
                        c->fd = r;
                        c->fd_bytes = 0;
                }
        }
        if (r == -EEXIST)
                return log_error_errno(r,
                                       "cannot create %s: it exists (made since the recording started); "
                                       "not replaced without --force",
                                       name);
        if (r < 0)
                return log_error_errno(r, "cannot create %s: %m", name);
        c->current = TAKE_PTR(name);
        return 0;
}

/* Finishes the current file and drops the oldest beyond --keep: only files this run wrote, and only
 * while they are the files it wrote. */
static int capture_close(Capture *c) {
        _cleanup_free_ char *name = TAKE_PTR(c->current);
        CaptureFile *done;
        struct stat st = {};
        int r = 0;

        if (!name)
                return 0;
        if (c->dat)
                r = datfile_finish(TAKE_PTR(c->dat), c->dir_fd, name, c->o->force, &st);
        else if (c->fd >= 0) {
                if (fsync(c->fd) < 0 && errno != EINVAL)
                        r = negative_errno();
                if (r >= 0 && fstat(c->fd, &st) < 0)
                        r = negative_errno();
                /* In place already: on an error it keeps the lines written, and the message says
                 * that the rest is missing. */
                if (close(TAKE_FD(c->fd)) < 0 && r >= 0)
                        r = negative_errno();
        }
        if (r == -EEXIST)
                return log_error_errno(r,
                                       "cannot finish %s: the name was taken while recording; not replaced "
                                       "without --force, the file's records are lost",
                                       name);
        if (r < 0)
                return log_error_errno(r, "cannot write %s: %m", name);
        c->finished_bytes += (uint64_t) st.st_size;
        done = reallocarray(c->done, c->n_done + 1, sizeof(CaptureFile));
        if (!done)
                return log_oom();
        c->done = done;
        c->done[c->n_done++] = (CaptureFile){ .name = TAKE_PTR(name), .st = st };
        while (c->o->keep > 0 && c->n_done > c->o->keep) {
                r = capdir_remove_file(c->dir_fd, c->done[0].name, &c->done[0].st);
                if (r == -ESTALE)
                        log_error("not removing %s: it is no longer the file tpctl wrote", c->done[0].name);
                else if (r < 0 && r != -ENOENT)
                        log_error_errno(r, "cannot remove %s: %m", c->done[0].name);
                free(c->done[0].name);
                memmove(c->done, c->done + 1, (c->n_done - 1) * sizeof(CaptureFile));
                c->n_done--;
        }
        return 0;
}

static uint64_t capture_current_size(const Capture *c) {
        if (c->dat)
                return dat_meta_header_size(c->meta) + datfile_data_size(c->dat);
        return c->fd_bytes;
}

/* Whether the current file is to be finished before n more bytes: it holds something and would
 * outgrow --rotate-size, or its --rotate-time is up. A file with nothing in it is kept, its time
 * started again: no empty files, and no deadline left in the past to wait for. */
static bool capture_rotation_due(Capture *c, uint64_t n) {
        uint64_t size = capture_current_size(c), empty = c->dat ? dat_meta_header_size(c->meta) : 0;
        double now = now_s();
        bool timed = c->o->rotate_time > 0 && now - c->file_start >= c->o->rotate_time;

        if (size <= empty) {
                if (timed)
                        c->file_start = now;
                return false;
        }
        return timed || (c->o->rotate_size && size + n > c->o->rotate_size);
}

/* Before n more bytes go to the current file: rotates when the file would outgrow its size or its
 * time is up; notes when the whole capture would outgrow --size. Returns 1 to write, 0 to stop. */
static int capture_room(Capture *c, size_t n) {
        int r;

        if (c->o->max_size && c->finished_bytes + capture_current_size(c) + n > c->o->max_size) {
                c->size_reached = true;
                return 0;
        }
        if (capture_rotation_due(c, n)) {
                r = capture_close(c);
                if (r < 0)
                        return r;
                r = capture_open(c);
                if (r < 0)
                        return r;
        }
        return 1;
}

/* A notice of tpd's (the instance was changed behind its back and put back): a trace-cmd data file
 * has no place for it, so it is a warning on stderr, its text escaped. */
static int capture_notice(Capture *c, const uint8_t *payload, size_t length) {
        _cleanup_free_ char *text = strndup((const char *) payload, length);
        json_tokener *tok;
        json_object *o, *v;
        const char *notice = NULL, *message = NULL;
        int64_t ts = -1;

        if (!text)
                return log_oom();
        tok = json_tokener_new();
        if (!tok)
                return log_oom();
        o = json_tokener_parse_ex(tok, text, (int) strlen(text));
        json_tokener_free(tok);
        if (o && json_object_object_get_ex(o, "notice", &v) && json_object_is_type(v, json_type_string))
                notice = json_object_get_string(v);
        if (o && json_object_object_get_ex(o, "message", &v) && json_object_is_type(v, json_type_string))
                message = json_object_get_string(v);
        if (o && json_object_object_get_ex(o, "ts", &v) && json_object_is_type(v, json_type_int))
                ts = json_object_get_int64(v);
        if (notice)
                fprintf(stderr, "%stpctl: tpd notice %s at ts %" PRId64 ": %s\n", c->tty ? "\r\033[K" : "",
                        output_escape(notice), ts, output_escape(message ?: ""));
        else
                fprintf(stderr, "%stpctl: tpd notice: %s\n", c->tty ? "\r\033[K" : "", output_escape(text));
        json_object_put(o);
        return 0;
}

/* The longest "pid comm\n" line a name adds to a data file. */
#define CAPTURE_NAME_MAX 32U

static int capture_frame(Capture *c, const TpdFrame *f, const uint8_t *payload, size_t page_size) {
        uint64_t v[2];
        int r;

        /* Past --size, the pages, losses and notices that were under way are not the file's; the
         * names of its tasks are, while they fit. */
        if (c->names_only &&
            (f->type != TPD_FRAME_COMM ||
             c->finished_bytes + capture_current_size(c) + CAPTURE_NAME_MAX > c->o->max_size))
                return 0;
        switch (f->type) {
        case TPD_FRAME_FILE:
                r = dat_meta_add_file(c->meta, payload, f->length);
                if (r == -EBADMSG)
                        return log_error_errno(-EBADMSG, "tpd sent a file tpctl does not take");
                return r < 0 ? log_error_errno(r, "cannot keep a file tpd sent: %m") : 0;
        case TPD_FRAME_COMM:
                return dat_meta_add_comm(c->meta, (int) f->arg, (const char *) payload, f->length) == -ENOMEM
                               ? log_oom()
                               : 0;
        case TPD_FRAME_LOST:
                if (f->length < sizeof(v))
                        return log_error_errno(-EBADMSG, "tpd sent a malformed loss");
                memcpy(v, payload, sizeof(v));
                c->lost += v[0];
                if (c->dat)
                        datfile_note_lost(c->dat, f->cpu, f->arg == TPD_LOST_OVERRUN ? v[0] : 0,
                                          f->arg == TPD_LOST_OVERRUN ? 0 : v[0]);
                return 0;
        case TPD_FRAME_PAGE: {
                uint64_t commit;

                if (f->length != page_size)
                        return log_error_errno(-EBADMSG, "tpd sent a page of %u bytes, not %zu", f->length,
                                               page_size);
                r = capture_room(c, page_size);
                if (r <= 0)
                        return r;
                memcpy(&commit, payload + 8, 8);
                if ((commit & PAGE_MISSED_EVENTS) && !(commit & PAGE_MISSED_STORED))
                        c->lost_unknown++;
                r = datfile_add_page(c->dat, f->cpu, payload, f->arg);
                if (r < 0)
                        return log_error_errno(r, "cannot write %s: %m", c->current);
                c->records += f->arg;
                c->bytes += page_size;
                return 0;
        }
        case TPD_FRAME_NOTICE:
                return capture_notice(c, payload, f->length);
        default:
                return log_error_errno(-EBADMSG, "tpd sent a frame of unknown type %u", f->type);
        }
}

/* Whether n more bytes fit the current file and the capture without a rotation or a stop. */
static bool capture_fits(const Capture *c, uint64_t n) {
        if (c->o->max_size && c->finished_bytes + c->fd_bytes + n > c->o->max_size)
                return false;
        return !c->o->rotate_size || c->fd_bytes + n <= c->o->rotate_size;
}

static void capture_count_line(Capture *c, const uint8_t *line, size_t n) {
        const uint8_t *l = memmem(line, n, "\"lost\":", 7);

        if (l && memmem(line, n, "\"cause\":", 8))
                c->lost += strtoull((const char *) l + 7, NULL, 10);
        else
                c->records++;
}

/* NDJSON: whole lines to the current file, one write() for each run of lines that fits it,
 * rotating between lines. A line that does not fit goes to a new file, and alone into an empty
 * one when it is longer than --rotate-size: every line is taken once it is complete. */
static int capture_lines(Capture *c, const uint8_t *data, size_t len, size_t *ret_used) {
        size_t used = 0, run = 0;
        int r = capture_room(c, 0); /* rotation by time */

        *ret_used = 0;
        if (r <= 0)
                return r;
        for (;;) {
                const uint8_t *line = data + used + run, *nl = memchr(line, '\n', len - used - run);
                size_t n = nl ? (size_t) (nl - line) + 1 : 0;

                if (nl && capture_fits(c, run + n)) {
                        capture_count_line(c, line, n);
                        run += n;
                        continue;
                }
                if (run > 0) {
                        r = write_all(c->fd, data + used, run);
                        if (r < 0) {
                                /* Whole lines only: a part written before a full disk goes. */
                                (void) ftruncate(c->fd, (off_t) c->fd_bytes);
                                return log_error_errno(r, "cannot write %s: %m", c->current);
                        }
                        c->fd_bytes += run;
                        c->bytes += run;
                        used += run;
                        *ret_used = used;
                        run = 0;
                }
                if (!nl)
                        return 1;
                /* Stops at --size, or rotates unless the file is empty: then the line is taken
                 * whatever its length (as the next one, written with the run it starts). */
                r = capture_room(c, n);
                if (r <= 0)
                        return r;
                capture_count_line(c, line, n);
                run = n;
        }
}

static void status_line(const Capture *c, double start, bool final) {
        double t = now_s() - start;

        fprintf(stderr, "\r%s %" PRIu64 " records, %.1f MiB, %.0f records/s, lost %" PRIu64 "%s\033[K%s",
                final ? "recorded" : "recording:", c->records, c->bytes / 1048576.0,
                t > 0 ? c->records / t : 0.0, c->lost,
                c->lost_unknown ? " and more (pages flag losses without a count)" : "", final ? "\n" : "");
}

static void capture_done(Capture *c) {
        if (c->dat)
                datfile_abort(TAKE_PTR(c->dat));
        safe_close(c->fd);
        c->fd = -1;
        c->meta = dat_meta_free(c->meta);
        for (size_t i = 0; i < c->n_done; i++)
                free(c->done[i].name);
        free(c->done);
        free(c->current);
        free(c->name);
        safe_close(c->dir_fd);
}

/* How long to sleep at most, in ms for ppoll(): -1 for no deadline, never less than 0. */
static int wait_ms(double deadline, double now) {
        if (deadline < 0)
                return -1;
        if (deadline <= now)
                return 0;
        return (int) MIN((deadline - now) * 1000, (double) INT_MAX / 2) + 1;
}

static double earliest(double a, double b) {
        return a < 0 ? b : b < 0 ? a : MIN(a, b);
}

int record_run(const char *socket_path, json_object *params, const RecordOptions *o) {
        _cleanup_(connection_done) Connection conn = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        struct sigaction sa = { .sa_handler = on_signal }, sa_ignore = { .sa_handler = SIG_IGN };
        sigset_t blocked, unblocked;
        _cleanup_(capture_done) Capture c = { .o = o, .fd = -1, .dir_fd = -1, .tty = isatty(STDERR_FILENO) };
        size_t page_size = 0, len = 0, cap = READ_SIZE;
        bool found;
        unsigned n_cpus = 0;
        int64_t flush_ms;
        double start, stop_at = 0, last_status = 0;
        bool closed = false, hung_up = false;
        uint8_t *buf = NULL;
        int r, status = EXIT_SUCCESS;

        (void) sigaction(SIGPIPE, &sa_ignore, NULL);
        (void) sigaction(SIGINT, &sa, NULL);
        (void) sigaction(SIGTERM, &sa, NULL);
        /* The stop signals are taken only inside ppoll(): one that comes while frames are written is
         * seen at the next wait, never lost between a check and the wait. */
        sigemptyset(&blocked);
        sigaddset(&blocked, SIGINT);
        sigaddset(&blocked, SIGTERM);
        (void) sigprocmask(SIG_BLOCK, &blocked, &unblocked);

        /* The output's directory is opened once, and its names checked before tpd is asked. */
        r = capdir_open(o->output, &c.dir_fd, &c.name);
        if (r == -EISDIR)
                return log_error("cannot record into %s: -o names a file", o->output), EXIT_FAILURE;
        if (r < 0)
                return log_error_errno(r, "cannot open the directory of %s: %m", o->output), EXIT_FAILURE;
        if (capture_check_names(&c) < 0)
                return EXIT_FAILURE;

        r = connection_call(&conn, socket_path,
                            o->format == RECORD_FORMAT_DAT ? TPD_METHOD("Record") : TPD_METHOD("Stream"),
                            params, true, &reply);
        if (r != 0)
                return r == 1 ? EXIT_FAILURE : TPD_EXIT_DAEMON_GONE;
        flush_ms = reply_int(reply.parameters, "flush_interval_ms", &found);
        if (!found)
                flush_ms = 100;
        if (o->format == RECORD_FORMAT_DAT) {
                int64_t frames;

                page_size = (size_t) reply_int(reply.parameters, "page_size", NULL);
                n_cpus = (unsigned) reply_int(reply.parameters, "cpus", NULL);
                if (page_size < 64 || page_size > (1U << 20) || n_cpus == 0 || n_cpus > 65536) {
                        log_error("tpd's reply to Record lacks a page size or CPU count");
                        return EXIT_FAILURE;
                }
                /* The frames that follow must be ones this tpctl reads. */
                frames = reply_int(reply.parameters, "frames", &found);
                if (frames != TPD_FRAMES_VERSION || !found) {
                        if (found)
                                log_error("tpd sends recording frames of version %" PRId64
                                          ", this tpctl reads version %d",
                                          frames, TPD_FRAMES_VERSION);
                        else
                                log_error("tpd's reply to Record names no frame version (an older tpd), "
                                          "this tpctl reads version %d",
                                          TPD_FRAMES_VERSION);
                        log_hint("use the tpctl of the same release as the running tpd");
                        return EXIT_FAILURE;
                }
                r = dat_meta_new(c.dir_fd, n_cpus, page_size, o->file_version, &c.meta);
                if (r >= 0)
                        r = dat_meta_set_kallsyms(c.meta, o->kallsyms);
                if (r < 0) {
                        log_error_errno(r, "cannot prepare %s: %m", o->output);
                        return EXIT_FAILURE;
                }
        }

        buf = malloc(cap);
        if (!buf)
                return exit_status_oom();
        len = varlink_buffer_pending(&conn.in);
        if (len > cap)
                len = 0; /* cannot be: a reply is smaller */
        memcpy(buf, conn.in.data + conn.in.consumed, len);

        start = now_s();
        r = capture_open(&c);
        if (r < 0) {
                status = EXIT_FAILURE;
                goto finish;
        }

        for (;;) {
                size_t used = 0;
                double now = now_s();
                struct pollfd pfd = { .fd = conn.fd, .events = POLLIN };
                int timeout_ms;
                ssize_t n;

                /* Frames or lines that are complete. */
                if (o->format == RECORD_FORMAT_DAT)
                        while (len - used >= sizeof(TpdFrame)) {
                                TpdFrame f;

                                memcpy(&f, buf + used, sizeof(f));
                                if (f.length > TPD_FRAME_MAX) {
                                        log_error("tpd sent a frame of %u bytes", f.length);
                                        status = EXIT_FAILURE;
                                        goto finish;
                                }
                                if (len - used - sizeof(f) < f.length) {
                                        if (sizeof(f) + f.length > cap) {
                                                uint8_t *b = realloc(buf, sizeof(f) + f.length);
                                                if (!b) {
                                                        status = exit_status_oom();
                                                        goto finish;
                                                }
                                                buf = b;
                                                cap = sizeof(f) + f.length;
                                        }
                                        break;
                                }
                                r = capture_frame(&c, &f, buf + used + sizeof(f), page_size);
                                if (r < 0) {
                                        status = EXIT_FAILURE;
                                        goto finish;
                                }
                                /* The page that did not fit is dropped, and the names follow. */
                                c.names_only = c.size_reached;
                                used += sizeof(f) + f.length;
                        }
                else {
                        r = capture_lines(&c, buf, len, &used);
                        if (r < 0) {
                                status = EXIT_FAILURE;
                                goto finish;
                        }
                }
                memmove(buf, buf + used, len - used);
                len -= used;

                if (closed || (c.size_reached && !c.names_only))
                        break;
                if (c.names_only && stop_at == 0)
                        stop_at = now; /* the pages are in: no flush interval to wait */
                if (stop_at > 0 && now >= stop_at) {
                        /* The pages are in: ask for the last names (include/tpd-protocol.h) and
                         * read until tpd closes, or give up after a while. */
                        if (hung_up || o->format != RECORD_FORMAT_DAT || shutdown(conn.fd, SHUT_WR) < 0)
                                break;
                        hung_up = true;
                        stop_at = now + RECORD_LAST_NAMES_WAIT;
                        continue;
                }
                if (stop_at == 0 && (stop_requested || (o->duration > 0 && now - start >= o->duration))) {
                        /* What was written until now reaches tpd's pages within a flush interval. */
                        stop_at = now + (flush_ms + 100) / 1000.0;
                        continue;
                }
                if (c.tty && now - last_status >= 1.0) {
                        status_line(&c, start, false);
                        last_status = now;
                }
                if (o->format == RECORD_FORMAT_DAT && o->rotate_time > 0 && !c.size_reached) {
                        /* Rotation by time, without waiting for a page. */
                        r = capture_room(&c, 0);
                        if (r < 0) {
                                status = EXIT_FAILURE;
                                goto finish;
                        }
                        c.names_only = c.size_reached;
                        if (c.size_reached)
                                continue;
                }

                /* Sleep until data, a signal (it interrupts ppoll()), or the next thing to do: no
                 * wake-ups while nothing happens. Every deadline is in the future here (a file's
                 * rotation time was just looked at): a past one would mean waiting forever. */
                {
                        double deadline = -1;

                        if (stop_at > 0)
                                deadline = stop_at;
                        else {
                                if (o->duration > 0)
                                        deadline = start + o->duration;
                                if (o->rotate_time > 0)
                                        deadline = earliest(deadline, c.file_start + o->rotate_time);
                        }
                        if (c.tty)
                                deadline = earliest(deadline, now + 1.0);
                        timeout_ms = wait_ms(deadline, now);
                }
                {
                        struct timespec ts = { timeout_ms / 1000, (long) (timeout_ms % 1000) * 1000000L };

                        r = ppoll(&pfd, 1, timeout_ms < 0 ? NULL : &ts, &unblocked);
                }
                if (r < 0 && errno != EINTR) {
                        log_error_errno(negative_errno(), "cannot wait for tpd: %m");
                        status = EXIT_FAILURE;
                        goto finish;
                }
                if (!(pfd.revents & (POLLIN | POLLHUP | POLLERR)))
                        continue;
                if (cap - len < READ_SIZE / 4) {
                        uint8_t *b;

                        /* Only an NDJSON line without its end holds more than a frame. */
                        if (o->format == RECORD_FORMAT_NDJSON && cap >= TPD_FRAME_MAX) {
                                log_error("tpd sent a line longer than %u MiB", TPD_FRAME_MAX >> 20);
                                status = EXIT_FAILURE;
                                goto finish;
                        }
                        b = realloc(buf, cap * 2);
                        if (!b) {
                                status = exit_status_oom();
                                goto finish;
                        }
                        buf = b;
                        cap *= 2;
                }
                n = read(conn.fd, buf + len, cap - len);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (n <= 0 && hung_up) {
                        closed = true; /* the last names are in */
                        continue;
                }
                if (n <= 0) {
                        log_error("tpd closed the recording");
                        status = TPD_EXIT_DAEMON_GONE;
                        closed = true;
                        continue; /* what arrived before is written */
                }
                len += (size_t) n;
        }

finish:
        r = capture_close(&c);
        if (r < 0 && status == EXIT_SUCCESS)
                status = EXIT_FAILURE;
        if (c.tty)
                status_line(&c, start, true);
        /* Files written, including those rotation removed since. */
        fprintf(stderr, "tpctl: %" PRIu64 " records in %u file%s, %" PRIu64 " lost%s%s\n", c.records,
                c.serial > 0 ? c.serial : (unsigned) c.n_done,
                (c.serial > 0 ? c.serial : c.n_done) == 1 ? "" : "s", c.lost,
                c.lost_unknown ? " (and more: some pages flag losses without a count)" : "",
                c.size_reached ? "; stopped at the size limit" : "");
        free(buf);
        return status;
}

static RecordOptions opt = { .kallsyms = true };
static const char *opt_format;

enum {
        ARG_OUTPUT,
        ARG_SIZE,
        ARG_FORMAT,
        ARG_ROTATE_SIZE,
        ARG_ROTATE_TIME,
        ARG_KEEP,
        ARG_FILE_VERSION,
        ARG_NO_KALLSYMS,
        ARG_FORCE,
};

#define RECORD_SHOWN "--output, --size, --format, --rotate-*, --keep, --file-version, --no-kallsyms, --force"

static const OptionSpec record_specs[] = {
        { "output", 'o', required_argument, ARG_OUTPUT, 0, RECORD_SHOWN },
        { "size", 0, required_argument, ARG_SIZE, 0, RECORD_SHOWN },
        { "format", 0, required_argument, ARG_FORMAT, 0, RECORD_SHOWN },
        { "rotate-size", 0, required_argument, ARG_ROTATE_SIZE, 0, RECORD_SHOWN },
        { "rotate-time", 0, required_argument, ARG_ROTATE_TIME, 0, RECORD_SHOWN },
        { "keep", 0, required_argument, ARG_KEEP, 0, RECORD_SHOWN },
        { "file-version", 0, required_argument, ARG_FILE_VERSION, 0, RECORD_SHOWN },
        { "no-kallsyms", 0, no_argument, ARG_NO_KALLSYMS, 0, RECORD_SHOWN },
        { "force", 0, no_argument, ARG_FORCE, 0, RECORD_SHOWN },
};

/* A positive size in MB (MiB), fractions allowed, as bytes. */
static int parse_megabytes(const char *s, uint64_t *ret) {
        double v;

        if (parse_decimal(s, 1e-6, 1e9, &v) < 0)
                return -EINVAL;
        *ret = (uint64_t) (v * 1048576.0);
        return *ret > 0 ? 0 : -EINVAL;
}

static int record_parse_option(const OptionSpec *spec, const char *arg) {
        int k;

        switch (spec->id) {
        case ARG_OUTPUT:
                opt.output = arg;
                return 0;
        case ARG_ROTATE_TIME:
                if (parse_seconds(arg, &opt.rotate_time) < 0)
                        return log_usage("invalid number of seconds '%s'", arg);
                return 0;
        case ARG_SIZE:
        case ARG_ROTATE_SIZE:
                if (parse_megabytes(arg, spec->id == ARG_SIZE ? &opt.max_size : &opt.rotate_size) < 0)
                        return log_usage("invalid size in MB '%s'", arg);
                return 0;
        case ARG_FORMAT:
                opt_format = arg;
                return 0;
        case ARG_KEEP:
                if (parse_int(arg, &k) < 0 || k < 1)
                        return log_usage("invalid number of files '%s'", arg);
                opt.keep = (unsigned) k;
                return 0;
        case ARG_FILE_VERSION:
                if (parse_int(arg, &opt.file_version) < 0 ||
                    (opt.file_version != 6 && opt.file_version != 7))
                        return log_usage("--file-version takes 6 or 7, not '%s'", arg);
                return 0;
        case ARG_NO_KALLSYMS:
                opt.kallsyms = false;
                return 0;
        case ARG_FORCE:
                opt.force = true;
                return 0;
        }
        return -EINVAL;
}

const OptionTable record_option_table = OPTION_TABLE(record_specs, record_parse_option);

int record_verb(const CommonOptions *c, char **args, size_t n) {
        RecordOptions o = opt;
        json_object *params;

        if (!o.output)
                return usage_error("record needs -o FILE");
        if (!opt_format)
                o.format = record_format_for(o.output);
        else if (streq(opt_format, "dat"))
                o.format = RECORD_FORMAT_DAT;
        else if (streq(opt_format, "ndjson"))
                o.format = RECORD_FORMAT_NDJSON;
        else
                return usage_error("--format takes dat or ndjson, not '%s'", opt_format);
        if (o.file_version == 0)
                o.file_version = 6;
        o.duration = (double) c->duration_usec / 1e6;
        params = selection_params(c, args, n);
        if (!params)
                return connection_exit_status(log_oom());
        return record_run(c->socket_path, params, &o);
}
