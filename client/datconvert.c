/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>
#include <traceevent/event-parse.h>

#include "core/decode.h"
#include "core/names.h"
#include "core/pack.h"
#include "core/page.h"
#include "datconvert.h"
#include "datfile.h"
#include "linereader.h"
#include "message.h"
#include "util.h"

/* A line of NDJSON is a record of at most a page: far below this. */
#define LINE_MAX_BYTES (1U << 20)
/* More CPUs than Linux numbers (CONFIG_NR_CPUS is at most 8192): a line that says so is not one
 * of tpd's. */
#define CPUS_MAX 8192U
#define FORMAT_MAX_BYTES (1U << 20)

/* Where a kernel's formats are: tracefs, or its old place under debugfs. */
static const char *const tracing_dirs[] = { "/sys/kernel/tracing", "/sys/kernel/debug/tracing" };

typedef struct ConvertCpu {
        uint8_t *page;
        PageBuild build;
        bool open;
        uint64_t lost; /* reported before the next page, by its loss flag and count */
        uint64_t lost_ts;
} ConvertCpu;

/* The last name given for each pid: a name goes to the file when it changes. */
typedef struct CommSlot {
        int32_t pid; /* -1: free */
        char comm[17];
} CommSlot;

typedef struct Convert {
        const char *in;
        const char *tracing;
        struct tep_handle *tep;
        Decoder *decoder;
        DatMeta *meta;
        DatFile *file;
        ConvertCpu *cpus;
        unsigned n_cpus;
        size_t page_size;
        CommSlot *comms;
        size_t n_comm_slots, n_comms;
        unsigned comm_bits;
        uint64_t comm_key;
        JsonBuf packed;
        json_tokener *tok;
        uint64_t line;
        uint64_t skipped; /* notices and clock records: a data file has no place for them */
        bool has_clock;
} Convert;

static int read_small_file(const char *path, char **ret, size_t *ret_size) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        _cleanup_free_ char *buf = NULL;
        size_t size = 0;

        if (fd < 0)
                return negative_errno();
        buf = malloc(FORMAT_MAX_BYTES);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                ssize_t n = read(fd, buf + size, FORMAT_MAX_BYTES - size);
                if (n < 0)
                        return negative_errno();
                if (n == 0)
                        break;
                size += (size_t) n;
                if (size == FORMAT_MAX_BYTES)
                        return -EFBIG;
        }
        *ret = TAKE_PTR(buf);
        *ret_size = size;
        return 0;
}

/* A file of the kernel's tracing directory, into the data file's own (datfile.h) and returned. */
static int add_tracing_file(Convert *c, const char *rel, char **ret, size_t *ret_size) {
        _cleanup_free_ char *path = NULL, *content = NULL, *payload = NULL;
        size_t size, n = strlen(rel);
        int r;

        if (asprintf(&path, "%s/%s", c->tracing, rel) < 0)
                return -ENOMEM;
        r = read_small_file(path, &content, &size);
        if (r < 0)
                return r;
        payload = malloc(n + 1 + size);
        if (!payload)
                return -ENOMEM;
        memcpy(payload, rel, n + 1);
        memcpy(payload + n + 1, content, size);
        r = dat_meta_add_file(c->meta, payload, n + 1 + size);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(content);
        *ret_size = size;
        return 0;
}

/* Every ftrace event's format, as tpd sends them to a recording: libtracecmd needs them. */
static int add_ftrace_formats(Convert *c) {
        _cleanup_free_ char *dir = NULL;
        struct dirent *de;
        DIR *d;
        int r = 0;

        if (asprintf(&dir, "%s/events/ftrace", c->tracing) < 0)
                return log_oom();
        d = opendir(dir);
        if (!d)
                return log_error_errno(-errno, "cannot read %s: %m", dir);
        while (r >= 0 && (de = readdir(d))) {
                _cleanup_free_ char *rel = NULL, *content = NULL;
                size_t size;

                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                if (asprintf(&rel, "events/ftrace/%s/format", de->d_name) < 0)
                        r = log_oom();
                else if ((r = add_tracing_file(c, rel, &content, &size)) == -ENOENT)
                        r = 0;
                else if (r < 0)
                        log_error_errno(r, "cannot read %s/%s: %m", c->tracing, rel);
        }
        closedir(d);
        return r;
}

