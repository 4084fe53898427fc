/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <trace-cmd.h>
#include <unistd.h>

#include "core/decode.h"
#include "core/names.h"
#include "core/selection.h"
#include "datcheck.h"
#include "linereader.h"
#include "lines.h"
#include "message.h"
#include "replay.h"
#include "terminal.h"
#include "tpd-protocol.h"

/* What a trace-cmd data file starts with (trace-cmd.dat(5)). */
static const char dat_magic[] = { 0x17, 0x08, 0x44, 't', 'r', 'a', 'c', 'i', 'n', 'g' };

/* Exported by libtracecmd 3.1 but declared only in its private header: the time stamp of the
 * sub-buffer page a record is on, which is the time of a loss the page flags (as tpd reports it
 * live). */
unsigned long long tracecmd_page_ts(struct tracecmd_input *handle, struct tep_record *record);
/* Likewise: the kernel's per-CPU statistics that trace-cmd saved when the recording ended, as
 * text; NULL when the file has none. */
const char *tracecmd_get_cpustats(struct tracecmd_input *handle);

#define OUTPUT_BUFFER_SIZE (256U * 1024U)

/* No stdio: a reader gone (| head) ends the replay quietly, no buffer left for tpctl's last flush. */
typedef struct Output {
        char *buf;
        size_t len;
        int fd, error; /* error: the first write error, negative errno */
        bool escape;   /* a terminal: no control byte of the capture reaches it (terminal.h) */
} Output;

static int output_flush(Output *o) {
        size_t done = 0;

        while (o->error == 0 && done < o->len) {
                ssize_t n = write(o->fd, o->buf + done, o->len - done);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        o->error = -errno;
                        break;
                }
                done += (size_t) n;
        }
        o->len = 0;
        return o->error;
}

static int output_put_raw(Output *o, const char *p, size_t n) {
        if (o->error < 0)
                return o->error;
        if (o->len + n > OUTPUT_BUFFER_SIZE && output_flush(o) < 0)
                return o->error;
        if (n >= OUTPUT_BUFFER_SIZE) {
                o->len = 0;
                while (n > 0 && o->error == 0) {
                        ssize_t k = write(o->fd, p, n);
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k < 0)
                                o->error = -errno;
                        else {
                                p += k;
                                n -= (size_t) k;
                        }
                }
                return o->error;
        }
        memcpy(o->buf + o->len, p, n);
        o->len += n;
        return 0;
}

/* Lines of JSON (the capture's, or the decoder's), escaped on a terminal. */
static int output_put(Output *o, const char *p, size_t n) {
        while (o->escape && n > 0 && o->error == 0) {
                size_t safe = terminal_json_safe(p, n), used;
                char esc[6];

                if (safe > 0 && output_put_raw(o, p, safe) < 0)
                        break;
                p += safe;
                n -= safe;
                if (n > 0 && output_put_raw(o, esc, terminal_json_escape(p, n, esc, &used)) >= 0) {
                        p += used;
                        n -= used;
                }
        }
        return o->escape ? o->error : output_put_raw(o, p, n);
}

/* The exit status for a replay that stopped writing: a reader that went away is no failure. */
static int output_status(Output *o) {
        if (o->error == 0)
                output_flush(o);
        if (o->error == -EPIPE || o->error == 0)
                return EXIT_SUCCESS;
        log_error_errno(o->error, "cannot write to standard output: %m");
        return EXIT_FAILURE;
}

/* Event names and globs, checked as tpd checks stream's. */
typedef struct Patterns {
        Glob *globs; /* globs[i] is compiled when names[i] is a glob */
        char *const *names;
        size_t n;
} Patterns;

static void patterns_done(Patterns *p) {
        free(p->globs);
}

