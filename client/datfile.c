/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "build-config.h"
#include "capdir.h"
#include "datfile.h"
#include "tracecmd-output.h"
#include "util.h"

/* LeakSanitizer's built-in suppressions for a sanitizer build of tpctl (an ordinary build never
 * calls it): Debian's libtracecmd 1.3 leaks the path tracecmd_output_set_kallsyms() keeps, which
 * tracecmd_output_close() does not free; and libtracefs 1.6's tracefs_tracing_dir(), which every
 * tracecmd_output_create_fd() calls, drops the path it cached without freeing it when the path
 * fails its check (for a user who cannot read tracefs): once for each data file after the first.
 * The stack of that one, unwound fast, ends in libtracefs's static function: matched by the
 * library, which tpctl calls only through libtracecmd. In the program, so that it holds whoever
 * runs it. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
        return "leak:tracecmd_output_set_kallsyms\nleak:libtracefs.so\n";
}

/* Below this, a failed write of a data file is taken for a full file system. */
#define LOW_SPACE_BYTES (1024U * 1024U)

/* A growing string: NUL-terminated, size without the NUL. */
typedef struct Text {
        char *data;
        size_t size, cap;
} Text;

struct DatMeta {
        int parent_fd; /* the output's directory */
        char *name;    /* of the private directory in it: tracing/, kallsyms, page files, data files */
        int dir_fd;    /* of the private directory */
        char *dir;     /* the private directory as libtracecmd opens it: by its fd, never by name */
        char *tracing; /* dir/tracing: a tracing directory of the files tpd sent */
        unsigned n_cpus;
        size_t page_size;
        int file_version;
        Text kernel_cmdlines; /* the kernel's saved_cmdlines, after tpd's names */
        Text comms;           /* "pid comm\n" lines from COMM frames */
        char *clock;          /* the trace_clock file */
        uint64_t files_size;
        uint64_t kallsyms_size;
        unsigned serial; /* of the page files */
};

typedef struct DatCpu {
        char *name; /* in the private directory */
        int fd;
        uint64_t pages;
        uint64_t records;
        uint64_t overrun;
        uint64_t other_lost;
} DatCpu;

struct DatFile {
        DatMeta *meta;
        unsigned serial;
        DatCpu *cpus;
        uint64_t data_size;
};

DatMeta *dat_meta_free(DatMeta *m) {
        if (!m)
                return NULL;
        if (m->name)
                (void) capdir_remove_tree(m->parent_fd, m->name);
        safe_close(m->dir_fd);
        safe_close(m->parent_fd);
        free(m->name);
        free(m->dir);
        free(m->tracing);
        free(m->kernel_cmdlines.data);
        free(m->comms.data);
        free(m->clock);
        free(m);
        return NULL;
}

int dat_meta_new(int dir_fd, unsigned n_cpus, size_t page_size, int file_version, DatMeta **ret) {
        DatMeta *m = calloc(1, sizeof(DatMeta));
        int r;

        if (!m)
                return -ENOMEM;
        m->n_cpus = n_cpus;
        m->page_size = page_size;
        m->file_version = file_version;
        m->dir_fd = -1;
        m->parent_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 3);
        if (m->parent_fd < 0) {
                r = negative_errno();
                dat_meta_free(m);
                return r;
        }
        /* In the output's directory, so that the page files share its file system and its quota, and
         * a finished file moves into place by rename. */
        r = capdir_mkdtemp(m->parent_fd, ".tpctl-record-", &m->name, &m->dir_fd);
        if (r < 0) {
                dat_meta_free(m);
                return r;
        }
        /* libtracecmd takes paths: through the fd, the directory made here whatever its name
         * becomes. */
        if (asprintf(&m->dir, "/proc/self/fd/%d", m->dir_fd) < 0) {
                m->dir = NULL;
                dat_meta_free(m);
                return -ENOMEM;
        }
        if (asprintf(&m->tracing, "%s/tracing", m->dir) < 0) {
                m->tracing = NULL;
                dat_meta_free(m);
                return -ENOMEM;
        }
        if (mkdirat(m->dir_fd, "tracing", 0700) < 0) {
                r = negative_errno();
                dat_meta_free(m);
                return r;
        }
        *ret = m;
        return 0;
}

