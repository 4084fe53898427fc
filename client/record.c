/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "connection.h"
#include "datfile.h"
#include "log.h"
#include "output.h"
#include "record.h"
#include "tpd-protocol.h"

#define READ_SIZE (1024U * 1024U)
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
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}

RecordFormat record_format_for(const char *path) {
        const char *dot = strrchr(path, '.');

        if (dot && (streq(dot, ".ndjson") || streq(dot, ".json") || streq(dot, ".jsonl")))
                return RECORD_FORMAT_NDJSON;
        return RECORD_FORMAT_DAT;
}

typedef struct Capture {
        const RecordOptions *o;
        /* Files: the current one and the names of those finished, oldest first. */
        char **done;
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
        bool tty; /* stderr shows a status line */
} Capture;

/* The name of the next file: the output itself, or with rotation "STEM-NNNN.EXT". */
static int capture_next_name(Capture *c, char **ret) {
        const char *out = c->o->output, *slash = strrchr(out, '/'), *dot = strrchr(out, '.');

        if (!c->o->rotate_size && c->o->rotate_time <= 0)
                return (*ret = strdup(out)) ? 0 : -ENOMEM;
        if (!dot || (slash && dot < slash))
                dot = out + strlen(out);
        c->serial++;
        return asprintf(ret, "%.*s-%04u%s", (int) (dot - out), out, c->serial, dot) < 0 ? -ENOMEM : 0;
}