static int patterns_compile(Patterns *p, char *const *names, size_t n) {
        p->names = names;
        p->n = n;
        p->globs = calloc(n ? n : 1, sizeof(Glob));
        if (!p->globs)
                return log_oom();
        for (size_t i = 0; i < n; i++) {
                if (names_is_glob(names[i]) ? glob_compile(names[i], &p->globs[i]) < 0
                                            : !names_event_is_valid(names[i]))
                        return log_error_errno(-EINVAL,
                                               "invalid event name '%s': expected "
                                               "'system:event' or a glob of such names",
                                               names[i]);
        }
        return 0;
}

static bool patterns_match(const Patterns *p, size_t i, const char *name) {
        return names_is_glob(p->names[i]) ? glob_match(&p->globs[i], name) : streq(p->names[i], name);
}

static bool ints_contain(const int *v, size_t n, int64_t x) {
        for (size_t i = 0; i < n; i++)
                if (v[i] == x)
                        return true;
        return false;
}

static void json_tokener_freep(json_tokener **t) {
        if (*t)
                json_tokener_free(*t);
}

static bool has_control_byte(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) s[i] < 0x20)
                        return true;
        return false;
}

/*
 * An NDJSON capture: the lines stream's selection keeps, as they are. Only "event", "pid" and
 * "cpu" are looked at, with stream's rules (core/selection.c selection_matches()): a line of another
 * CPU goes, a line without "event" (a loss or a notice) stays, an event line must match the events
 * and pids. A lost record of cause "unknown" does not name its event or pid, so it stays too.
 * head (n_head bytes) is what was read of fd already: a pipe cannot be read twice.
 */
static int replay_ndjson(int fd, const char *head, size_t n_head, const char *path, const ReplayOptions *o,
                         Output *out) {
        _cleanup_(patterns_done) Patterns patterns = {};
        _cleanup_(json_tokener_freep) json_tokener *tok = NULL;
        _cleanup_(line_reader_done) LineReader lines = {};
        size_t line_no = 0, n = 0;
        const char *line = NULL;
        int k;

        if (patterns_compile(&patterns, o->events, o->n_events) < 0)
                return EXIT_FAILURE;
        tok = json_tokener_new();
        if (!tok || line_reader_init(&lines, fd, LINES_LINE_MAX, head, n_head) < 0)
                return log_oom(), EXIT_FAILURE;
        /* As tpd writes them: strict JSON of valid UTF-8 without control bytes, so that a
         * terminal's escape keeps the meaning of a line (terminal.h). */
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);

        while ((k = line_next(&lines, &line, &n)) > 0) {
                size_t len = n - (line[n - 1] == '\n');
                json_object *v, *obj;
                bool keep = true;

                line_no++;
                json_tokener_reset(tok);
                /* tpd escapes every control byte, and puts no whitespace between tokens: a raw one
                 * is none of its lines (json-c takes them inside strings even when strict). */
                obj = has_control_byte(line, len) ? NULL : json_tokener_parse_ex(tok, line, (int) len);
                if (!obj || json_tokener_get_parse_end(tok) != len ||
                    !json_object_is_type(obj, json_type_object)) {
                        json_object_put(obj);
                        (void) output_flush(out); /* what came before is a replay's output */
                        log_error("%s:%zu: not a record of tpctl stream (one JSON object a line)", path,
                                  line_no);
                        return EXIT_FAILURE;
                }

                if (o->n_cpus > 0 && json_object_object_get_ex(obj, "cpu", &v) &&
                    !ints_contain(o->cpus, o->n_cpus, json_object_get_int64(v)))
                        keep = false;
                if (keep && json_object_object_get_ex(obj, "event", &v)) {
                        const char *name = json_object_get_string(v);

                        if (patterns.n > 0) {
                                keep = false;
                                for (size_t i = 0; !keep && i < patterns.n; i++)
                                        keep = patterns_match(&patterns, i, strempty(name));
                        }
                        if (keep && o->n_pids > 0)
                                keep = json_object_object_get_ex(obj, "pid", &v) &&
                                       ints_contain(o->pids, o->n_pids, json_object_get_int64(v));
                }
                json_object_put(obj);

                if (keep && output_put(out, line, n) < 0)
                        break;
        }
        if (k == -E2BIG) {
                (void) output_flush(out);
                log_error("%s:%zu: a line longer than %u bytes: not a record of tpctl stream", path,
                          line_no + 1, LINES_LINE_MAX);
                return EXIT_FAILURE;
        }
        if (k < 0) {
                log_error_errno(k, "cannot read '%s': %m", path);
                return EXIT_FAILURE;
        }
        return output_status(out);
}

