/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "build-config.h"
#include "datfile.h"
#include "tracecmd-output.h"
#include "util.h"

/* LeakSanitizer's built-in suppressions for a sanitizer build of tpctl (an ordinary build never
 * calls it): Debian's libtracecmd 1.3 leaks the path tracecmd_output_set_kallsyms() keeps, which
 * tracecmd_output_close() does not free. In the program, so that it holds whoever runs it. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
        return "leak:tracecmd_output_set_kallsyms\n";
}

struct DatMeta {
        char *dir;     /* private directory next to the output: tracing/, kallsyms, page files */
        char *tracing; /* dir/tracing: a tracing directory of the files tpd sent */
        unsigned n_cpus;
        size_t page_size;
        int file_version;
        char *kernel_cmdlines; /* the kernel's saved_cmdlines, after tpd's names */
        size_t kernel_cmdlines_size;
        char *comms; /* "pid comm\n" lines from COMM frames */
        size_t comms_size;
        char *clock; /* the trace_clock file */
        uint64_t files_size;
        uint64_t kallsyms_size;
        unsigned serial; /* of the page files */
};

typedef struct DatCpu {
        char *path;
        int fd;
        uint64_t pages;
        uint64_t records;
        uint64_t overrun;
        uint64_t other_lost;
} DatCpu;

struct DatFile {
        DatMeta *meta;
        char *path;
        DatCpu *cpus;
        uint64_t data_size;
};

static int rm_rf(const char *path);

DatMeta *dat_meta_free(DatMeta *m) {
        if (!m)
                return NULL;
        if (m->dir)
                (void) rm_rf(m->dir);
        free(m->dir);
        free(m->tracing);
        free(m->kernel_cmdlines);
        free(m->comms);
        free(m->clock);
        free(m);
        return NULL;
}

