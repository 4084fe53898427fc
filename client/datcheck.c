/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>
#include <zstd.h>

#include "core/page.h"
#include "datcheck.h"
#include "lines.h"
#include "tracecmd-output.h"
#include "util.h"

/* More formats or systems than any kernel has: a damaged count. */
#define DATCHECK_COUNT_MAX 65536U
#define DATCHECK_STRING_MAX 256U
/* An option's data, a section or a chunk of CPU data (uncompressed): more is a damaged size, and
 * libtracecmd would allocate it. */
#define DATCHECK_BLOCK_MAX (64U * 1024U * 1024U)
/* Options sections a file chains (each DONE option names the next): libtracecmd follows the chain
 * by recursion, and a loop would never end. */
#define DATCHECK_OPTIONS_SECTIONS_MAX 64U
/* A version 7 section's flag: its data is one compressed block. */
#define DATCHECK_SECTION_COMPRESSED 1U

typedef enum Compression {
        COMPRESSION_NONE,
        COMPRESSION_ZSTD,
        COMPRESSION_ZLIB,
} Compression;

/* A cursor over the file (fd) or over bytes in memory (mem: a section or chunk uncompressed). */
typedef struct Reader {
        int fd;
        const uint8_t *mem;
        uint64_t pos, size;
        bool big_endian;
        unsigned long_size;
        size_t page_size;
} Reader;

/* What a check of the whole file knows. */
typedef struct Check {
        Reader file;
        bool v7;
        Compression compression;
        /* Version 7: where the sections the options name lie (0: not named). */
        uint64_t sections[TRACECMD_OPTION_CMDLINES - TRACECMD_OPTION_HEADER_INFO + 1];
        const char *why;
} Check;

static int reader_get(Reader *r, void *buf, size_t n) {
        size_t done = 0;

        if (n > r->size - r->pos)
                return -EBADMSG;
        if (r->mem) {
                memcpy(buf, r->mem + r->pos, n);
                r->pos += n;
                return 0;
        }
        while (done < n) {
                ssize_t k = pread(r->fd, (char *) buf + done, n - done, (off_t) (r->pos + done));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (k == 0)
                        return -EBADMSG;
                done += (size_t) k;
        }
        r->pos += n;
        return 0;
}

/* A reader over n bytes in memory, with the file's byte order and sizes. */
static Reader reader_memory(const Reader *file, const uint8_t *mem, uint64_t n) {
        Reader m = *file;

        m.fd = -1;
        m.mem = mem;
        m.pos = 0;
        m.size = n;
        return m;
}

static int reader_number(Reader *r, unsigned size, uint64_t *ret) {
        uint8_t b[8];
        uint64_t v = 0;
        int k = reader_get(r, b, size);

        if (k < 0)
                return k;
        for (unsigned i = 0; i < size; i++)
                v |= (uint64_t) b[r->big_endian ? i : size - 1 - i] << (8 * (size - 1 - i));
        *ret = v;
        return 0;
}

/* A NUL-terminated string of at most DATCHECK_STRING_MAX bytes, into buf. */
static int reader_string(Reader *r, char buf[static DATCHECK_STRING_MAX + 1]) {
        for (size_t i = 0; i <= DATCHECK_STRING_MAX; i++) {
                int k = reader_get(r, buf + i, 1);
                if (k < 0)
                        return k;
                if (buf[i] == 0)
                        return 0;
        }
        return -EBADMSG;
}

/* A section of size bytes (a number of size_bytes bytes first) that must fit in the file. */
static int reader_skip_sized(Reader *r, unsigned size_bytes) {
        uint64_t n;
        int k = reader_number(r, size_bytes, &n);

        if (k < 0)
                return k;
        if (n > r->size - r->pos)
                return -EBADMSG;
        r->pos += n;
        return 0;
}