/* Per CPU of a buffer: the page of its last record, its pending run of records of unknown event
 * ids (which decoder_decode_page() would end at the end of the page), and its losses. */
typedef struct ReplayCpu {
        uint64_t page; /* offset of the page in the CPU's data, plus one; 0 before the first */
        DecoderUnknownRun unknown;
        uint64_t overrun;  /* the kernel's overrun counter when the recording ended */
        bool has_overrun;  /* the file's statistics hold it */
        uint64_t reported; /* losses reported so far */
        bool warned;
} ReplayCpu;

/* One buffer of the file: the top one, or an instance's (`trace-cmd record -B`). */
typedef struct ReplaySource {
        struct tracecmd_input *handle;
        const char *name; /* "" for the top one */
        ReplayCpu *cpus;
        size_t n_cpus;
} ReplaySource;

typedef struct Replay {
        struct tep_handle *tep;
        Decoder *decoder;
        Selection selection;
        Batch *batch;
        size_t page_size;
        bool print;
        ReplaySource *sources;
        size_t n_sources;
        ReplayCpu *current; /* of the record being decoded, for replay_missed() */
        Output *out;
        uint64_t damaged;
        /* Records out of the batch: the last may wait for the stack the next callback brings. */
        size_t emitted;
        uint8_t *held_raw;
        size_t held_cap;
} Replay;

/* tpd's tep handle knows no kernel symbols: live, "print" shows code addresses as numbers. The
 * file's kallsyms would name them; for the same text as live, name none. */
static char *replay_no_function(void *priv, unsigned long long *addrp, char **modp) {
        return NULL;
}

static ReplayCpu *source_cpu(ReplaySource *src, unsigned cpu) {
        if (cpu >= src->n_cpus) {
                ReplayCpu *a = reallocarray(src->cpus, cpu + 1, sizeof(ReplayCpu));
                if (!a)
                        return NULL;
                memset(a + src->n_cpus, 0, (cpu + 1 - src->n_cpus) * sizeof(ReplayCpu));
                src->cpus = a;
                src->n_cpus = cpu + 1;
        }
        return &src->cpus[cpu];
}

/* trace-cmd saves the kernel's per-CPU statistics when the recording ends, as text: "CPU: N"
 * sections with "overrun: N", under "Buffer: NAME" for an instance's buffer. */
static int replay_load_stats(Replay *r, const char *stats) {
        const char *buffer = "", *p = stats;
        size_t buffer_len = 0;
        long cpu = -1;

        while (p && *p) {
                const char *eol = strchrnul(p, '\n');
                unsigned long long v;

                if (strncmp(p, "Buffer: ", 8) == 0) {
                        buffer = p + 8;
                        buffer_len = (size_t) (eol - buffer);
                        cpu = -1;
                } else if (sscanf(p, "CPU: %ld", &cpu) == 1) {
                        if (cpu < 0 || cpu >= LINES_CPUS_MAX)
                                cpu = -1;
                } else if (sscanf(p, "overrun: %llu", &v) == 1 && cpu >= 0)
                        for (size_t i = 0; i < r->n_sources; i++) {
                                ReplaySource *src = &r->sources[i];
                                ReplayCpu *c;

                                if (strlen(src->name) != buffer_len ||
                                    strncmp(src->name, buffer, buffer_len))
                                        continue;
                                c = source_cpu(src, (unsigned) cpu);
                                if (!c)
                                        return -ENOMEM;
                                c->overrun = v;
                                c->has_overrun = true;
                        }
                p = *eol ? eol + 1 : NULL;
        }
        return 0;
}