int dat_meta_new(const char *output, unsigned n_cpus, size_t page_size, int file_version, DatMeta **ret) {
        _cleanup_free_ char *copy = strdup(output);
        DatMeta *m;
        char *slash;

        if (!copy)
                return -ENOMEM;
        m = calloc(1, sizeof(DatMeta));
        if (!m)
                return -ENOMEM;
        m->n_cpus = n_cpus;
        m->page_size = page_size;
        m->file_version = file_version;
        /* Next to the output, so that the page files share its file system and its quota. */
        slash = strrchr(copy, '/');
        if (asprintf(&m->dir, "%s/.tpctl-record-XXXXXX",
                     slash ? (slash == copy ? "/" : (*slash = 0, copy)) : ".") < 0) {
                m->dir = NULL;
                dat_meta_free(m);
                return -ENOMEM;
        }
        if (!mkdtemp(m->dir)) {
                int r = -errno;
                free(m->dir);
                m->dir = NULL;
                dat_meta_free(m);
                return r;
        }
        if (asprintf(&m->tracing, "%s/tracing", m->dir) < 0 || mkdir(m->tracing, 0700) < 0) {
                dat_meta_free(m);
                return -errno ?: -ENOMEM;
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

static int append(char **buf, size_t *size, const void *data, size_t n) {
        char *p = realloc(*buf, *size + n + 1);

        if (!p)
                return -ENOMEM;
        memcpy(p + *size, data, n);
        *size += n;
        p[*size] = 0;
        *buf = p;
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
                return append(&m->kernel_cmdlines, &m->kernel_cmdlines_size, content, len);
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
        return append(&m->comms, &m->comms_size, line, (size_t) n);
}

int dat_meta_set_kallsyms(DatMeta *m, int enabled) {
        _cleanup_free_ char *path = NULL;
        _cleanup_close_ int in = -1, out = -1;
        char buf[65536];
        bool in_address = true, address = false;
        ssize_t n;

        if (asprintf(&path, "%s/kallsyms", m->dir) < 0)
                return -ENOMEM;
        out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (out < 0)
                return -errno;
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
        return m->files_size + m->kallsyms_size + m->comms_size + 4096 +
               (uint64_t) m->n_cpus * (1024 + m->page_size);
}

int datfile_new(DatMeta *meta, const char *path, DatFile **ret) {
        DatFile *f = calloc(1, sizeof(DatFile));

        if (!f)
                return -ENOMEM;
        f->meta = meta;
        f->path = strdup(path);
        f->cpus = calloc(meta->n_cpus, sizeof(DatCpu));
        if (!f->path || !f->cpus) {
                datfile_abort(f);
                return -ENOMEM;
        }
        for (unsigned i = 0; i < meta->n_cpus; i++)
                f->cpus[i].fd = -1;
        for (unsigned i = 0; i < meta->n_cpus; i++) {
                DatCpu *c = &f->cpus[i];

                if (asprintf(&c->path, "%s/cpu%u.%u", meta->dir, i, meta->serial) < 0) {
                        c->path = NULL;
                        datfile_abort(f);
                        return -ENOMEM;
                }
                c->fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                if (c->fd < 0) {
                        int r = -errno;
                        datfile_abort(f);
                        return r;
                }
        }
        meta->serial++;
        *ret = f;
        return 0;
}

int datfile_add_page(DatFile *f, unsigned cpu, const void *page, uint32_t records) {
        int r;

        if (cpu >= f->meta->n_cpus)
                return -EBADMSG;
        r = write_all(f->cpus[cpu].fd, page, f->meta->page_size);
        if (r < 0)
                return r;
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
                if (remove && f->cpus[i].path)
                        (void) unlink(f->cpus[i].path);
                free(f->cpus[i].path);
        }
        free(f->cpus);
        free(f->path);
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

int datfile_finish(DatFile *f) {
        DatMeta *m = f->meta;
        _cleanup_free_ char *tmp = NULL, *cmdlines = NULL, *kallsyms = NULL, *cmdlines_path = NULL;
        _cleanup_free_ char **files = NULL;
        struct tracecmd_output *h = NULL;
        char version[64];
        struct utsname u;
        int r = -EIO;

        for (unsigned i = 0; i < m->n_cpus; i++)
                if (fsync(f->cpus[i].fd) < 0 && errno != EINVAL) {
                        r = -errno;
                        goto fail;
                }

        /* tpd's names first, the last one sent for a pid first of all: libtraceevent keeps the
         * first name registered for a pid, and a file names each pid once, by its last name (as
         * trace-cmd saves the names when a recording ends). */
        if (asprintf(&cmdlines_path, "%s/saved_cmdlines", m->tracing) < 0 ||
            asprintf(&kallsyms, "%s/kallsyms", m->dir) < 0 || asprintf(&tmp, "%s.tmp", f->path) < 0) {
                r = -ENOMEM;
                goto fail;
        }
        {
                size_t n = 0;
                r = 0;
                for (size_t end = m->comms_size; r >= 0 && end > 0;) {
                        size_t start = end - 1;
                        while (start > 0 && m->comms[start - 1] != '\n')
                                start--;
                        r = append(&cmdlines, &n, m->comms + start, end - start);
                        end = start;
                }
                if (r >= 0)
                        r = append(&cmdlines, &n, m->kernel_cmdlines ?: "", m->kernel_cmdlines_size);
                if (r >= 0)
                        r = write_file(cmdlines_path, cmdlines, n);
                if (r < 0)
                        goto fail;
        }
        files = calloc(m->n_cpus, sizeof(char *));
        if (!files) {
                r = -ENOMEM;
                goto fail;
        }
        for (unsigned i = 0; i < m->n_cpus; i++)
                files[i] = f->cpus[i].path;

        /* libtracecmd warns, for every version 6 file it writes (trace-cmd's own included), that
         * the top buffer has no description: errors only. */
        tracecmd_set_loglevel(TEP_LOG_ERROR);
        r = -EIO;
        h = tracecmd_output_create(tmp);
        if (!h)
                goto fail;
        tracecmd_set_quiet(h, true);
        if (tracecmd_output_set_trace_dir(h, m->tracing) < 0 ||
            tracecmd_output_set_kallsyms(h, kallsyms) < 0 ||
            tracecmd_output_set_version(h, m->file_version) < 0)
                goto fail;
        if (m->file_version >= 7 && tracecmd_output_set_compression(h, "any") < 0)
                goto fail;
        if (tracecmd_output_write_headers(h, NULL) < 0)
                goto fail;
        tracecmd_add_option(h, TRACECMD_OPTION_TRACECLOCK, m->clock ? (int) strlen(m->clock) + 1 : 0,
                            m->clock);
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
        if (tracecmd_append_cpu_data(h, (int) m->n_cpus, files) < 0)
                goto fail;
        tracecmd_output_close(h);
        h = NULL;
        if (rename(tmp, f->path) < 0) {
                r = -errno;
                goto fail;
        }
        datfile_free(f, true);
        return 0;

fail:
        if (h)
                tracecmd_output_close(h);
        if (tmp)
                (void) unlink(tmp);
        datfile_free(f, true);
        return r;
}

/* Removes the private directory: only files and directories tpctl made in it. */
static int rm_rf(const char *path) {
        struct stat st;

        if (lstat(path, &st) < 0)
                return -errno;
        if (!S_ISDIR(st.st_mode))
                return unlink(path) < 0 ? -errno : 0;
        {
                DIR *d = opendir(path);
                struct dirent *de;

                if (!d)
                        return -errno;
                while ((de = readdir(d))) {
                        _cleanup_free_ char *sub = NULL;

                        if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                                continue;
                        if (asprintf(&sub, "%s/%s", path, de->d_name) < 0)
                                break;
                        (void) rm_rf(sub);
                }
                closedir(d);
        }
        return rmdir(path) < 0 ? -errno : 0;
}