/* n bytes at the reader's position, into memory (freed by the caller). */
static int reader_load(Reader *r, uint64_t n, uint8_t **ret) {
        _cleanup_free_ uint8_t *buf = NULL;
        int k;

        if (n > DATCHECK_BLOCK_MAX || n > r->size - r->pos)
                return -EBADMSG;
        buf = malloc(n + 1);
        if (!buf)
                return -ENOMEM;
        if ((k = reader_get(r, buf, n)) < 0)
                return k;
        buf[n] = 0;
        *ret = TAKE_PTR(buf);
        return 0;
}

/* A compressed block (zsize bytes at r's position) that must uncompress to exactly usize bytes,
 * as libtracecmd's tracecmd_uncompress_block() and tracecmd_uncompress_chunk() need. */
static int reader_uncompress(Check *c, Reader *r, uint64_t zsize, uint64_t usize, uint8_t **ret) {
        _cleanup_free_ uint8_t *z = NULL, *u = NULL;
        int k;

        if (usize > DATCHECK_BLOCK_MAX || c->compression == COMPRESSION_NONE)
                return -EBADMSG;
        if ((k = reader_load(r, zsize, &z)) < 0)
                return k;
        u = malloc(usize + 1);
        if (!u)
                return -ENOMEM;
        if (c->compression == COMPRESSION_ZSTD) {
                size_t n = ZSTD_decompress(u, usize, z, zsize);
                if (ZSTD_isError(n) || n != usize)
                        return -EBADMSG;
        } else {
                uLongf n = usize;
                if (uncompress(u, &n, z, zsize) != Z_OK || n != usize)
                        return -EBADMSG;
        }
        u[usize] = 0;
        *ret = TAKE_PTR(u);
        return 0;
}

/* libtraceevent 1.7 reads past a printk format line (tep_parse_printk_formats(),
 * tep_register_print_string()) that has no ':', or less than 3 bytes after its ": " and the quote
 * that may open the format. The text is read up to its first NUL, as libtraceevent reads it. */
static int check_printk_text(const char *text) {
        for (const char *line = text; *line;) {
                const char *end = strchrnul(line, '\n'), *colon, *fmt;

                if (end > line) {
                        while (line < end && *line == ':')
                                line++;
                        colon = line < end ? memchr(line, ':', (size_t) (end - line)) : NULL;
                        if (line < end && !colon)
                                return -EBADMSG;
                        if (colon) {
                                fmt = colon + 2;
                                if (fmt < end && *fmt == '"')
                                        fmt++;
                                if (fmt > end || end - fmt < 3)
                                        return -EBADMSG;
                        }
                }
                line = *end ? end + 1 : end;
        }
        return 0;
}

static int check_printk(Reader *r) {
        _cleanup_free_ uint8_t *text = NULL;
        uint64_t n;
        int k;

        if ((k = reader_number(r, 4, &n)) < 0 || (k = reader_load(r, n, &text)) < 0)
                return k;
        return check_printk_text((const char *) text);
}

static int check_header_info(Reader *r) {
        char name[13];
        int k;

        if ((k = reader_get(r, name, 12)) < 0 || memcmp(name, "header_page", 12) != 0 ||
            (k = reader_skip_sized(r, 8)) < 0 || (k = reader_get(r, name, 13)) < 0 ||
            memcmp(name, "header_event", 13) != 0 || (k = reader_skip_sized(r, 8)) < 0)
                return k < 0 ? k : -EBADMSG;
        return 0;
}

static int check_ftrace_formats(Reader *r) {
        uint64_t n;
        int k;

        if ((k = reader_number(r, 4, &n)) < 0)
                return k;
        if (n > DATCHECK_COUNT_MAX)
                return -EBADMSG;
        for (uint64_t i = 0; i < n; i++)
                if ((k = reader_skip_sized(r, 8)) < 0)
                        return k;
        return 0;
}