static const char *replay_comm(void *userdata, int pid, uint64_t ts) {
        Replay *r = userdata;

        /* As tpd names them live (daemon/comm.c): pid 0 is each CPU's idle task. */
        if (pid == 0)
                return "<idle>";
        /* From the command lines saved in the file; unknown ones get no "comm", as live. */
        return tep_is_pid_registered(r->tep, pid) ? tep_data_comm_from_pid(r->tep, pid) : NULL;
}

/* The losses a page flags, as tpd counts them live (daemon/manager.c): what the kernel's overrun
 * counter says was lost and is not reported yet. The file keeps the counter's value at the end
 * of the recording, so a page whose count the kernel could not store (a full page) reports all
 * losses not yet reported, and pages with a stored count report it, never beyond the counter:
 * the sum is the counter, exactly. Without the statistics, a stored count is taken as it is. */
static uint64_t replay_missed(void *userdata, unsigned cpu, const uint64_t *stored) {
        Replay *r = userdata;
        ReplayCpu *c = r->current;
        uint64_t n;

        if (!c->has_overrun) {
                if (!stored && !c->warned) {
                        c->warned = true;
                        log_error("warning: the capture says that records of CPU %u were lost, but neither "
                                  "how many nor the kernel's counters; no lost record is printed for them",
                                  cpu);
                }
                return stored ? *stored : 0;
        }
        n = c->overrun > c->reported ? c->overrun - c->reported : 0;
        if (stored)
                n = MIN(n, *stored);
        c->reported += n;
        return n;
}

/* A frame's name from the file's kallsyms, as tpd names it live ("symbol+0xoff"): stacks are named
 * where "print" is not (replay_no_function()). */
static size_t replay_ksym(void *userdata, uint64_t address, char *buf, size_t size) {
        Replay *r = userdata;
        const char *name;
        int n = -1;

        tep_reset_function_resolver(r->tep);
        name = tep_find_function(r->tep, address);
        if (name)
                n = snprintf(buf, size, "%s+0x%llx", name,
                             address - tep_find_function_address(r->tep, address));
        (void) tep_set_function_resolver(r->tep, replay_no_function, NULL);
        return n < 0 ? 0 : MIN((size_t) n, size - 1);
}

/* Prints the records of the batch that the stream selects, all (end) or all but a last one whose
 * stack may come with the next record. */
static int replay_emit(Replay *r, bool end) {
        Batch *b = r->batch;
        size_t upto = b->n_records;
        const Record *last = upto > 0 ? &b->records[upto - 1] : NULL;
        int k;

        if (!end && last && last->kind == RECORD_EVENT && !last->stack && decoder_stack_id(r->decoder) >= 0)
                upto--;
        for (size_t i = r->emitted; i < upto; i++) {
                const Record *rec = &b->records[i];
                unsigned variant =
                        (r->print ? DECODER_VARIANT_PRINT : 0) | (rec->stack ? DECODER_VARIANT_STACK : 0);

                if (!selection_matches(&r->selection, r->decoder, rec))
                        continue;
                variant = rec->kind == RECORD_EVENT ? variant : 0;
                if (variant && (k = decoder_encode_variant(r->decoder, b, i, variant)) < 0)
                        return k;
                rec = &b->records[i];
                if (output_put(r->out, b->buf.data + (variant ? rec->print_offset : rec->offset),
                               variant ? rec->print_length : rec->length) < 0)
                        return -EPIPE;
        }
        if (upto == b->n_records) {
                batch_reset(b);
                r->emitted = 0;
                return 0;
        }
        Record *rec = &b->records[upto]; /* waits, with a copy of its payload: libtracecmd's goes */
        if (rec->raw != r->held_raw) {
                if (r->held_cap < rec->raw_size) {
                        uint8_t *p = realloc(r->held_raw, rec->raw_size);
                        if (!p)
                                return -ENOMEM;
                        r->held_raw = p;
                        r->held_cap = rec->raw_size;
                }
                if (rec->raw_size > 0)
                        memcpy(r->held_raw, rec->raw, rec->raw_size);
                rec->raw = r->held_raw;
        }
        r->emitted = upto;
        return 0;
}

