/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "capdir.h"
#include "capture.h"
#include "linereader.h"
#include "loss.h"
#include "message.h"
#include "output.h"

#define PAGE_MISSED_STORED (1ULL << 30)
#define PAGE_MISSED_EVENTS (1ULL << 31)

double capture_now(void) {
        return (double) now_usec(CLOCK_MONOTONIC) / 1e6;
}

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
int capture_check_names(const Capture *c) {
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

/* A Perfetto trace: written under a private name, and moved to its own once whole. */
static int capture_create_perfetto(Capture *c) {
        int fd = capdir_mktemp(c->dir_fd, ".tpctl-record-", O_WRONLY, &c->tmp);
        int r;

        if (fd < 0)
                return fd;
        c->fd = fd;
        r = perfetto_writer_new(fd, &c->pf);
        return r < 0 ? r : perfetto_writer_start(c->pf, c->reply);
}

/* The trace's end, and its name. */
static int capture_finish_perfetto(Capture *c, const char *name, struct stat *st) {
        int r = perfetto_writer_finish(c->pf);

        c->pf = perfetto_writer_free(c->pf);
        if (r >= 0 && fsync(c->fd) < 0 && errno != EINVAL)
                r = negative_errno();
        if (r >= 0 && fstat(c->fd, st) < 0)
                r = negative_errno();
        if (close(TAKE_FD(c->fd)) < 0 && r >= 0)
                r = negative_errno();
        if (r >= 0)
                r = capdir_move(c->dir_fd, c->tmp, c->dir_fd, name, c->o->force);
        if (r < 0)
                (void) unlinkat(c->dir_fd, c->tmp, 0);
        c->tmp = mfree(c->tmp);
        return r;
}

int capture_open(Capture *c) {
        _cleanup_free_ char *name = NULL;
        int r = capture_next_name(c, &name);

        if (r < 0)
                return log_oom();
        c->file_start = capture_now();
        if (c->o->format == RECORD_FORMAT_DAT)
                r = datfile_new(c->meta, &c->dat);
        else if (c->o->format == RECORD_FORMAT_PERFETTO)
                r = capture_create_perfetto(c);
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
int capture_close(Capture *c) {
        _cleanup_free_ char *name = TAKE_PTR(c->current);
        CaptureFile *done;
        struct stat st = {};
        int r = 0;

        if (!name)
                return 0;
        if (c->dat)
                r = datfile_finish(TAKE_PTR(c->dat), c->dir_fd, name, c->o->force, &st);
        else if (c->pf)
                r = capture_finish_perfetto(c, name, &st);
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
        double now = capture_now();
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
int capture_room(Capture *c, size_t n) {
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
        if (notice && streq(notice, "sync") && c->o->until_sync)
                c->synced = true; /* the answer to the command's SYNC frame: no news for the user */
        else if (notice)
                fprintf(stderr, "%stpctl: tpd notice %s at ts %" PRId64 ": %s\n", c->tty ? "\r\033[K" : "",
                        output_escape(notice), ts, output_escape(message ?: ""));
        else
                fprintf(stderr, "%stpctl: tpd notice: %s\n", c->tty ? "\r\033[K" : "", output_escape(text));
        json_object_put(o);
        return 0;
}

/* The longest "pid comm\n" line a name adds to a data file. */
#define CAPTURE_NAME_MAX 32U

/* One frame of Record's into a Perfetto trace (no rotation, no --size). */
static int capture_perfetto_frame(Capture *c, const TpdFrame *f, const uint8_t *payload, size_t page_size) {
        uint64_t v[2];
        int r;

        switch (f->type) {
        case TPD_FRAME_FILE:
                r = perfetto_writer_add_file(c->pf, payload, f->length);
                if (r == -EBADMSG)
                        return log_error_errno(r, "tpd sent a file tpctl does not take");
                break;
        case TPD_FRAME_COMM:
                r = perfetto_writer_add_comm(c->pf, (int) f->arg, (const char *) payload, f->length);
                break;
        case TPD_FRAME_LOST:
                if (f->length < sizeof(v))
                        return log_error_errno(-EBADMSG, "tpd sent a malformed loss");
                memcpy(v, payload, sizeof(v));
                c->lost += v[0];
                r = perfetto_writer_add_lost(c->pf, f->cpu, v[0]);
                break;
        case TPD_FRAME_PAGE:
                if (f->length != page_size)
                        return log_error_errno(-EBADMSG, "tpd sent a page of %u bytes, not %zu", f->length,
                                               page_size);
                r = perfetto_writer_add_page(c->pf, f->cpu, payload, page_size);
                if (r == -EBADMSG)
                        return log_error_errno(r, "tpd sent a page of CPU %u before its events' formats",
                                               f->cpu);
                c->records += f->arg;
                c->bytes += page_size;
                break;
        case TPD_FRAME_NOTICE:
                return capture_notice(c, payload, f->length);
        default:
                return log_error_errno(-EBADMSG, "tpd sent a frame of unknown type %u", f->type);
        }
        return r < 0 ? log_error_errno(r, "cannot write %s: %m", c->current) : 0;
}

int capture_frame(Capture *c, const TpdFrame *f, const uint8_t *payload, size_t page_size) {
        uint64_t v[2];
        int r;

        /* Past --size, the pages, losses and notices that were under way are not the file's; the
         * names of its tasks are, while they fit. */
        if (c->names_only &&
            (f->type != TPD_FRAME_COMM ||
             c->finished_bytes + capture_current_size(c) + CAPTURE_NAME_MAX > c->o->max_size))
                return 0;
        if (c->pf)
                return capture_perfetto_frame(c, f, payload, page_size);
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

/* A Perfetto trace: each complete line into the writer (no rotation, no --size). */
static int capture_perfetto_lines(Capture *c, const uint8_t *data, size_t len, size_t *ret_used) {
        size_t used = 0;

        for (const uint8_t *nl; !c->synced && (nl = memchr(data + used, '\n', len - used));) {
                const char *line = (const char *) data + used;
                size_t n = (size_t) (nl - (const uint8_t *) line) + 1;
                LineHead head = {};
                int r;

                if (c->o->until_sync)
                        line_head_parse(line, n, &head);
                if (head.sync) {
                        c->synced = true;
                        break;
                }
                capture_count_line(c, (const uint8_t *) line, n);
                r = perfetto_writer_add_line(c->pf, line, n);
                if (r < 0)
                        return log_error_errno(r, "cannot write %s: %m", c->current);
                c->bytes += n;
                used += n;
        }
        *ret_used = used;
        return 1;
}

/* NDJSON: whole lines to the current file, one write() for each run of lines that fits it,
 * rotating between lines. A line that does not fit goes to a new file, and alone into an empty
 * one when it is longer than --rotate-size: every line is taken once it is complete. */
int capture_lines(Capture *c, const uint8_t *data, size_t len, size_t *ret_used) {
        size_t used = 0, run = 0;
        int r;

        if (c->pf)
                return capture_perfetto_lines(c, data, len, ret_used);
        r = capture_room(c, 0); /* rotation by time */
        *ret_used = 0;
        if (r <= 0)
                return r;
        for (;;) {
                const uint8_t *line = data + used + run, *nl = memchr(line, '\n', len - used - run);
                size_t n = nl ? (size_t) (nl - line) + 1 : 0;
                LineHead head = {};

                if (nl && c->o->until_sync)
                        line_head_parse((const char *) line, n, &head);
                if (head.sync || c->synced) {
                        /* The answer to the command's SYNC frame ends the capture, unwritten. */
                        c->synced = true;
                        nl = NULL;
                        n = 0;
                } else if (nl && capture_fits(c, run + n)) {
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

void capture_status_line(const Capture *c, double start, bool final) {
        double t = capture_now() - start;

        fprintf(stderr, "\r%s %" PRIu64 " records, %.1f MiB, %.0f records/s, lost %" PRIu64 "%s\033[K%s",
                final ? "recorded" : "recording:", c->records, c->bytes / 1048576.0,
                t > 0 ? c->records / t : 0.0, c->lost,
                c->lost_unknown ? " and more (pages flag losses without a count)" : "", final ? "\n" : "");
}

void capture_done(Capture *c) {
        if (c->dat)
                datfile_abort(TAKE_PTR(c->dat));
        safe_close(c->fd);
        c->fd = -1;
        c->pf = perfetto_writer_free(c->pf);
        if (c->tmp)
                (void) unlinkat(c->dir_fd, c->tmp, 0);
        free(c->tmp);
        c->meta = dat_meta_free(c->meta);
        for (size_t i = 0; i < c->n_done; i++)
                free(c->done[i].name);
        free(c->done);
        free(c->current);
        free(c->name);
        safe_close(c->dir_fd);
}

/* How long to sleep at most, in ms for ppoll(): -1 for no deadline, never less than 0. */