/* A path tpd may name: relative, a few components of plain characters, none "." or "..". */
static bool meta_path_ok(const char *p, size_t len) {
        size_t component = 0, components = 1;

        if (len == 0 || len > 255 || p[0] == '/')
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = p[i];

                if (c == '/') {
                        if (component == 0)
                                return false;
                        component = 0;
                        components++;
                        continue;
                }
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-' || c == '.'))
                        return false;
                if (c == '.' && component == 0 && (i + 1 == len || p[i + 1] == '/' || p[i + 1] == '.'))
                        return false;
                component++;
        }
        return component > 0 && components <= 4;
}

static int write_file(const char *path, const void *data, size_t size) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);

        if (fd < 0)
                return -errno;
        return write_all(fd, data, size);
}

/* Grows by doubling: a file's names arrive a line at a time, thousands of them. */
static int append(Text *t, const void *data, size_t n) {
        if (n >= SIZE_MAX / 2 - t->size)
                return -ENOMEM;
        if (t->size + n + 1 > t->cap) {
                size_t cap = MAX(MAX(t->cap * 2, t->size + n + 1), (size_t) 256);
                char *p = realloc(t->data, cap);

                if (!p)
                        return -ENOMEM;
                t->data = p;
                t->cap = cap;
        }
        memcpy(t->data + t->size, data, n);
        t->size += n;
        t->data[t->size] = 0;
        return 0;
}

int dat_meta_add_file(DatMeta *m, const void *payload, size_t size) {
        const char *path = payload, *content, *nul = memchr(payload, 0, size);
        _cleanup_free_ char *full = NULL;
        size_t len;

        if (!nul || !meta_path_ok(path, (size_t) (nul - path)))
                return -EBADMSG;
        content = nul + 1;
        len = size - (size_t) (content - path);
        m->files_size += len;

        if (streq(path, "saved_cmdlines"))
                return append(&m->kernel_cmdlines, content, len);
        if (streq(path, "trace_clock")) {
                free(m->clock);
                m->clock = strndup(content, len);
                if (!m->clock)
                        return -ENOMEM;
        }

        if (asprintf(&full, "%s/%s", m->tracing, path) < 0)
                return -ENOMEM;
        /* Make the directories of the path, under tracing/. */
        for (char *s = full + strlen(m->tracing) + 1; (s = strchr(s, '/')); s++) {
                *s = 0;
                if (mkdir(full, 0700) < 0 && errno != EEXIST)
                        return -errno;
                *s = '/';
        }
        return write_file(full, content, len);
}

int dat_meta_add_comm(DatMeta *m, int pid, const char *comm, size_t len) {
        char line[64];
        int n;

        if (len > 16 || memchr(comm, '\n', len))
                return -EBADMSG;
        n = snprintf(line, sizeof(line), "%d %.*s\n", pid, (int) len, comm);
        return append(&m->comms, line, (size_t) n);
}

int dat_meta_set_kallsyms(DatMeta *m, int enabled) {
        _cleanup_close_ int in = -1, out = -1;
        char buf[65536];
        bool in_address = true, address = false;
        ssize_t n;

        out = capdir_create(m->dir_fd, "kallsyms", O_WRONLY);
        if (out < 0)
                return out;
        if (!enabled)
                return 0;
        in = open("/proc/kallsyms", O_RDONLY | O_CLOEXEC);
        if (in < 0)
                return 0; /* none, as trace-cmd does without it */
        while ((n = read(in, buf, sizeof(buf))) > 0) {
                int r = write_all(out, buf, (size_t) n);
                if (r < 0)
                        return r;
                m->kallsyms_size += (uint64_t) n;
                for (ssize_t i = 0; i < n && !address; i++) {
                        if (buf[i] == '\n')
                                in_address = true;
                        else if (buf[i] == ' ')
                                in_address = false;
                        else if (in_address && buf[i] != '0')
                                address = true;
                }
        }
        if (n < 0)
                return -errno;
        /* The kernel shows the addresses only to whom it trusts with them (CAP_SYSLOG; everyone
         * with kptr_restrict=0 and perf_event_paranoid <= 1), zeros to others: symbols without
         * addresses name nothing, so a file gets none, as with --no-kallsyms. */
        if (!address) {
                if (ftruncate(out, 0) < 0)
                        return -errno;
                m->kallsyms_size = 0;
        }
        return 0;
}

uint64_t dat_meta_header_size(const DatMeta *m) {
        /* The files as sent, kallsyms, names, options, and the file's own headers and alignment. */
        return m->files_size + m->kallsyms_size + m->comms.size + 4096 +
               (uint64_t) m->n_cpus * (1024 + m->page_size);
}