static int check_event_formats(Reader *r) {
        char name[DATCHECK_STRING_MAX + 1];
        uint64_t n, m;
        int k;

        if ((k = reader_number(r, 4, &n)) < 0)
                return k;
        if (n > DATCHECK_COUNT_MAX)
                return -EBADMSG;
        for (uint64_t i = 0; i < n; i++) {
                if ((k = reader_string(r, name)) < 0 || (k = reader_number(r, 4, &m)) < 0)
                        return k;
                if (m > DATCHECK_COUNT_MAX)
                        return -EBADMSG;
                for (uint64_t j = 0; j < m; j++)
                        if ((k = reader_skip_sized(r, 8)) < 0)
                                return k;
        }
        return 0;
}

/* libtraceevent 1.7's kbuffer, with which libtracecmd walks pages, reads past a page whose commit
 * word or entries overstate their length: each page must walk as tpd walks live ones (core/page.c),
 * which reads the header of a little-endian kernel with 8-byte longs (others are left to kbuffer).
 * A CPU's data need not end with a whole page: libtracecmd maps it (allocate_page_map()) up to its
 * end, and a mapping shows the file's bytes, then zeros to the end of the machine's page, and faults
 * past that. A trace page must lie within what is mapped, and walks as the mapping shows it. */
static int check_pages(Reader *r, uint64_t offset, uint64_t size) {
        _cleanup_free_ uint8_t *page = NULL;
        uint64_t pos = r->pos, limit = r->size;
        int k = 0;

        if (offset > r->size || size > r->size - offset)
                return -EBADMSG;
        if (r->big_endian || r->long_size != 8 || size == 0)
                return 0;
        if (!r->mem) {
                uint64_t sys = (uint64_t) sysconf(_SC_PAGESIZE);

                if (offset % sys != 0)
                        return -EBADMSG;
                limit = MIN(offset + size, r->size) + sys - 1;
                limit -= limit % sys;
        }
        page = malloc(r->page_size);
        if (!page)
                return -ENOMEM;
        for (uint64_t at = offset; k >= 0 && at < offset + size; at += r->page_size) {
                uint64_t n = MIN((uint64_t) r->page_size, r->size - at);
                PageWalk w;
                PageEntry e;

                if (at + r->page_size > limit)
                        return -EBADMSG;
                memset(page + n, 0, r->page_size - n);
                r->pos = at;
                k = reader_get(r, page, n);
                if (k >= 0)
                        k = page_walk_init(&w, page, r->page_size);
                while (k >= 0 && (k = page_walk_next(&w, &e)) > 0)
                        ;
        }
        r->pos = pos;
        return k;
}

/* Trace data at offset, of size bytes in the file: pages, or (compressed) a count of chunks, each
 * of which must uncompress to whole pages. */
static int check_trace_data(Check *c, uint64_t offset, uint64_t size, bool compressed) {
        Reader r = c->file;
        uint64_t n;
        int k;

        c->why = "its CPU data lies beyond its end";
        if (offset > r.size || size > r.size - offset)
                return -EBADMSG;
        if (!compressed) {
                c->why = "a page of its CPU data is damaged or lies beyond its end";
                return check_pages(&r, offset, size);
        }
        /* The size libtracecmd 1.3 writes for compressed data is 4 bytes short of what its chunks
         * take, and its reading looks only at the chunks' own sizes: those must lie in the file. */
        r.pos = offset;
        if ((k = reader_number(&r, 4, &n)) < 0)
                return k;
        if (n > DATCHECK_COUNT_MAX)
                return -EBADMSG;
        for (uint64_t i = 0; i < n; i++) {
                _cleanup_free_ uint8_t *data = NULL;
                uint64_t zsize, usize;
                Reader m;

                c->why = "a chunk of its CPU data is cut short or does not uncompress to whole pages";
                if ((k = reader_number(&r, 4, &zsize)) < 0 || (k = reader_number(&r, 4, &usize)) < 0)
                        return k;
                if (usize % r.page_size != 0)
                        return -EBADMSG;
                if ((k = reader_uncompress(c, &r, zsize, usize, &data)) < 0)
                        return k;
                c->why = "a page of its CPU data is damaged";
                m = reader_memory(&r, data, usize);
                if ((k = check_pages(&m, 0, usize)) < 0)
                        return k;
        }
        return 0;
}