static int find_tracing(Convert *c) {
        _cleanup_free_ char *content = NULL;
        size_t size;
        int r = -ENOENT;

        for (size_t i = 0; i < ELEMENTSOF(tracing_dirs); i++) {
                c->tracing = tracing_dirs[i];
                r = add_tracing_file(c, "events/header_page", &content, &size);
                if (r >= 0)
                        break;
        }
        if (r < 0)
                return log_error_errno(r,
                                       "cannot read this kernel's event formats (%s/events/header_page): %m",
                                       tracing_dirs[0]);
        if (tep_parse_header_page(c->tep, content, (unsigned long) size, (int) sizeof(long)) < 0)
                return log_error_errno(-EBADMSG, "cannot parse %s/events/header_page", c->tracing);
        free(TAKE_PTR(content));
        r = add_tracing_file(c, "events/header_event", &content, &size);
        if (r < 0)
                return log_error_errno(r, "cannot read %s/events/header_event: %m", c->tracing);
        return add_ftrace_formats(c);
}

/* The id of event "system:name" in this kernel, its format read at its first record. */
static int event_id(Convert *c, const char *name) {
        _cleanup_free_ char *system = NULL, *rel = NULL, *content = NULL;
        const char *colon = strchr(name, ':');
        struct tep_event *e;
        size_t size;
        int r;

        /* Only names of [A-Za-z0-9_] pass: a line cannot name another path. */
        if (!names_event_is_valid(name))
                return log_error_errno(-EINVAL, "line %" PRIu64 " of '%s': '%s' is not an event name",
                                       c->line, c->in, name);
        system = strndup(name, (size_t) (colon - name));
        if (!system)
                return log_oom();
        e = tep_find_event_by_name(c->tep, system, colon + 1);
        if (e)
                return e->id;
        if (asprintf(&rel, "events/%s/%s/format", system, colon + 1) < 0)
                return log_oom();
        r = add_tracing_file(c, rel, &content, &size);
        if (r == -ENOENT) {
                log_error("line %" PRIu64 " of '%s': this kernel has no event %s (no %s/%s)", c->line, c->in,
                          name, c->tracing, rel);
                log_hint("tpctl convert takes each event's format from the kernel it runs on: convert on "
                         "the machine that recorded the capture.");
                return -EINVAL;
        }
        if (r < 0)
                return log_error_errno(r, "cannot read %s/%s: %m", c->tracing, rel);
        if (tep_parse_event(c->tep, content, size, system) != 0 ||
            !(e = tep_find_event_by_name(c->tep, system, colon + 1)))
                return log_error_errno(-EINVAL, "cannot parse %s/%s", c->tracing, rel);
        return e->id;
}

/* The slot of pid in the table: its own, or the free one where it goes. */
static CommSlot *comm_slot(Convert *c, int32_t pid) {
        size_t mask = c->n_comm_slots - 1, i;

        for (i = hash_bucket(c->comm_key, (uint32_t) pid, c->comm_bits); c->comms[i].pid >= 0;
             i = (i + 1) & mask)
                if (c->comms[i].pid == pid)
                        break;
        return &c->comms[i];
}

static int comm_grow(Convert *c) {
        unsigned bits = c->comm_bits ? c->comm_bits + 1 : 10;
        CommSlot *old = c->comms;
        size_t n_old = c->n_comm_slots;

        if (bits > 24) /* 2^22 pids at most (PID_MAX_LIMIT) */
                return -ENOMEM;
        c->comms = malloc(((size_t) 1 << bits) * sizeof(CommSlot));
        if (!c->comms) {
                c->comms = old;
                return -ENOMEM;
        }
        if (!c->comm_key)
                c->comm_key = hash_key_new();
        c->comm_bits = bits;
        c->n_comm_slots = (size_t) 1 << bits;
        for (size_t i = 0; i < c->n_comm_slots; i++)
                c->comms[i].pid = -1;
        for (size_t i = 0; i < n_old; i++)
                if (old[i].pid >= 0)
                        *comm_slot(c, old[i].pid) = old[i];
        free(old);
        return 0;
}