static int replay_on_record(struct tracecmd_input *handle, struct tep_record *record, int cpu_arg,
                            void *userdata) {
        Replay *r = userdata;
        unsigned cpu = (unsigned) record->cpu;
        ReplaySource *src = NULL;
        ReplayCpu *c;
        int k;

        for (size_t i = 0; i < r->n_sources && !src; i++)
                if (r->sources[i].handle == handle)
                        src = &r->sources[i];
        if (!src || record->cpu < 0 || record->cpu >= (int) LINES_CPUS_MAX || record->size < 0)
                return -EBADMSG;
        c = source_cpu(src, cpu);
        if (!c)
                return -ENOMEM;

        /* A new page ends the previous one's run of unknown records, as decoding by pages does.
         * Pages lie at multiples of the page size in a CPU's data (record->priv, libtracecmd's page,
         * may be freed and its memory reused for the next one). */
        if (record->offset / r->page_size + 1 != c->page) {
                k = decoder_flush_unknown(&c->unknown, r->batch, cpu);
                if (k < 0)
                        return k;
                c->page = record->offset / r->page_size + 1;
        }
        /* libtracecmd gives the page's loss with its first record: the count, or -1 for "some". */
        if (record->missed_events != 0) {
                uint64_t stored = (uint64_t) record->missed_events;

                r->current = c;
                k = decoder_decode_missed(r->decoder, tracecmd_page_ts(handle, record), cpu,
                                          record->missed_events > 0 ? &stored : NULL, r->batch);
                if (k < 0)
                        return k;
        }
        k = decoder_decode_record(r->decoder, record->ts, cpu, record->data, (size_t) record->size,
                                  &c->unknown, r->batch);
        if (k == -EBADMSG) {
                /* Shorter than its format: live, the rest of its page would be lost with it. */
                r->damaged++;
                k = batch_add_lost(r->batch, record->ts, cpu, 1, TPD_LOST_DECODE);
        }
        if (k < 0)
                return k;
        return replay_emit(r, false);
}

static void tracecmd_closep(struct tracecmd_input **h) {
        if (*h)
                tracecmd_close(*h);
}

/* Selects the events of the file that the patterns name, and sets the filter on them (or on every
 * event of the file it applies to, when none are named), as tpd's Stream method does. */