/* A version 7 section's header at offset, of id want: *ret_r then reads the section's data (as it
 * lies in the file, compressed or not). */
static int section_header(Check *c, uint64_t offset, uint64_t want, Reader *ret_r, bool *ret_compressed) {
        Reader r = c->file;
        uint64_t id, flags, desc, size;
        int k;

        if (offset > r.size)
                return -EBADMSG;
        r.pos = offset;
        if ((k = reader_number(&r, 2, &id)) < 0 || (k = reader_number(&r, 2, &flags)) < 0 ||
            (k = reader_number(&r, 4, &desc)) < 0 || (k = reader_number(&r, 8, &size)) < 0)
                return k;
        if (id != want || size > r.size - r.pos ||
            ((flags & DATCHECK_SECTION_COMPRESSED) && c->compression == COMPRESSION_NONE))
                return -EBADMSG;
        r.size = r.pos + size;
        *ret_r = r;
        *ret_compressed = flags & DATCHECK_SECTION_COMPRESSED;
        return 0;
}

/* A version 7 section at offset, of id want: its data into memory, uncompressed. */
static int load_section(Check *c, uint64_t offset, uint64_t want, uint8_t **ret, uint64_t *ret_size) {
        uint64_t zsize, usize;
        bool compressed;
        Reader r;
        int k;

        if ((k = section_header(c, offset, want, &r, &compressed)) < 0)
                return k;
        if (!compressed) {
                *ret_size = r.size - r.pos;
                return reader_load(&r, r.size - r.pos, ret);
        }
        if ((k = reader_number(&r, 4, &zsize)) < 0 || (k = reader_number(&r, 4, &usize)) < 0)
                return k;
        *ret_size = usize;
        return reader_uncompress(c, &r, zsize, usize, ret);
}

/* A BUFFER or BUFFER_TEXT option, as libtracecmd's handle_buffer_option() reads it: its strings
 * must end within it (it strdup()s them), and in version 7 each CPU's data must lie in the file
 * (else tracecmd_open_fd() fails into a tracecmd_close() that crashes), once each, and walk. */
static int check_buffer_option(Check *c, uint64_t id, const uint8_t *data, uint64_t size) {
        char name[DATCHECK_STRING_MAX + 1], clock[DATCHECK_STRING_MAX + 1];
        _cleanup_free_ uint8_t *seen = NULL;
        Reader r = reader_memory(&c->file, data, size);
        uint64_t offset, page_size, cpus;
        bool compressed;
        Reader section;
        int k;

        if ((k = reader_number(&r, 8, &offset)) < 0 || (k = reader_string(&r, name)) < 0)
                return k;
        if (!c->v7)
                return offset > c->file.size ? -EBADMSG : 0;
        if ((k = reader_string(&r, clock)) < 0)
                return k;
        if (id == TRACECMD_OPTION_BUFFER_TEXT) {
                c->why = "it is a latency trace (text, without records to replay)";
                return -EBADMSG;
        }
        if ((k = section_header(c, offset, id, &section, &compressed)) < 0)
                return k;
        if ((k = reader_number(&r, 4, &page_size)) < 0 || (k = reader_number(&r, 4, &cpus)) < 0)
                return k;
        if (page_size != c->file.page_size || cpus > LINES_CPUS_MAX)
                return -EBADMSG;
        seen = calloc(LINES_CPUS_MAX / 8, 1);
        if (!seen)
                return -ENOMEM;
        for (uint64_t i = 0; i < cpus; i++) {
                uint64_t cpu, at, n;

                c->why = "a buffer's option is cut short or damaged";
                if ((k = reader_number(&r, 4, &cpu)) < 0 || (k = reader_number(&r, 8, &at)) < 0 ||
                    (k = reader_number(&r, 8, &n)) < 0)
                        return k;
                if (cpu >= LINES_CPUS_MAX || (seen[cpu / 8] & (1U << (cpu % 8))))
                        return -EBADMSG;
                seen[cpu / 8] |= (uint8_t) (1U << (cpu % 8));
                if ((k = check_trace_data(c, at, n, compressed)) < 0)
                        return k;
        }
        return 0;
}