int datfile_new(DatMeta *meta, DatFile **ret) {
        DatFile *f = calloc(1, sizeof(DatFile));

        if (!f)
                return -ENOMEM;
        f->meta = meta;
        f->serial = meta->serial++;
        f->cpus = calloc(meta->n_cpus, sizeof(DatCpu));
        if (!f->cpus) {
                datfile_abort(f);
                return -ENOMEM;
        }
        for (unsigned i = 0; i < meta->n_cpus; i++)
                f->cpus[i].fd = -1;
        for (unsigned i = 0; i < meta->n_cpus; i++) {
                DatCpu *c = &f->cpus[i];

                if (asprintf(&c->name, "cpu%u.%u", i, f->serial) < 0) {
                        c->name = NULL;
                        datfile_abort(f);
                        return -ENOMEM;
                }
                c->fd = capdir_create(meta->dir_fd, c->name, O_WRONLY);
                if (c->fd < 0) {
                        int r = c->fd;
                        datfile_abort(f);
                        return r;
                }
        }
        *ret = f;
        return 0;
}

int datfile_add_page(DatFile *f, unsigned cpu, const void *page, uint32_t records) {
        int r;

        if (cpu >= f->meta->n_cpus)
                return -EBADMSG;
        r = write_all(f->cpus[cpu].fd, page, f->meta->page_size);
        if (r < 0) {
                /* Whole pages only: a part written before a full disk goes. */
                (void) ftruncate(f->cpus[cpu].fd, (off_t) (f->cpus[cpu].pages * f->meta->page_size));
                return r;
        }
        f->cpus[cpu].pages++;
        f->cpus[cpu].records += records;
        f->data_size += f->meta->page_size;
        return 0;
}

void datfile_note_lost(DatFile *f, unsigned cpu, uint64_t overrun, uint64_t other) {
        if (cpu >= f->meta->n_cpus)
                return;
        f->cpus[cpu].overrun += overrun;
        f->cpus[cpu].other_lost += other;
}

uint64_t datfile_data_size(const DatFile *f) {
        return f->data_size;
}

static void datfile_free(DatFile *f, bool remove) {
        if (!f)
                return;
        for (unsigned i = 0; f->cpus && i < f->meta->n_cpus; i++) {
                if (f->cpus[i].fd >= 0)
                        close(f->cpus[i].fd);
                if (remove && f->cpus[i].name)
                        (void) unlinkat(f->meta->dir_fd, f->cpus[i].name, 0);
                free(f->cpus[i].name);
        }
        free(f->cpus);
        free(f);
}

void datfile_abort(DatFile *f) {
        datfile_free(f, true);
}

/* Per-CPU statistics in the text `trace-cmd record` stores (the kernel's per_cpu/cpuN/stats): here
 * what this recording got and lost. */
static void add_cpu_stats(struct tracecmd_output *h, const DatFile *f) {
        for (unsigned i = 0; i < f->meta->n_cpus; i++) {
                const DatCpu *c = &f->cpus[i];
                char text[512];
                int n = snprintf(
                        text, sizeof(text),
                        "CPU: %u\nentries: %" PRIu64 "\noverrun: %" PRIu64 "\ncommit overrun: 0\n"
                        "bytes: %" PRIu64 "\ndropped events: %" PRIu64 "\nread events: %" PRIu64 "\n",
                        i, c->records, c->overrun, c->pages * f->meta->page_size, c->other_lost, c->records);
                tracecmd_add_option(h, TRACECMD_OPTION_CPUSTAT, n + 1, text);
        }
}

/* What made a libtracecmd call fail: it returns -1, and errno is that of whatever it called last
 * (an lseek(), a free()), not always of the failed write. A file system without room left is the
 * usual cause, and fstatvfs() tells. */
static int libtracecmd_error(int fd) {
        int e = errno;
        struct statvfs sv;

        if (fstatvfs(fd, &sv) == 0 && (uint64_t) sv.f_bavail * sv.f_frsize < LOW_SPACE_BYTES)
                return -ENOSPC;
        return e == ENOSPC || e == EDQUOT || e == EFBIG || e == EIO ? -e : -EIO;
}

static int cmp_pid(const void *a, const void *b) {
        int x = *(const int *) a, y = *(const int *) b;
        return (x > y) - (x < y);
}