static int replay_select(Replay *r, const ReplayOptions *o) {
        _cleanup_(patterns_done) Patterns patterns = {};
        _cleanup_free_ struct tep_event **events = NULL;
        _cleanup_free_ int64_t *pids = NULL, *cpus = NULL;
        _cleanup_free_ bool *chosen = NULL;
        SelectionError err = {};
        struct tep_event **all;
        size_t n_all, n_events = 0;
        int k;

        if (patterns_compile(&patterns, o->events, o->n_events) < 0)
                return -EINVAL;
        all = tep_list_events(r->tep, TEP_EVENT_SORT_ID);
        n_all = all ? (size_t) tep_get_events_count(r->tep) : 0;
        chosen = calloc(n_all + 1, sizeof(bool));
        events = calloc(n_all + 1, sizeof(struct tep_event *));
        pids = calloc(o->n_pids + 1, sizeof(int64_t));
        cpus = calloc(o->n_cpus + 1, sizeof(int64_t));
        if (!chosen || !events || !pids || !cpus)
                return log_oom();

        for (size_t i = 0; i < patterns.n; i++) {
                bool found = false;

                for (size_t j = 0; j < n_all; j++) {
                        char name[512];

                        snprintf(name, sizeof(name), "%s:%s", all[j]->system, all[j]->name);
                        if (patterns_match(&patterns, i, name))
                                found = chosen[j] = true;
                }
                if (!found)
                        return log_error_errno(-ENOENT, "no event of the capture matches '%s'",
                                               patterns.names[i]);
        }
        for (size_t j = 0; j < n_all; j++)
                if (chosen[j])
                        events[n_events++] = all[j];
        for (size_t i = 0; i < o->n_pids; i++)
                pids[i] = o->pids[i];
        for (size_t i = 0; i < o->n_cpus; i++)
                cpus[i] = o->cpus[i];
        if (o->filter && strlen(o->filter) > TPD_FILTER_MAX)
                return log_error_errno(-EINVAL, "the filter is longer than %u bytes", TPD_FILTER_MAX);

        k = selection_build(&r->selection,
                            &(SelectionSpec){ .tep = r->tep,
                                              .events = events,
                                              .n_events = n_events,
                                              .others = all,
                                              .n_others = n_all,
                                              .pids = pids,
                                              .n_pids = o->n_pids,
                                              .cpus = cpus,
                                              .n_cpus = o->n_cpus,
                                              .filter = o->filter,
                                              .print = o->print },
                            &err);
        if (k == -EINVAL && err.failure == SELECTION_FILTER_INVALID)
                k = log_error_errno(
                        k, "invalid filter for '%s:%s': %s",
                        escape_text(events[err.event]->system, (char[256]){}, 256),
                        escape_text(events[err.event]->name, (char[256]){}, 256),
                        escape_text(strempty(err.message), (char[ESCAPE_TEXT_MAX]){}, ESCAPE_TEXT_MAX));
        else if (k == -EINVAL)
                k = log_error_errno(
                        k, "invalid stream filter: %s",
                        err.message ? escape_text(err.message, (char[ESCAPE_TEXT_MAX]){}, ESCAPE_TEXT_MAX)
                                    : "it applies to no event of the capture");
        else if (k == -ENOMEM)
                k = log_oom();
        else if (k < 0)
                k = log_error_errno(k, "cannot set the filter: %m");
        free(err.message);
        return k;
}

/* The file's formats are not the kernel's: one that would make the decoder or libtraceevent read
 * beyond a record (whose fields they read by the format's offsets, libtraceevent those of common_type
 * from any event) damages the whole file. */
static int replay_check_formats(struct tep_handle *tep, const char *path) {
        int n = tep_get_events_count(tep);

        for (int i = 0; i < n; i++) {
                struct tep_event *event = tep_get_event(tep, i);
                const char *field;

                if (!event || decoder_check_event(event, &field) >= 0)
                        continue;
                return log_error_errno(-EBADMSG,
                                       "'%s' is damaged: the format of '%s:%s' is not one of records "
                                       "(%s%s%s)",
                                       path, escape_text(event->system, (char[256]){}, 256),
                                       escape_text(event->name, (char[256]){}, 256),
                                       field ? "field '" : "names too long or fields miscounted",
                                       field ? escape_text(field, (char[256]){}, 256) : "",
                                       field ? "' beyond what a record holds, or of the wrong size" : "");
        }
        return 0;
}