static int capture_open(Capture *c) {
        int r = capture_next_name(c, &c->current);

        if (r < 0)
                return r;
        c->file_start = now_s();
        if (c->o->format == RECORD_FORMAT_DAT)
                return datfile_new(c->meta, c->current, &c->dat);
        c->fd = open(c->current, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        c->fd_bytes = 0;
        return c->fd < 0 ? -errno : 0;
}

/* Finishes the current file and drops the oldest beyond --keep. */
static int capture_close(Capture *c) {
        char **done;
        struct stat st;
        int r = 0;

        if (!c->current)
                return 0;
        if (c->dat) {
                r = datfile_finish(c->dat);
                c->dat = NULL;
        } else if (c->fd >= 0) {
                if (fsync(c->fd) < 0 && errno != EINVAL)
                        r = -errno;
                if (close(c->fd) < 0 && r == 0)
                        r = -errno;
                c->fd = -1;
        }
        if (r < 0) {
                log_error_errno(r, "cannot write %s: %m", c->current);
                free(c->current);
                c->current = NULL;
                return r;
        }
        if (stat(c->current, &st) == 0)
                c->finished_bytes += (uint64_t) st.st_size;
        done = reallocarray(c->done, c->n_done + 1, sizeof(char *));
        if (!done)
                return log_oom();
        c->done = done;
        c->done[c->n_done++] = c->current;
        c->current = NULL;
        while (c->o->keep > 0 && c->n_done > c->o->keep) {
                if (unlink(c->done[0]) < 0 && errno != ENOENT)
                        log_error_errno(-errno, "cannot remove %s: %m", c->done[0]);
                free(c->done[0]);
                memmove(c->done, c->done + 1, (c->n_done - 1) * sizeof(char *));
                c->n_done--;
        }
        return 0;
}

static uint64_t capture_current_size(const Capture *c) {
        if (c->dat)
                return dat_meta_header_size(c->meta) + datfile_data_size(c->dat);
        return c->fd_bytes;
}

/* Before n more bytes go to the current file: rotates when the file would outgrow its size or its
 * time is up; notes when the whole capture would outgrow --size. Returns 1 to write, 0 to stop. */
static int capture_room(Capture *c, size_t n) {
        uint64_t size = capture_current_size(c);
        uint64_t empty = c->dat ? dat_meta_header_size(c->meta) : 0;
        int r;

        if (c->o->max_size && c->finished_bytes + size + n > c->o->max_size) {
                c->size_reached = true;
                return 0;
        }
        if (size > empty && ((c->o->rotate_size && size + n > c->o->rotate_size) ||
                             (c->o->rotate_time > 0 && now_s() - c->file_start >= c->o->rotate_time))) {
                r = capture_close(c);
                if (r < 0)
                        return r;
                r = capture_open(c);
                if (r < 0)
                        return log_error_errno(r, "cannot create %s: %m", c->current ?: c->o->output);
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

static int capture_frame(Capture *c, const TpdFrame *f, const uint8_t *payload, size_t page_size) {
        uint64_t v[2];
        int r;

        switch (f->type) {
        case TPD_FRAME_FILE:
                r = dat_meta_add_file(c->meta, payload, f->length);
                if (r == -EBADMSG)
                        return log_error("tpd sent a file tpctl does not take");
                return r < 0 ? log_error_errno(r, "cannot keep a file tpd sent: %m") : 0;
        case TPD_FRAME_COMM:
                return dat_meta_add_comm(c->meta, (int) f->arg, (const char *) payload, f->length) == -ENOMEM
                               ? log_oom()
                               : 0;
        case TPD_FRAME_LOST:
                if (f->length < sizeof(v))
                        return log_error("tpd sent a malformed loss");
                memcpy(v, payload, sizeof(v));
                c->lost += v[0];
                if (c->dat)
                        datfile_note_lost(c->dat, f->cpu, f->arg == TPD_LOST_OVERRUN ? v[0] : 0,
                                          f->arg == TPD_LOST_OVERRUN ? 0 : v[0]);
                return 0;
        case TPD_FRAME_PAGE: {
                uint64_t commit;

                if (f->length != page_size)
                        return log_error("tpd sent a page of %u bytes, not %zu", f->length, page_size);
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
                return log_error("tpd sent a frame of unknown type %u", f->type);
        }
}

/* NDJSON: whole lines to the current file, rotating between lines. */
/* Whether n more bytes fit the current file and the capture without a rotation or a stop. */
static bool capture_fits(const Capture *c, uint64_t n) {
        if (c->o->max_size && c->finished_bytes + c->fd_bytes + n > c->o->max_size)
                return false;
        return !c->o->rotate_size || c->fd_bytes + n <= c->o->rotate_size;
}

/* NDJSON: whole lines to the current file, one write() for each run of lines that fits it,
 * rotating between lines. */
static int capture_lines(Capture *c, const uint8_t *data, size_t len, size_t *ret_used) {
        size_t used = 0, run = 0;
        int r = capture_room(c, 0); /* rotation by time */

        if (r <= 0) {
                *ret_used = 0;
                return r;
        }
        for (;;) {
                const uint8_t *line = data + used + run, *nl = memchr(line, '\n', len - used - run);
                size_t n = nl ? (size_t) (nl - line) + 1 : 0;

                if (nl && (capture_fits(c, run + n) || (run == 0 && c->fd_bytes == 0 && !c->o->max_size))) {
                        const uint8_t *l = memmem(line, n, "\"lost\":", 7);

                        if (l && memmem(line, n, "\"cause\":", 8))
                                c->lost += strtoull((const char *) l + 7, NULL, 10);
                        else
                                c->records++;
                        run += n;
                        continue;
                }
                if (run > 0) {
                        r = write_all(c->fd, data + used, run);
                        if (r < 0)
                                return log_error_errno(r, "cannot write %s: %m", c->current);
                        c->fd_bytes += run;
                        c->bytes += run;
                        used += run;
                        run = 0;
                }
                if (!nl)
                        break;
                r = capture_room(c, n);
                if (r <= 0) {
                        *ret_used = used;
                        return r;
                }
        }
        *ret_used = used;
        return 1;
}

static void status_line(const Capture *c, double start, bool final) {
        double t = now_s() - start;

        fprintf(stderr, "\r%s %" PRIu64 " records, %.1f MiB, %.0f records/s, lost %" PRIu64 "%s\033[K%s",
                final ? "recorded" : "recording:", c->records, c->bytes / 1048576.0,
                t > 0 ? c->records / t : 0.0, c->lost,
                c->lost_unknown ? " and more (pages flag losses without a count)" : "", final ? "\n" : "");
}

int record_run(const char *socket_path, json_object *params, const RecordOptions *o) {
        _cleanup_(connection_done) Connection conn = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        struct sigaction sa = { .sa_handler = on_signal }, sa_ignore = { .sa_handler = SIG_IGN };
        sigset_t blocked, unblocked;
        Capture c = { .o = o, .fd = -1, .tty = isatty(STDERR_FILENO) };
        json_object *v;
        size_t page_size = 0, len = 0, cap = READ_SIZE;
        unsigned n_cpus = 0;
        int64_t flush_ms = 100;
        double start, stop_at = 0, last_status = 0;
        bool tty = isatty(STDERR_FILENO), closed = false;
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

        r = connection_call(&conn, socket_path,
                            o->format == RECORD_FORMAT_DAT ? TPD_METHOD("Record") : TPD_METHOD("Stream"),
                            params, true, &reply);
        if (r != 0)
                return r == 1 ? EXIT_FAILURE : TPD_EXIT_DAEMON_GONE;
        if (json_object_object_get_ex(reply.parameters, "flush_interval_ms", &v))
                flush_ms = json_object_get_int64(v);
        if (o->format == RECORD_FORMAT_DAT) {
                if (json_object_object_get_ex(reply.parameters, "page_size", &v))
                        page_size = (size_t) json_object_get_int64(v);
                if (json_object_object_get_ex(reply.parameters, "cpus", &v))
                        n_cpus = (unsigned) json_object_get_int(v);
                if (page_size < 64 || page_size > (1U << 20) || n_cpus == 0 || n_cpus > 65536) {
                        log_error("tpd's reply to Record lacks a page size or CPU count");
                        return EXIT_FAILURE;
                }
                /* The frames that follow must be ones this tpctl reads. */
                if (!json_object_object_get_ex(reply.parameters, "frames", &v) ||
                    !json_object_is_type(v, json_type_int) ||
                    json_object_get_int64(v) != TPD_FRAMES_VERSION) {
                        if (v && json_object_is_type(v, json_type_int))
                                log_error("tpd sends recording frames of version %" PRId64
                                          ", this tpctl reads version %d",
                                          json_object_get_int64(v), TPD_FRAMES_VERSION);
                        else
                                log_error("tpd's reply to Record names no frame version (an older tpd), "
                                          "this tpctl reads version %d",
                                          TPD_FRAMES_VERSION);
                        log_hint("use the tpctl of the same release as the running tpd");
                        return EXIT_FAILURE;
                }
                r = dat_meta_new(o->output, n_cpus, page_size, o->file_version, &c.meta);
                if (r >= 0)
                        r = dat_meta_set_kallsyms(c.meta, o->kallsyms);
                if (r < 0) {
                        log_error_errno(r, "cannot prepare %s: %m", o->output);
                        dat_meta_free(c.meta);
                        return EXIT_FAILURE;
                }
        }

        buf = malloc(cap);
        if (!buf) {
                dat_meta_free(c.meta);
                return exit_status_oom();
        }
        len = varlink_buffer_pending(&conn.in);
        if (len > cap)
                len = 0; /* cannot be: a reply is smaller */
        memcpy(buf, conn.in.data + conn.in.consumed, len);

        start = now_s();
        r = capture_open(&c);
        if (r < 0) {
                log_error_errno(r, "cannot create %s: %m", c.current ?: o->output);
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
                                if (r == 0 && c.size_reached)
                                        break;
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

                if (c.size_reached || closed)
                        break;
                if (stop_at > 0 && now >= stop_at)
                        break;
                if (stop_at == 0 && (stop_requested || (o->duration > 0 && now - start >= o->duration))) {
                        /* What was written until now reaches tpd's pages within a flush interval. */
                        stop_at = now + (flush_ms + 100) / 1000.0;
                        continue;
                }
                if (tty && now - last_status >= 1.0) {
                        status_line(&c, start, false);
                        last_status = now;
                }
                if (o->format == RECORD_FORMAT_DAT)
                        (void) capture_room(&c, 0); /* rotation by time, without waiting for a page */

                /* Sleep until data, a signal (it interrupts poll()), or the next thing to do: no
                 * wake-ups while nothing happens. */
                {
                        double wait = -1;

                        if (stop_at > 0)
                                wait = stop_at - now;
                        else if (o->duration > 0)
                                wait = start + o->duration - now;
                        if (o->rotate_time > 0 && (wait < 0 || c.file_start + o->rotate_time - now < wait))
                                wait = c.file_start + o->rotate_time - now;
                        if (tty && (wait < 0 || wait > 1.0))
                                wait = 1.0;
                        timeout_ms = wait < 0 ? -1 : (int) (wait * 1000) + 1;
                }
                {
                        struct timespec ts = { timeout_ms / 1000, (long) (timeout_ms % 1000) * 1000000L };

                        r = ppoll(&pfd, 1, timeout_ms < 0 ? NULL : &ts, &unblocked);
                }
                if (r < 0 && errno != EINTR) {
                        status = EXIT_FAILURE;
                        goto finish;
                }
                if (!(pfd.revents & (POLLIN | POLLHUP | POLLERR)))
                        continue;
                if (cap - len < READ_SIZE / 4) {
                        uint8_t *b = realloc(buf, cap * 2);
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
        if (c.dat)
                datfile_abort(c.dat);
        free(c.current);
        if (tty)
                status_line(&c, start, true);
        /* Files written, including those rotation removed since. */
        fprintf(stderr, "tpctl: %" PRIu64 " records in %u file%s, %" PRIu64 " lost%s%s\n", c.records,
                c.serial > 0 ? c.serial : (unsigned) c.n_done,
                (c.serial > 0 ? c.serial : c.n_done) == 1 ? "" : "s", c.lost,
                c.lost_unknown ? " (and more: some pages flag losses without a count)" : "",
                c.size_reached ? "; stopped at the size limit" : "");
        for (size_t i = 0; i < c.n_done; i++)
                free(c.done[i]);
        free(c.done);
        dat_meta_free(c.meta);
        free(buf);
        return status;
}