/* One option, as libtracecmd 1.3 reads it (trace-input.c handle_options()): it takes the text of
 * some as NUL-terminated and reads numbers of others without looking at their size. Event hooks,
 * process maps and guests' clocks are parsed by code that trusts the file further; tpctl replay
 * shows none of them, and refuses files that have them. */
static int check_option(Check *c, uint64_t id, const uint8_t *data, uint64_t size) {
        switch (id) {
        case TRACECMD_OPTION_DATE:
        case TRACECMD_OPTION_TRACECLOCK:
        case TRACECMD_OPTION_UNAME:
        case TRACECMD_OPTION_OFFSET:
        case TRACECMD_OPTION_VERSION:
                c->why = "an option's text does not end";
                return size >= 1 && data[size - 1] == 0 ? 0 : -EBADMSG;
        case TRACECMD_OPTION_CPUSTAT:
                c->why = "an option is cut short";
                return size >= 1 ? 0 : -EBADMSG;
        case TRACECMD_OPTION_CPUCOUNT:
                c->why = "an option is cut short";
                return size >= 4 ? 0 : -EBADMSG;
        case TRACECMD_OPTION_HOOK:
        case TRACECMD_OPTION_PROCMAPS:
        case TRACECMD_OPTION_TIME_SHIFT:
        case TRACECMD_OPTION_GUEST:
                c->why = "it has event hooks, process maps or guests, which tpctl replay does not read";
                return -EBADMSG;
        case TRACECMD_OPTION_BUFFER:
        case TRACECMD_OPTION_BUFFER_TEXT:
                c->why = "a buffer's option is cut short or damaged";
                return check_buffer_option(c, id, data, size);
        case TRACECMD_OPTION_HEADER_INFO:
        case TRACECMD_OPTION_FTRACE_EVENTS:
        case TRACECMD_OPTION_EVENT_FORMATS:
        case TRACECMD_OPTION_KALLSYMS:
        case TRACECMD_OPTION_PRINTK:
        case TRACECMD_OPTION_CMDLINES: {
                /* Version 7 names where these sections lie; libtracecmd ignores shorter ones. */
                Reader r = reader_memory(&c->file, data, size);
                uint64_t offset;

                if (c->v7 && size >= 8 && reader_number(&r, 8, &offset) >= 0)
                        c->sections[id - TRACECMD_OPTION_HEADER_INFO] = offset;
                return 0;
        }
        default:
                /* The others are read with their size, or not by replay's reading. */
                return 0;
        }
}

/* Options up to DONE (version 6: from the file; version 7: from one section's data). In version 7
 * *ret_next is where DONE says the next options section lies (0: none). */
static int check_options(Check *c, Reader *r, uint64_t *ret_next) {
        for (unsigned n = 0;; n++) {
                _cleanup_free_ uint8_t *data = NULL;
                uint64_t id, size;
                int k;

                c->why = "its options are cut short or damaged";
                if ((k = reader_number(r, 2, &id)) < 0)
                        return k;
                if (id == TRACECMD_OPTION_DONE && !c->v7)
                        return 0;
                if (n >= DATCHECK_COUNT_MAX)
                        return -EBADMSG;
                if ((k = reader_number(r, 4, &size)) < 0 || (k = reader_load(r, size, &data)) < 0)
                        return k;
                if (id == TRACECMD_OPTION_DONE) {
                        Reader d = reader_memory(r, data, size);
                        return reader_number(&d, 8, ret_next);
                }
                if ((k = check_option(c, id, data, size)) < 0)
                        return k;
        }
}