/* The pid of a "pid comm" line, and its comm; false for a line that is not one. */
static bool cmdline_parse(const char *line, const char *end, int *ret_pid, const char **ret_comm) {
        char *p;
        long pid = strtol(line, &p, 10);

        if (p == line || p >= end || *p != ' ' || pid < 0 || pid > INT_MAX)
                return false;
        *ret_pid = (int) pid;
        *ret_comm = p + 1;
        return true;
}

/* pid in the sorted pids, or NULL; bsearch() must not be given the NULL of an empty array. */
static int *pid_find(int *pids, size_t n_pids, int pid) {
        return n_pids > 0 ? bsearch(&pid, pids, n_pids, sizeof(int), cmp_pid) : NULL;
}

/* The file's command lines, each pid once: libtraceevent takes a file's lines into a list that it
 * sorts by pid, so of two lines of one pid either may name it. tpd's last name for a pid first
 * (a rename, or a name found late, comes after the first), then the kernel's lines of the pids
 * tpd did not name: the kernel's table at the start may name an earlier task of a pid, or none
 * ("<...>", which trace-cmd shows for a pid without a line anyway). */
static int build_cmdlines(const DatMeta *m, Text *ret) {
        _cleanup_free_ int *pids = NULL;
        _cleanup_free_ bool *done = NULL;
        size_t n_pids = 0, cap = 0;
        const char *comms = m->comms.data ?: "", *comms_end = comms + m->comms.size;
        const char *kernel = m->kernel_cmdlines.data ?: "", *kernel_end = kernel + m->kernel_cmdlines.size;
        const char *comm;
        int pid, r = 0;

        for (const char *l = comms, *e; l < comms_end; l = e + 1) {
                e = memchr(l, '\n', (size_t) (comms_end - l));
                if (!e)
                        break;
                if (!cmdline_parse(l, e, &pid, &comm))
                        continue;
                if (n_pids == cap) {
                        int *p;
                        cap = MAX(cap * 2, (size_t) 64);
                        p = reallocarray(pids, cap, sizeof(int));
                        if (!p)
                                return -ENOMEM;
                        pids = p;
                }
                pids[n_pids++] = pid;
        }
        if (n_pids > 0) {
                size_t k = 1;

                qsort(pids, n_pids, sizeof(int), cmp_pid);
                /* Each pid once, so that the search below finds its one flag. */
                for (size_t i = 1; i < n_pids; i++)
                        if (pids[i] != pids[k - 1])
                                pids[k++] = pids[i];
                n_pids = k;
        }
        done = calloc(MAX(n_pids, (size_t) 1), sizeof(bool));
        if (!done)
                return -ENOMEM;

        /* tpd's names from the last one sent: the first line of a pid is its last name. */
        for (size_t end = m->comms.size; r >= 0 && end > 0;) {
                size_t start = end - 1;
                int *at;

                while (start > 0 && comms[start - 1] != '\n')
                        start--;
                if (cmdline_parse(comms + start, comms + end, &pid, &comm) &&
                    (at = pid_find(pids, n_pids, pid)) && !done[at - pids]) {
                        done[at - pids] = true;
                        r = append(ret, comms + start, end - start);
                }
                end = start;
        }
        for (const char *l = kernel, *e; r >= 0 && l < kernel_end; l = e + 1) {
                e = memchr(l, '\n', (size_t) (kernel_end - l));
                if (!e)
                        e = kernel_end;
                if (!cmdline_parse(l, e, &pid, &comm) || pid_find(pids, n_pids, pid) ||
                    (e - comm == 5 && memcmp(comm, "<...>", 5) == 0))
                        continue;
                r = append(ret, l, (size_t) (e - l));
                if (r >= 0)
                        r = append(ret, "\n", 1);
        }
        if (r >= 0 && !ret->data)
                r = append(ret, "", 0);
        return r;
}

/* Writes the data file into the private directory as tmp, from the page files; returns its fd
 * (a second one: libtracecmd closes its own). */