/* The data file names each pid once: by its last name, as a capture's names are kept (datfile.c). */
static int note_comm(Convert *c, int32_t pid, const char *comm, size_t len) {
        CommSlot *s;

        if (len > 16 || pid <= 0 || memchr(comm, '\n', len) || memchr(comm, 0, len))
                return 0;
        if (2 * (c->n_comms + 1) > c->n_comm_slots && comm_grow(c) < 0)
                return -ENOMEM;
        s = comm_slot(c, pid);
        if (s->pid == pid && strlen(s->comm) == len && memcmp(s->comm, comm, len) == 0)
                return 0;
        if (s->pid < 0)
                c->n_comms++;
        s->pid = pid;
        memcpy(s->comm, comm, len);
        s->comm[len] = 0;
        return dat_meta_add_comm(c->meta, pid, comm, len);
}

static int flush_page(Convert *c, unsigned cpu) {
        ConvertCpu *k = &c->cpus[cpu];
        int r;

        if (!k->open)
                return 0;
        if (k->lost > 0)
                page_add_missed(k->page, c->page_size, k->lost);
        k->lost = 0;
        k->open = false;
        r = datfile_add_page(c->file, cpu, k->page, k->build.records);
        return r < 0 ? log_error_errno(r, "cannot write the pages of CPU %u: %m", cpu) : 0;
}

static int add_record(Convert *c, unsigned cpu, uint64_t ts) {
        ConvertCpu *k = &c->cpus[cpu];
        int r = -ENOSPC;

        if (k->open)
                r = page_build_add(&k->build, ts, c->packed.data, c->packed.len);
        if (r == -ENOSPC || r == -ERANGE) {
                r = flush_page(c, cpu);
                if (r < 0)
                        return r;
        }
        if (!k->open) {
                /* A loss is told with the first record of a page, at the page's time: the lost
                 * record's, unless the first record's delta to it would need a time extend. */
                uint64_t start = k->lost > 0 && k->lost_ts <= ts && ts - k->lost_ts <= PAGE_DELTA_MAX
                                         ? k->lost_ts
                                         : ts;
                page_build_init(&k->build, k->page, c->page_size, start);
                k->open = true;
                r = page_build_add(&k->build, ts, c->packed.data, c->packed.len);
        }
        if (r < 0)
                return log_error_errno(
                        -EINVAL, "line %" PRIu64 " of '%s': a record of %zu bytes does not fit in a page",
                        c->line, c->in, c->packed.len);
        return 0;
}

static bool get_u64(json_object *o, const char *key, uint64_t *ret) {
        json_object *v;

        if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int) ||
            json_object_get_int64(v) < 0)
                return false;
        *ret = json_object_get_uint64(v);
        return true;
}