static int replay_dat(const char *path, const ReplayOptions *o, Output *out) {
        _cleanup_(tracecmd_closep) struct tracecmd_input *handle = NULL;
        _cleanup_free_ struct tracecmd_input **handles = NULL;
        Replay r = { .print = o->print, .out = out };
        int n_instances, k, status = EXIT_FAILURE;

        /* No plugins: tpd's "print" is the kernel's own format, read from tracefs without them. No
         * messages of the libraries either: they would quote the file, unescaped. */
        tracecmd_set_loglevel(TEP_LOG_NONE);
        tep_set_loglevel(TEP_LOG_NONE);
        handle = tracecmd_open(path, TRACECMD_FL_LOAD_NO_PLUGINS | TRACECMD_FL_LOAD_NO_SYSTEM_PLUGINS);
        if (!handle) {
                log_error("'%s' is not a readable trace-cmd data file (truncated, damaged, or of an "
                          "unsupported version)",
                          path);
                return EXIT_FAILURE;
        }
        r.tep = tracecmd_get_tep(handle);
        if (replay_check_formats(r.tep, path) < 0)
                goto finish;
        r.page_size = (size_t) MAX(tep_get_page_size(r.tep), 1);
        if (tep_set_function_resolver(r.tep, replay_no_function, NULL) < 0) {
                log_oom();
                goto finish;
        }

        /* `trace-cmd record -B NAME` puts an instance's data in a buffer of its own, next to an empty
         * top one: replay them all, merged in time as `trace-cmd report` does. */
        n_instances = MAX(tracecmd_buffer_instances(handle), 0);
        handles = calloc((size_t) n_instances + 1, sizeof(*handles));
        r.sources = calloc((size_t) n_instances + 1, sizeof(ReplaySource));
        if (!handles || !r.sources) {
                log_oom();
                goto finish;
        }
        r.sources[r.n_sources++] = (ReplaySource){ .handle = handle, .name = "" };
        for (int i = 0; i < n_instances; i++) {
                struct tracecmd_input *h = tracecmd_buffer_instance_handle(handle, i);
                if (!h) {
                        log_error("cannot read buffer '%s' of '%s'",
                                  escape_text(strempty(tracecmd_buffer_instance_name(handle, i)),
                                              (char[256]){}, 256),
                                  path);
                        goto finish;
                }
                r.sources[r.n_sources++] = (ReplaySource){
                        .handle = h,
                        .name = strempty(tracecmd_buffer_instance_name(handle, i)),
                };
        }
        for (size_t i = 0; i < r.n_sources; i++)
                handles[i] = r.sources[i].handle;

        if (replay_load_stats(&r, tracecmd_get_cpustats(handle)) < 0 || !(r.batch = batch_new()) ||
            decoder_new(r.tep,
                        &(DecoderCallbacks){ .comm = replay_comm,
                                             .missed = replay_missed,
                                             .ksym = replay_ksym,
                                             .userdata = &r },
                        &r.decoder) < 0) {
                log_oom();
                goto finish;
        }
        if (replay_select(&r, o) < 0)
                goto finish;

        k = r.n_sources == 1
                    ? tracecmd_iterate_events(handle, NULL, 0, replay_on_record, &r)
                    : tracecmd_iterate_events_multi(handles, (int) r.n_sources, replay_on_record, &r);
        /* Runs of unknown records still open at the end, as at the end of a page. */
        for (size_t i = 0; k >= 0 && i < r.n_sources; i++)
                for (unsigned cpu = 0; k >= 0 && cpu < r.sources[i].n_cpus; cpu++) {
                        k = decoder_flush_unknown(&r.sources[i].cpus[cpu].unknown, r.batch, cpu);
                        if (k >= 0)
                                k = replay_emit(&r, true);
                }
        if (k >= 0) /* and the last, which waited for a stack */
                k = replay_emit(&r, true);
        if (k < 0 && k != -EPIPE) {
                log_error_errno(k == -1 ? -EIO : k, "cannot read the records of '%s': %m", path);
                goto finish;
        }
        status = output_status(out);
        if (r.damaged > 0)
                log_error("warning: %" PRIu64 " records of '%s' were shorter than their format", r.damaged,
                          path);

finish:
        for (size_t i = 0; i < r.n_sources; i++) {
                if (i > 0)
                        tracecmd_close(r.sources[i].handle);
                free(r.sources[i].cpus);
        }
        free(r.sources);
        free(r.held_raw);
        decoder_free(r.decoder);
        selection_done(&r.selection);
        batch_unref(r.batch);
        return status;
}

/* libtracecmd 3.1 crashes on some truncated files (tracecmd_buffer_instance_handle() frees what it
 * never set up when an instance's data is cut short; a mapped page past the end is a SIGBUS): read
 * the file in a child, and turn a crash into an error. */
