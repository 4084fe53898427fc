/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datcheck.h"
#include "lines.h"
#include "page.h"
#include "tracecmd-output.h"
#include "util.h"

/* More formats or systems than any kernel has: a damaged count. */
#define DATCHECK_COUNT_MAX 65536U
#define DATCHECK_STRING_MAX 256U
#define DATCHECK_TEXT_MAX (64U * 1024U)
#define DATCHECK_OPTIONS_MAX (64U * 1024U * 1024U)
/* A version 7 section's flag: its data is one compressed block. */
#define DATCHECK_SECTION_COMPRESSED 1U

typedef struct Reader {
        int fd;
        uint64_t pos, size;
        bool big_endian;
        unsigned long_size;
        size_t page_size;
} Reader;

static int reader_get(Reader *r, void *buf, size_t n) {
        size_t done = 0;

        if (n > r->size - r->pos)
                return -EBADMSG;
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

/* The options of version 6, as libtracecmd 1.3 reads them (trace-input.c handle_options()): it
 * takes the text of some as NUL-terminated and reads numbers of others without looking at their
 * size. */
static int check_options(Reader *r) {
        for (unsigned n = 0;; n++) {
                _cleanup_free_ char *data = NULL;
                uint64_t id, size;
                size_t min = 0;
                bool text = false;
                int k;

                if ((k = reader_number(r, 2, &id)) < 0)
                        return k;
                if (id == TRACECMD_OPTION_DONE)
                        return 0;
                if (n >= DATCHECK_COUNT_MAX || (k = reader_number(r, 4, &size)) < 0)
                        return n >= DATCHECK_COUNT_MAX ? -EBADMSG : k;
                if (size > r->size - r->pos)
                        return -EBADMSG;
                switch (id) {
                case TRACECMD_OPTION_DATE:
                case TRACECMD_OPTION_TRACECLOCK:
                case TRACECMD_OPTION_UNAME:
                case TRACECMD_OPTION_HOOK:
                case TRACECMD_OPTION_OFFSET:
                case TRACECMD_OPTION_VERSION:
                        text = true;
                        min = 1;
                        break;
                case TRACECMD_OPTION_CPUSTAT:
                        min = 1;
                        break;
                case TRACECMD_OPTION_BUFFER:
                case TRACECMD_OPTION_BUFFER_TEXT:
                        /* An offset, then the buffer's name. */
                        text = true;
                        min = 9;
                        break;
                case TRACECMD_OPTION_CPUCOUNT:
                        min = 4;
                        break;
                case TRACECMD_OPTION_TRACEID:
                        min = 8;
                        break;
                case TRACECMD_OPTION_TSC2NSEC:
                        min = 16;
                        break;
                default:
                        /* The others are read with their size, or not by replay's reading. */
                        break;
                }
                if (size < min)
                        return -EBADMSG;
                if (!text) {
                        r->pos += size;
                        continue;
                }
                /* Text up to DATCHECK_TEXT_MAX bytes, ending in a NUL. */
                if (size > DATCHECK_TEXT_MAX)
                        return -EBADMSG;
                data = malloc(size);
                if (!data)
                        return -ENOMEM;
                if ((k = reader_get(r, data, size)) < 0)
                        return k;
                if (data[size - 1] != 0)
                        return -EBADMSG;
        }
}

/* libtraceevent 1.7's kbuffer, with which libtracecmd walks pages, reads past a page whose commit
 * word or entries overstate their length: each page must walk as tpd walks live ones (daemon/page.c),
 * which reads the header of a little-endian kernel with 8-byte longs (others are left to kbuffer). */
static int check_pages(Reader *r, uint64_t offset, uint64_t size) {
        _cleanup_free_ uint8_t *page = NULL;
        uint64_t pos = r->pos;
        int k = 0;

        if (r->big_endian || r->long_size != 8 || size == 0)
                return 0;
        page = malloc(r->page_size);
        if (!page)
                return -ENOMEM;
        for (uint64_t at = offset; k >= 0 && at < offset + size; at += r->page_size) {
                PageWalk w;
                PageEntry e;

                r->pos = at;
                k = reader_get(r, page, r->page_size);
                if (k >= 0)
                        k = page_walk_init(&w, page, r->page_size);
                while (k >= 0 && (k = page_walk_next(&w, &e)) > 0)
                        ;
        }
        r->pos = pos;
        return k;
}

static int check_v6(Reader *r, const char **why) {
        char name[DATCHECK_STRING_MAX + 1];
        uint64_t n, m;
        int k;

        *why = "the header page or header event is cut short";
        if ((k = reader_get(r, name, 12)) < 0 || memcmp(name, "header_page", 12) != 0 ||
            (k = reader_skip_sized(r, 8)) < 0 || (k = reader_get(r, name, 13)) < 0 ||
            memcmp(name, "header_event", 13) != 0 || (k = reader_skip_sized(r, 8)) < 0)
                return k < 0 ? k : -EBADMSG;

        *why = "the ftrace formats are cut short";
        if ((k = reader_number(r, 4, &n)) < 0)
                return k;
        if (n > DATCHECK_COUNT_MAX)
                return -EBADMSG;
        for (uint64_t i = 0; i < n; i++)
                if ((k = reader_skip_sized(r, 8)) < 0)
                        return k;

        *why = "the event formats are cut short";
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

        *why = "the kernel symbols, printk formats or command lines are cut short";
        if ((k = reader_skip_sized(r, 4)) < 0 || (k = reader_skip_sized(r, 4)) < 0 ||
            (k = reader_skip_sized(r, 8)) < 0)
                return k;

        *why = "its count of CPUs is none a kernel has";
        if ((k = reader_number(r, 4, &n)) < 0)
                return k;
        if (n > LINES_CPUS_MAX)
                return -EBADMSG;

        *why = "its options or CPU data are cut short or damaged";
        if ((k = reader_get(r, name, 10)) < 0)
                return k;
        if (memcmp(name, "options  ", 10) == 0) {
                if ((k = check_options(r)) < 0 || (k = reader_get(r, name, 10)) < 0)
                        return k;
        }
        if (memcmp(name, "latency  ", 10) == 0)
                return 0;
        if (memcmp(name, "flyrecord", 10) != 0)
                return -EBADMSG;
        /* libtracecmd maps the pages of each CPU: one beyond the end is a SIGBUS. */
        for (uint64_t i = 0; i < n; i++) {
                uint64_t offset, size;

                if ((k = reader_number(r, 8, &offset)) < 0 || (k = reader_number(r, 8, &size)) < 0)
                        return k;
                if (offset > r->size || size > r->size - offset || size % r->page_size != 0)
                        return -EBADMSG;
                k = check_pages(r, offset, size);
                if (k < 0) {
                        *why = "a page of its CPU data is damaged";
                        return k;
                }
        }
        return 0;
}

/* The section header of version 7's first options, and the size of its compressed block, which
 * libtracecmd allocates as the block states it (tracecmd_uncompress_block(): up to 4 GiB, and a
 * failed allocation crashes its tracecmd_close()). The options themselves are compressed: what
 * they say is left to libtracecmd. */
static int check_v7_section(Reader *r, const char **why) {
        uint64_t id, flags, size, zsize, usize;
        int k;

        *why = "its options section is cut short or damaged";
        if ((k = reader_number(r, 2, &id)) < 0 || (k = reader_number(r, 2, &flags)) < 0 ||
            (k = reader_number(r, 4, &size)) < 0 || (k = reader_number(r, 8, &size)) < 0)
                return k;
        if (id != TRACECMD_OPTION_DONE || size > r->size - r->pos)
                return -EBADMSG;
        if (!(flags & DATCHECK_SECTION_COMPRESSED))
                return 0;
        if ((k = reader_number(r, 4, &zsize)) < 0 || (k = reader_number(r, 4, &usize)) < 0)
                return k;
        /* Options are a few KiB; no compression makes 64 MiB of them. */
        if (zsize > size - 8 || usize > DATCHECK_OPTIONS_MAX)
                return -EBADMSG;
        return 0;
}

int datcheck_file(int fd, const char **ret_why) {
        static const char magic[] = { 0x17, 0x08, 0x44, 't', 'r', 'a', 'c', 'i', 'n', 'g' };
        char buf[DATCHECK_STRING_MAX + 1], version[DATCHECK_STRING_MAX + 1];
        Reader r = { .fd = fd };
        struct stat st;
        uint64_t v;
        uint8_t b[2];
        int k;

        if (fstat(fd, &st) < 0)
                return -errno;
        r.size = (uint64_t) st.st_size;

        *ret_why = "not a trace-cmd data file";
        if ((k = reader_get(&r, buf, sizeof(magic))) < 0 || memcmp(buf, magic, sizeof(magic)) != 0 ||
            (k = reader_string(&r, version)) < 0)
                return k < 0 ? k : -EBADMSG;
        *ret_why = "of a version other than 6 or 7";
        if (!streq(version, "6") && !streq(version, "7"))
                return -EBADMSG;

        *ret_why = "its byte order, long size or page size is none a kernel has";
        if ((k = reader_get(&r, b, 2)) < 0)
                return k;
        if (b[0] > 1 || (b[1] != 4 && b[1] != 8))
                return -EBADMSG;
        r.big_endian = b[0] == 1;
        r.long_size = b[1];
        if ((k = reader_number(&r, 4, &v)) < 0)
                return k;
        /* Sub-buffers of 4 KiB up to 1 MiB (64 KiB pages, the kernel's largest sub-buffers). */
        if (v < 4096 || v > 1024 * 1024 || (v & (v - 1)) != 0)
                return -EBADMSG;
        r.page_size = (size_t) v;

        if (streq(version, "6"))
                return check_v6(&r, ret_why);

        *ret_why = "its compression is unknown";
        if ((k = reader_string(&r, buf)) < 0 || (k = reader_string(&r, version)) < 0)
                return k;
        if (!streq(buf, "none") && !streq(buf, "zstd") && !streq(buf, "zlib"))
                return -EBADMSG;
        *ret_why = "its options lie beyond its end";
        if ((k = reader_number(&r, 8, &v)) < 0)
                return k;
        if (v < r.pos || v > r.size)
                return -EBADMSG;
        r.pos = v;
        return check_v7_section(&r, ret_why);
}