static int check_v6(Check *c) {
        Reader *r = &c->file;
        char name[DATCHECK_STRING_MAX + 1];
        uint64_t n;
        int k;

        c->why = "the header page or header event is cut short";
        if ((k = check_header_info(r)) < 0)
                return k;
        c->why = "the ftrace formats are cut short";
        if ((k = check_ftrace_formats(r)) < 0)
                return k;
        c->why = "the event formats are cut short";
        if ((k = check_event_formats(r)) < 0)
                return k;
        c->why = "the kernel symbols, printk formats or command lines are cut short or damaged";
        if ((k = reader_skip_sized(r, 4)) < 0 || (k = check_printk(r)) < 0 ||
            (k = reader_skip_sized(r, 8)) < 0)
                return k;

        c->why = "its count of CPUs is none a kernel has";
        if ((k = reader_number(r, 4, &n)) < 0)
                return k;
        if (n > LINES_CPUS_MAX)
                return -EBADMSG;

        c->why = "its options or CPU data are cut short or damaged";
        if ((k = reader_get(r, name, 10)) < 0)
                return k;
        if (memcmp(name, "options  ", 10) == 0) {
                if ((k = check_options(c, r, NULL)) < 0)
                        return k;
                c->why = "its options or CPU data are cut short or damaged";
                if ((k = reader_get(r, name, 10)) < 0)
                        return k;
        }
        /* libtracecmd 1.3 iterates a latency trace's CPUs, which it never set up (a NULL
         * dereference in tracecmd_peek_data()): it is text, with no records to replay. */
        c->why = "it is a latency trace (text, without records to replay)";
        if (memcmp(name, "latency  ", 10) == 0)
                return -EBADMSG;
        c->why = "its options or CPU data are cut short or damaged";
        if (memcmp(name, "flyrecord", 10) != 0)
                return -EBADMSG;
        /* libtracecmd maps the pages of each CPU: one beyond the end is a SIGBUS. */
        for (uint64_t i = 0; i < n; i++) {
                uint64_t offset, size;

                if ((k = reader_number(r, 8, &offset)) < 0 || (k = reader_number(r, 8, &size)) < 0)
                        return k;
                if ((k = check_trace_data(c, offset, size, false)) < 0)
                        return k;
        }
        return 0;
}

static int check_kallsyms(Reader *r) {
        return reader_skip_sized(r, 4);
}

static int check_cmdlines(Reader *r) {
        return reader_skip_sized(r, 8);
}

typedef int (*SectionCheck)(Reader *r);