static int replay_dat_isolated(const char *path, const ReplayOptions *o, Output *out) {
        pid_t pid;
        int status;

        pid = fork();
        if (pid < 0)
                return log_error_errno(-errno, "cannot fork: %m"), EXIT_FAILURE;
        if (pid == 0)
                _exit(replay_dat(path, o, out));

        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return log_error_errno(-errno, "cannot wait for the replay: %m"), EXIT_FAILURE;
        if (WIFEXITED(status))
                return WEXITSTATUS(status);
        switch (WTERMSIG(status)) {
        case SIGSEGV:
        case SIGBUS:
        case SIGABRT:
        case SIGFPE:
        case SIGILL:
                log_error("'%s' is truncated or damaged: libtracecmd crashed reading it (%s)", path,
                          strsignal(WTERMSIG(status)));
                return EXIT_FAILURE;
        case SIGINT:
        case SIGTERM:
        case SIGPIPE:
                return EXIT_SUCCESS;
        default:
                log_error("the replay of '%s' was killed (%s)", path, strsignal(WTERMSIG(status)));
                return EXIT_FAILURE;
        }
}

int replay_file(const char *path, const ReplayOptions *o) {
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *buf = NULL;
        Output out = { .fd = o->out_fd > 0 ? o->out_fd : STDOUT_FILENO,
                       .escape = o->out_fd <= 0 && isatty(STDOUT_FILENO) };
        char head[sizeof(dat_magic)];
        size_t n = 0;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return log_error_errno(-errno, "cannot open '%s': %m", path), EXIT_FAILURE;
        while (n < sizeof(head)) {
                ssize_t k = read(fd, head + n, sizeof(head) - n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return log_error_errno(-errno, "cannot read '%s': %m", path), EXIT_FAILURE;
                if (k == 0)
                        break;
                n += (size_t) k;
        }

        out.buf = buf = malloc(OUTPUT_BUFFER_SIZE);
        if (!buf)
                return log_oom(), EXIT_FAILURE;
        /* A reader that goes away must show up as EPIPE, to end quietly with 0. */
        (void) signal(SIGPIPE, SIG_IGN);

        if (n == sizeof(dat_magic) && memcmp(head, dat_magic, sizeof(dat_magic)) == 0) {
                const char *why;
                int k = datcheck_file(fd, &why);

                if (k == -EBADMSG)
                        return log_error("'%s' is damaged: %s", path, why), EXIT_FAILURE;
                if (k < 0)
                        return log_error_errno(k, "cannot read '%s': %m", path), EXIT_FAILURE;
                fd = safe_close(fd);
                return o->in_process ? replay_dat(path, o, &out) : replay_dat_isolated(path, o, &out);
        }
        /* An empty capture is a stream that printed nothing. */
        if (n > 0 && head[0] != '{') {
                log_error("'%s' is not a capture: neither a trace-cmd data file nor NDJSON of tpctl stream",
                          path);
                return EXIT_FAILURE;
        }
        if (o->filter || o->print)
                return usage_error("%s needs a trace-cmd data file: '%s' is NDJSON, whose records keep no "
                                   "raw data",
                                   o->filter ? "--filter" : "--print", path);
        return replay_ndjson(fd, head, n, path, o, &out);
}

int replay_verb(const CommonOptions *c, char **args, size_t n) {
        _cleanup_free_ char **events = calloc(c->n_events + n, sizeof(char *));

        if (!events)
                return log_oom(), EXIT_FAILURE;
        /* EVENT arguments after FILE, like stream's. */
        memcpy(events, c->events, c->n_events * sizeof(char *));
        memcpy(events + c->n_events, args + 1, (n - 1) * sizeof(char *));
        return replay_file(args[0], &(ReplayOptions){
                                            .events = events,
                                            .n_events = c->n_events + n - 1,
                                            .pids = c->pids,
                                            .n_pids = c->n_pids,
                                            .cpus = c->cpus,
                                            .n_cpus = c->n_cpus,
                                            .filter = c->filter,
                                            .print = c->print,
                                    });
}