static int convert_line(Convert *c, json_object *o) {
        json_object *v;
        uint64_t ts, cpu, n;
        const char *field;
        int id, r;

        if (!get_u64(o, "ts", &ts))
                return log_error_errno(-EINVAL,
                                       "line %" PRIu64 " of '%s' is not a record of tpd: it has no \"ts\"",
                                       c->line, c->in);
        if (!json_object_object_get_ex(o, "cpu", &v)) {
                /* A notice or a clock record: of tpd, not of the kernel. A clock record names the
                 * clock of "ts", which the file keeps as the kernel's trace_clock file says it. */
                if (json_object_object_get_ex(o, "clock", &v) && json_object_is_type(v, json_type_string) &&
                    !c->has_clock) {
                        _cleanup_free_ char *text = NULL;
                        int len = asprintf(&text, "trace_clock%c[%s]\n", 0, json_object_get_string(v));

                        if (len < 0)
                                return log_oom();
                        if (json_object_get_string_len(v) > 0 &&
                            strspn(json_object_get_string(v), "abcdefghijklmnopqrstuvwxyz0123456789_-") ==
                                    (size_t) json_object_get_string_len(v) &&
                            dat_meta_add_file(c->meta, text, (size_t) len) >= 0)
                                c->has_clock = true;
                }
                c->skipped++;
                return 0;
        }
        if (!get_u64(o, "cpu", &cpu) || cpu >= c->n_cpus)
                return log_error_errno(-EINVAL, "line %" PRIu64 " of '%s': \"cpu\" is not a CPU", c->line,
                                       c->in);

        if (get_u64(o, "lost", &n)) {
                ConvertCpu *k = &c->cpus[cpu];

                r = flush_page(c, (unsigned) cpu);
                if (r < 0)
                        return r;
                if (k->lost == 0)
                        k->lost_ts = ts;
                /* Beyond 64 bits the count is unknown, which the page says by its flag alone. */
                k->lost = k->lost > UINT64_MAX - n ? UINT64_MAX : k->lost + n;
                datfile_note_lost(c->file, (unsigned) cpu, n, 0);
                return 0;
        }
        if (!json_object_object_get_ex(o, "event", &v) || !json_object_is_type(v, json_type_string))
                return log_error_errno(-EINVAL, "line %" PRIu64 " of '%s' is neither an event nor a loss",
                                       c->line, c->in);
        id = event_id(c, json_object_get_string(v));
        if (id < 0)
                return id;
        r = decoder_pack(c->decoder, (unsigned) id, o, &c->packed, &field);
        if (r == -ENOMEM)
                return log_oom();
        if (r < 0)
                return log_error_errno(-EINVAL,
                                       "line %" PRIu64
                                       " of '%s': \"%s\" does not fit the format of %s in this kernel "
                                       "(missing or not in it, of another type, or out of its range)",
                                       c->line, c->in, field ? field : "fields", json_object_get_string(v));
        if (json_object_object_get_ex(o, "comm", &v) && json_object_is_type(v, json_type_string)) {
                r = note_comm(c, (int32_t) json_object_get_int64(json_object_object_get(o, "pid")),
                              json_object_get_string(v), (size_t) json_object_get_string_len(v));
                if (r < 0)
                        return log_oom();
        }
        return add_record(c, (unsigned) cpu, ts);
}

/* The CPUs the capture names: the data file has a section for each, up to the highest. */
static int count_cpus(Convert *c, int fd) {
        LineReader lr;
        const char *line;
        size_t len;
        unsigned n = 0;
        int r;

        if (line_reader_init(&lr, fd, LINE_MAX_BYTES, NULL, 0) < 0)
                return log_oom();
        while ((r = line_next(&lr, &line, &len)) > 0) {
                LineHead h;

                line_head_parse(line, len, &h);
                if (!h.has_ts || !h.has_cpu) {
                        /* Not as tpd writes it (jq's, or a person's), or not a record of a CPU:
                         * parsed whole. */
                        json_object *o = json_tokener_parse_ex(c->tok, line,
                                                               (int) MIN(len, (size_t) INT_MAX)),
                                    *v;

                        json_tokener_reset(c->tok);
                        if (json_object_object_get_ex(o, "cpu", &v) &&
                            json_object_is_type(v, json_type_int) && json_object_get_int64(v) >= 0) {
                                h.has_cpu = true;
                                h.cpu = (uint64_t) json_object_get_int64(v);
                        }
                        json_object_put(o);
                }
                if (h.has_cpu && h.cpu < CPUS_MAX)
                        n = MAX(n, (unsigned) h.cpu + 1);
        }
        line_reader_done(&lr);
        if (r < 0 && r != -E2BIG) /* told with its line number by convert_lines() */
                return log_error_errno(r, "cannot read '%s': %m", c->in);
        c->n_cpus = MAX(n, 1U);
        return lseek(fd, 0, SEEK_SET) < 0 ? log_error_errno(-errno, "cannot read '%s' again: %m", c->in) : 0;
}