/* Version 7: the chain of options sections from the first, then the sections they name. */
static int check_v7(Check *c, uint64_t options) {
        static const SectionCheck check_section[] = {
                [TRACECMD_OPTION_HEADER_INFO - TRACECMD_OPTION_HEADER_INFO] = check_header_info,
                [TRACECMD_OPTION_FTRACE_EVENTS - TRACECMD_OPTION_HEADER_INFO] = check_ftrace_formats,
                [TRACECMD_OPTION_EVENT_FORMATS - TRACECMD_OPTION_HEADER_INFO] = check_event_formats,
                [TRACECMD_OPTION_KALLSYMS - TRACECMD_OPTION_HEADER_INFO] = check_kallsyms,
                [TRACECMD_OPTION_PRINTK - TRACECMD_OPTION_HEADER_INFO] = check_printk,
                [TRACECMD_OPTION_CMDLINES - TRACECMD_OPTION_HEADER_INFO] = check_cmdlines,
        };
        uint64_t visited[DATCHECK_OPTIONS_SECTIONS_MAX];
        int k;

        for (unsigned n = 0; options != 0; n++) {
                _cleanup_free_ uint8_t *data = NULL;
                uint64_t size;
                Reader m;

                c->why = "its options sections are damaged or chained in a loop";
                if (n >= DATCHECK_OPTIONS_SECTIONS_MAX)
                        return -EBADMSG;
                for (unsigned i = 0; i < n; i++)
                        if (visited[i] == options)
                                return -EBADMSG;
                visited[n] = options;
                if ((k = load_section(c, options, TRACECMD_OPTION_DONE, &data, &size)) < 0)
                        return k;
                m = reader_memory(&c->file, data, size);
                if ((k = check_options(c, &m, &options)) < 0)
                        return k;
        }

        c->why = "a section of its headers, formats, symbols or names is cut short or damaged";
        for (size_t i = 0; i < ELEMENTSOF(c->sections); i++) {
                _cleanup_free_ uint8_t *data = NULL;
                uint64_t size;
                Reader m;

                if (c->sections[i] == 0)
                        continue;
                if ((k = load_section(c, c->sections[i], TRACECMD_OPTION_HEADER_INFO + i, &data, &size)) < 0)
                        return k;
                m = reader_memory(&c->file, data, size);
                if ((k = check_section[i](&m)) < 0)
                        return k;
        }
        return 0;
}

int datcheck_file(int fd, const char **ret_why) {
        static const char magic[] = { 0x17, 0x08, 0x44, 't', 'r', 'a', 'c', 'i', 'n', 'g' };
        char buf[DATCHECK_STRING_MAX + 1], version[DATCHECK_STRING_MAX + 1];
        Check c = { .file = { .fd = fd } };
        Reader *r = &c.file;
        struct stat st;
        uint64_t v;
        uint8_t b[2];
        int k;

        if (fstat(fd, &st) < 0)
                return -errno;
        r->size = (uint64_t) st.st_size;

        *ret_why = "not a trace-cmd data file";
        if ((k = reader_get(r, buf, sizeof(magic))) < 0 || memcmp(buf, magic, sizeof(magic)) != 0 ||
            (k = reader_string(r, version)) < 0)
                return k < 0 ? k : -EBADMSG;
        *ret_why = "of a version other than 6 or 7";
        if (!streq(version, "6") && !streq(version, "7"))
                return -EBADMSG;

        *ret_why = "its byte order, long size or page size is none a kernel has";
        if ((k = reader_get(r, b, 2)) < 0)
                return k;
        if (b[0] > 1 || (b[1] != 4 && b[1] != 8))
                return -EBADMSG;
        r->big_endian = b[0] == 1;
        r->long_size = b[1];
        if ((k = reader_number(r, 4, &v)) < 0)
                return k;
        /* Sub-buffers of 4 KiB up to 1 MiB (64 KiB pages, the kernel's largest sub-buffers). */
        if (v < 4096 || v > 1024 * 1024 || (v & (v - 1)) != 0)
                return -EBADMSG;
        r->page_size = (size_t) v;

        if (streq(version, "6")) {
                k = check_v6(&c);
                *ret_why = c.why;
                return k;
        }
        c.v7 = true;

        *ret_why = "its compression is unknown";
        if ((k = reader_string(r, buf)) < 0 || (k = reader_string(r, version)) < 0)
                return k;
        if (streq(buf, "zstd"))
                c.compression = COMPRESSION_ZSTD;
        else if (streq(buf, "zlib"))
                c.compression = COMPRESSION_ZLIB;
        else if (!streq(buf, "none"))
                return -EBADMSG;
        *ret_why = "its options lie beyond its end";
        if ((k = reader_number(r, 8, &v)) < 0)
                return k;
        if (v < r->pos || v > r->size)
                return -EBADMSG;
        k = check_v7(&c, v);
        *ret_why = c.why;
        return k;
}