static int write_data_file(DatFile *f, const char *tmp, int *ret_fd) {
        DatMeta *m = f->meta;
        _cleanup_free_ char *kallsyms = NULL, *cmdlines_path = NULL;
        Text cmdlines = {};
        _cleanup_close_ int fd = -1, keep = -1;
        struct tracecmd_output *h = NULL;
        char **files = NULL;
        char version[64];
        struct utsname u;
        int r = 0;

        /* The page files are read back at once, through the page cache: only the data file is
         * synced, once (a stop signal waits for this). */
        if (asprintf(&cmdlines_path, "%s/saved_cmdlines", m->tracing) < 0 ||
            asprintf(&kallsyms, "%s/kallsyms", m->dir) < 0)
                return -ENOMEM;
        r = build_cmdlines(m, &cmdlines);
        if (r >= 0)
                r = write_file(cmdlines_path, cmdlines.data, cmdlines.size);
        free(cmdlines.data);
        if (r < 0)
                return r;

        fd = capdir_create(m->dir_fd, tmp, O_RDWR);
        if (fd < 0)
                return fd;
        keep = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (keep < 0)
                return negative_errno();
        files = calloc(m->n_cpus, sizeof(char *));
        if (!files)
                return -ENOMEM;
        for (unsigned i = 0; i < m->n_cpus; i++)
                if (asprintf(&files[i], "%s/%s", m->dir, f->cpus[i].name) < 0) {
                        files[i] = NULL;
                        r = -ENOMEM;
                        goto finish;
                }

        /* libtracecmd warns, for every version 6 file it writes (trace-cmd's own included), that
         * the top buffer has no description: errors only. */
        tracecmd_set_loglevel(TEP_LOG_ERROR);
        errno = 0;
        h = tracecmd_output_create_fd(fd);
        if (!h)
                goto fail;
        fd = -1; /* closed by tracecmd_output_close() */
        tracecmd_set_quiet(h, true);
        if (tracecmd_output_set_trace_dir(h, m->tracing) < 0 ||
            tracecmd_output_set_kallsyms(h, kallsyms) < 0 ||
            tracecmd_output_set_version(h, m->file_version) < 0)
                goto fail;
        if (m->file_version >= 7 && tracecmd_output_set_compression(h, "any") < 0)
                goto fail;
        if (tracecmd_output_write_headers(h, NULL) < 0)
                goto fail;
        /* A file converted from NDJSON may not know its clock: then it says none. */
        if (m->clock)
                tracecmd_add_option(h, TRACECMD_OPTION_TRACECLOCK, (int) strlen(m->clock) + 1, m->clock);
        add_cpu_stats(h, f);
        if (uname(&u) == 0) {
                char text[4 * sizeof(u.release)];
                int n = snprintf(text, sizeof(text), "%s %s %s %s", u.sysname, u.nodename, u.release,
                                 u.machine);
                tracecmd_add_option(h, TRACECMD_OPTION_UNAME, n + 1, text);
        }
        snprintf(version, sizeof(version), "tpd %s", TPD_VERSION);
        tracecmd_add_option(h, TRACECMD_OPTION_VERSION, (int) strlen(version) + 1, version);
        if (tracecmd_write_cmdlines(h) < 0)
                goto fail;
        /* Fails on a short write (a full disk) as on a page file it cannot read. */
        if (tracecmd_append_cpu_data(h, (int) m->n_cpus, files) < 0)
                goto fail;
        /* Version 7 writes its last options when closed. */
        tracecmd_output_close(TAKE_PTR(h));
        /* Data before name: what a rename publishes is on disk; a full disk shows here at the
         * latest. */
        r = fsync(keep) < 0 && errno != EINVAL ? negative_errno() : 0;
        if (r >= 0)
                *ret_fd = TAKE_FD(keep);
        goto finish;

fail:
        r = libtracecmd_error(keep);

finish:
        if (h)
                tracecmd_output_close(h);
        for (unsigned i = 0; i < m->n_cpus; i++)
                free(files[i]);
        free(files);
        return r;
}

int datfile_finish(DatFile *f, int dir_fd, const char *name, bool replace, struct stat *ret_st) {
        DatMeta *m = f->meta;
        char tmp[32];
        int fd = -1, r;

        snprintf(tmp, sizeof(tmp), "data.%u", f->serial);
        r = write_data_file(f, tmp, &fd);
        if (r >= 0 && fstat(fd, ret_st) < 0)
                r = negative_errno();
        safe_close(fd);
        if (r >= 0)
                r = capdir_move(m->dir_fd, tmp, dir_fd, name, replace);
        if (r < 0)
                (void) unlinkat(m->dir_fd, tmp, 0);
        datfile_free(f, true);
        return r;
}