static int convert_lines(Convert *c, int fd) {
        LineReader lr;
        const char *line;
        size_t len;
        bool told = false; /* the error was logged where it happened */
        int r;

        if (line_reader_init(&lr, fd, LINE_MAX_BYTES, NULL, 0) < 0)
                return log_oom();
        while ((r = line_next(&lr, &line, &len)) > 0) {
                json_object *o;

                told = true;
                c->line++;
                while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
                        len--;
                if (len == 0)
                        continue;
                json_tokener_reset(c->tok);
                o = json_tokener_parse_ex(c->tok, line, (int) MIN(len, (size_t) INT_MAX));
                if (!o || json_tokener_get_parse_end(c->tok) != len ||
                    !json_object_is_type(o, json_type_object)) {
                        json_object_put(o);
                        r = log_error_errno(-EINVAL, "line %" PRIu64 " of '%s' is not a JSON object",
                                            c->line, c->in);
                        break;
                }
                r = convert_line(c, o);
                json_object_put(o);
                if (r < 0)
                        break;
                told = false;
        }
        if (r == -E2BIG && !told)
                r = log_error_errno(-EINVAL, "line %" PRIu64 " of '%s' is longer than %u bytes", c->line + 1,
                                    c->in, LINE_MAX_BYTES);
        else if (r < 0 && !told)
                r = log_error_errno(r, "cannot read '%s': %m", c->in);
        line_reader_done(&lr);
        for (unsigned cpu = 0; r >= 0 && cpu < c->n_cpus; cpu++)
                r = flush_page(c, cpu);
        return r;
}

int convert_to_dat(const char *in, int dir_fd, const char *name) {
        _cleanup_close_ int fd = -1;
        Convert c = { .in = in, .page_size = (size_t) sysconf(_SC_PAGESIZE) };
        char magic[10] = {};
        struct stat st;
        int r, status = EXIT_FAILURE;

        fd = open(in, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return log_error_errno(-errno, "cannot open '%s': %m", in), EXIT_FAILURE;
        if (pread(fd, magic, sizeof(magic), 0) >= 3 && memcmp(magic, "\x17\x08\x44", 3) == 0) {
                log_error("'%s' is a trace-cmd data file already", in);
                log_hint("convert writes a data file from NDJSON (tpctl record -o FILE.ndjson).");
                return EXIT_FAILURE;
        }
        c.tok = json_tokener_new();
        if (!c.tok) {
                log_oom();
                goto finish;
        }
        /* As replay reads NDJSON: a number out of range or bytes that are not UTF-8 are errors, not
         * values that would come back otherwise. */
        json_tokener_set_flags(c.tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        if (count_cpus(&c, fd) < 0)
                goto finish;
        c.tep = tep_alloc();
        c.cpus = calloc(c.n_cpus, sizeof(ConvertCpu));
        if (!c.tep || !c.cpus) {
                log_oom();
                goto finish;
        }
        tep_set_page_size(c.tep, (int) c.page_size);
        tep_set_long_size(c.tep, (int) sizeof(long));
        tep_set_file_bigendian(c.tep, tep_is_local_bigendian(c.tep));
        for (unsigned i = 0; i < c.n_cpus; i++)
                if (!(c.cpus[i].page = malloc(c.page_size))) {
                        log_oom();
                        goto finish;
                }
        r = dat_meta_new(dir_fd, c.n_cpus, c.page_size, 6, &c.meta);
        if (r >= 0)
                r = dat_meta_set_kallsyms(c.meta, false);
        if (r >= 0)
                r = datfile_new(c.meta, &c.file);
        if (r >= 0)
                r = decoder_new(c.tep, &(DecoderCallbacks){}, &c.decoder);
        if (r < 0) {
                log_error_errno(r, "cannot write '%s': %m", name);
                goto finish;
        }
        if (find_tracing(&c) < 0 || convert_lines(&c, fd) < 0)
                goto finish;
        r = datfile_finish(TAKE_PTR(c.file), dir_fd, name, false, &st);
        if (r == -EEXIST) {
                log_error("'%s' exists: tpctl convert does not replace a file.", name);
                goto finish;
        }
        if (r < 0) {
                log_error_errno(r, "cannot write '%s': %m", name);
                goto finish;
        }
        if (c.skipped > 0)
                log_error("note: %" PRIu64
                          " notices and clock records of '%s' are not kept: a data file holds the "
                          "kernel's records only",
                          c.skipped, in);
        status = EXIT_SUCCESS;

finish:
        if (c.file)
                datfile_abort(c.file);
        dat_meta_free(c.meta);
        decoder_free(c.decoder);
        for (unsigned i = 0; c.cpus && i < c.n_cpus; i++)
                free(c.cpus[i].page);
        free(c.cpus);
        free(c.comms);
        jsonbuf_done(&c.packed);
        if (c.tok)
                json_tokener_free(c.tok);
        if (c.tep)
                tep_free(c.tep);
        return status;
}
