/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * record-pages: records the ring-buffer pages that the decoder's unit tests replay.
 *
 *   record-pages DATASET OUTDIR      (as root; built, never run by the test suite)
 *   record-pages --list
 *
 * It creates a private tracefs instance (instances/tpd-record-<pid>), sets the boot clock,
 * arms the dataset's events with kernel filters that admit only the workload's own processes,
 * runs the workload, stops tracing and saves into OUTDIR:
 *
 *   cpuN.pages        every sub-buffer page read from per_cpu/cpuN/trace_pipe_raw, 4096 bytes each
 *                     (only CPUs that had data)
 *   header_page       events/header_page
 *   SYS.EVENT.format  the format file of each event that may appear in the pages
 *   comms             "PID NAME" of the workload's processes: the tests' deterministic comm table
 *   trace.txt         the instance's text `trace` file, read before the pages were consumed: the
 *                     kernel's own rendering of the same records, for verify-golden.py
 *   stats.txt         per_cpu/cpuN/stats after the run
 *
 * The instance is removed afterwards, also when the workload fails. See tests/data/README.md for
 * how expected.ndjson is made and checked.
 */

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define TRACEFS "/sys/kernel/tracing"
#define PAGE_SIZE_TRACE 4096
#define MAX_CHILDREN 4

typedef struct Recording Recording;

typedef struct Dataset {
        const char *name;
        const char *summary;
        const char *const *events;        /* "system:event", enabled with the filter below */
        const char *const *extra_formats; /* formats saved without enabling (ftrace:print) */
        unsigned buffer_size_kb;          /* 0: the instance's default */
        /* Forks the workload's processes; each blocks until recording_go(). */
        int (*prepare)(Recording *rec);
        /* The kernel filter of an event, from the pids prepare() made; NULL for none. */
        void (*filter)(Recording *rec, const char *event, char *buf, size_t size);
} Dataset;

struct Recording {
        const Dataset *set;
        char instance[PATH_MAX];
        int go[2]; /* one byte per child releases it */
        pid_t pids[MAX_CHILDREN];
        char comms[MAX_CHILDREN][16];
        unsigned n_children;
        int port; /* arrays: the listening socket's port */
        int listen_fd;
};

static int write_file(const char *path, const char *text, size_t len) {
        int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
        ssize_t n;

        if (fd < 0)
                return -errno;
        n = write(fd, text, len);
        if (n < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        close(fd);
        return (size_t) n == len ? 0 : -EIO;
}

static int instance_write(Recording *rec, const char *file, const char *text) {
        char path[PATH_MAX * 2];
        int r;

        snprintf(path, sizeof(path), "%s/%s", rec->instance, file);
        r = write_file(path, text, strlen(text));
        if (r < 0)
                fprintf(stderr, "Failed to write '%s' to %s: %s\n", text, path, strerror(-r));
        return r;
}

/* Copies src to dst (a regular file, created or truncated). */
static int copy_file(const char *src, const char *dst) {
        char buf[65536];
        int in, out, r = 0;
        ssize_t n;

        in = open(src, O_RDONLY | O_CLOEXEC);
        if (in < 0)
                return -errno;
        out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (out < 0) {
                r = -errno;
                close(in);
                return r;
        }
        while ((n = read(in, buf, sizeof(buf))) > 0)
                if (write(out, buf, (size_t) n) != n) {
                        r = -EIO;
                        break;
                }
        if (n < 0)
                r = -errno;
        close(in);
        close(out);
        return r;
}

static void child_ready(Recording *rec, const char *comm) {
        char b;

        prctl(PR_SET_NAME, comm, 0, 0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        close(rec->go[1]);
        if (read(rec->go[0], &b, 1) != 1)
                _exit(3);
        close(rec->go[0]);
}

static int pin_cpu(int cpu) {
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        return sched_setaffinity(0, sizeof(set), &set) < 0 ? -errno : 0;
}

/* Forks a workload process named comm that runs fn once released; returns its pid. */
static pid_t spawn(Recording *rec, const char *comm, int cpu, void (*fn)(Recording *rec, void *arg),
                   void *arg) {
        pid_t pid;

        if (rec->n_children >= MAX_CHILDREN)
                return -E2BIG;
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                if (cpu >= 0 && pin_cpu(cpu) < 0)
                        _exit(4);
                child_ready(rec, comm);
                fn(rec, arg);
                _exit(0);
        }
        rec->pids[rec->n_children] = pid;
        snprintf(rec->comms[rec->n_children], sizeof(rec->comms[0]), "%s", comm);
        rec->n_children++;
        return pid;
}

/* --- sched_switch: two processes on one CPU bounce a byte over two pipes --- */

static int pp_a[2], pp_b[2];

static void pingpong_ping(Recording *rec, void *arg) {
        char b = 'x';
        for (int i = 0; i < 60; i++)
                if (write(pp_a[1], &b, 1) != 1 || read(pp_b[0], &b, 1) != 1)
                        _exit(1);
}

static void pingpong_pong(Recording *rec, void *arg) {
        char b;
        for (int i = 0; i < 60; i++)
                if (read(pp_a[0], &b, 1) != 1 || write(pp_b[1], &b, 1) != 1)
                        _exit(1);
}

static int prepare_sched_switch(Recording *rec) {
        pid_t r;

        if (pipe2(pp_a, O_CLOEXEC) < 0 || pipe2(pp_b, O_CLOEXEC) < 0)
                return -errno;
        r = spawn(rec, "tpd-ping", 0, pingpong_ping, NULL);
        if (r > 0)
                r = spawn(rec, "tpd-pong", 0, pingpong_pong, NULL);
        return r < 0 ? (int) r : 0;
}

static void filter_sched_switch(Recording *rec, const char *event, char *buf, size_t size) {
        snprintf(buf, size, "prev_pid == %d || prev_pid == %d || next_pid == %d || next_pid == %d",
                 rec->pids[0], rec->pids[1], rec->pids[0], rec->pids[1]);
}

/* Every other dataset admits the first workload process only. */
static void filter_first_pid(Recording *rec, const char *event, char *buf, size_t size) {
        snprintf(buf, size, "common_pid == %d", rec->pids[0]);
}

/* --- getppid, overrun: a burst of getppid() calls --- */

static void getppid_run(Recording *rec, void *arg) {
        long n = (long) (intptr_t) arg;
        for (long i = 0; i < n; i++)
                syscall(SYS_getppid);
}

static int prepare_getppid(Recording *rec) {
        pid_t r = spawn(rec, "tpd-getppid", 1, getppid_run, (void *) (intptr_t) 300);
        return r < 0 ? (int) r : 0;
}

static int prepare_overrun(Recording *rec) {
        /* Far more than two 4 KiB pages hold (16 bytes a record): the kernel overwrites the oldest. */
        pid_t r = spawn(rec, "tpd-getppid", 0, getppid_run, (void *) (intptr_t) 3000);
        return r < 0 ? (int) r : 0;
}

/* --- print: trace_marker writes of every kind of byte --- */

static void print_run(Recording *rec, void *arg) {
        static const struct {
                const char *text;
                size_t len; /* 0: strlen */
        } writes[] = {
                { "hello\n" },
                { "no newline: the kernel adds one" },
                { "quote \" backslash \\ slash / done\n" },
                { "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10"
                  "\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f|" },
                { "utf8: \xc3\xa9 \xe2\x82\xac \xf0\x9d\x84\x9e \xf4\x8f\xbf\xbf \xef\xbf\xbd" },
                { "invalid: \xff \xfe \xc0\xaf \xc1\xbf \xe0\x80\xaf \xed\xa0\x80 \xf0\x80\x80\xaf "
                  "\xf4\x90\x80\x80 \xf5\x80\x80\x80 \x80 \xbf" },
                { "truncated: \xe2\x82 and \xf0\x9d\x84 and \xc3" },
                { "nul: before\0after", 18 },
        };
        char path[PATH_MAX * 2];
        char big[3000];
        int fd;

        snprintf(path, sizeof(path), "%s/trace_marker", rec->instance);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                _exit(1);
        for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++) {
                size_t len = writes[i].len ?: strlen(writes[i].text);
                if (write(fd, writes[i].text, len) != (ssize_t) len)
                        _exit(1);
        }
        /* A long record, most of a page. */
        for (size_t i = 0; i < sizeof(big); i++)
                big[i] = (char) ('a' + i % 26);
        if (write(fd, big, sizeof(big)) != (ssize_t) sizeof(big))
                _exit(1);
        /* Invalid UTF-8 right at the end of the string, where a sequence would be cut. */
        if (write(fd, "end: \xf0\x9f\x98", 8) != 8)
                _exit(1);
        close(fd);
}

static int prepare_print(Recording *rec) {
        pid_t r = spawn(rec, "tpd-marker", 0, print_run, NULL);
        return r < 0 ? (int) r : 0;
}

/* --- exec: openat (a pointer field, an "int" stored in 8 bytes) and exec (__data_loc char[]) --- */

static char exec_dir[] = "/tmp/tpd-record-XXXXXX";
static char exec_link[PATH_MAX];

static void exec_run(Recording *rec, void *arg) {
        char *const argv[] = { (char *) "true", NULL };
        char *const envp[] = { NULL };
        int fd;

        fd = openat(AT_FDCWD, "/etc/hostname", O_RDONLY | O_CLOEXEC);
        if (fd >= 0)
                close(fd);
        (void) openat(-1, "relative-with-bad-dfd", O_RDONLY | O_CLOEXEC);
        /* A name that is not UTF-8 reaches the __data_loc filename as it is. */
        execve(exec_link, argv, envp);
        _exit(1);
}

static int prepare_exec(Recording *rec) {
        pid_t r;

        if (!mkdtemp(exec_dir))
                return -errno;
        snprintf(exec_link, sizeof(exec_link), "%s/tr\xffue-\xc3\xa9", exec_dir);
        if (symlink("/bin/true", exec_link) < 0)
                return -errno;
        r = spawn(rec, "tpd-exec", 1, exec_run, NULL);
        return r < 0 ? (int) r : 0;
}

/* --- signed: negative signal codes, failing syscalls, wakeups across CPUs --- */

static int sig_pipe[2];

static void signal_run(Recording *rec, void *arg) {
        union sigval v = { .sival_int = 7 };
        sigset_t set;
        char b = 'x';

        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        sigaddset(&set, SIGUSR2);
        sigprocmask(SIG_BLOCK, &set, NULL);
        signal(SIGCHLD, SIG_DFL);

        sigqueue(getpid(), SIGUSR1, v);                   /* code -1 (SI_QUEUE), delivered */
        sigqueue(getpid(), SIGUSR1, v);                   /* already pending */
        syscall(SYS_tgkill, getpid(), gettid(), SIGUSR2); /* code -6 (SI_TKILL) */
        kill(getpid(), SIGCHLD);                          /* ignored */
        close(-1);                                        /* ret -9 */
        (void) open("/nonexistent/tpd", O_RDONLY);        /* ret -2 */
        (void) !write(sig_pipe[1], &b, 1);                /* wakes the sleeper on CPU 1 */
}

static void sleeper_run(Recording *rec, void *arg) {
        char b;
        (void) !read(sig_pipe[0], &b, 1);
}

static int prepare_signed(Recording *rec) {
        pid_t r;

        if (pipe2(sig_pipe, O_CLOEXEC) < 0)
                return -errno;
        r = spawn(rec, "tpd-signal", 0, signal_run, NULL);
        if (r > 0)
                r = spawn(rec, "tpd-sleeper", 1, sleeper_run, NULL);
        return r < 0 ? (int) r : 0;
}

static void filter_signed(Recording *rec, const char *event, char *buf, size_t size) {
        if (strcmp(event, "sched:sched_wakeup") == 0)
                snprintf(buf, size, "pid == %d", rec->pids[1]);
        else
                snprintf(buf, size, "common_pid == %d", rec->pids[0]);
}

/* --- arrays: raw_syscalls:sys_enter (unsigned long args[6]) and a TCP connection's states
 * (__u8 address arrays, a pointer) --- */

static void arrays_run(Recording *rec, void *arg) {
        struct sockaddr_in sa = {
                .sin_family = AF_INET,
                .sin_port = htons((uint16_t) rec->port),
                .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
        };
        int c, a;

        c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c < 0 || connect(c, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                _exit(1);
        a = accept4(rec->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (a < 0)
                _exit(1);
        close(c);
        close(a);
        /* Let the FIN handshake finish while still traced. */
        usleep(20000);
}

static int prepare_arrays(Recording *rec) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(sa);
        pid_t r;

        rec->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (rec->listen_fd < 0 || bind(rec->listen_fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 ||
            listen(rec->listen_fd, 4) < 0 || getsockname(rec->listen_fd, (struct sockaddr *) &sa, &len) < 0)
                return -errno;
        rec->port = ntohs(sa.sin_port);
        r = spawn(rec, "tpd-tcp", 0, arrays_run, NULL);
        return r < 0 ? (int) r : 0;
}

static void filter_arrays(Recording *rec, const char *event, char *buf, size_t size) {
        if (strcmp(event, "sock:inet_sock_set_state") == 0)
                snprintf(buf, size, "sport == %d || dport == %d", rec->port, rec->port);
        else
                snprintf(buf, size, "common_pid == %d", rec->pids[0]);
}

static const Dataset datasets[] = {
        {
                .name = "sched_switch",
                .summary = "sched:sched_switch of two processes ping-ponging on CPU 0",
                .events = (const char *const[]){ "sched:sched_switch", NULL },
                .prepare = prepare_sched_switch,
                .filter = filter_sched_switch,
        },
        {
                .name = "getppid",
                .summary = "syscalls:sys_enter_getppid, 300 calls on CPU 1",
                .events = (const char *const[]){ "syscalls:sys_enter_getppid", NULL },
                .prepare = prepare_getppid,
                .filter = filter_first_pid,
        },
        {
                .name = "print",
                .summary = "ftrace:print from trace_marker: escapes, control bytes, UTF-8 valid and not, "
                           "an embedded NUL, a 3000-byte string",
                .events = (const char *const[]){ NULL },
                .extra_formats = (const char *const[]){ "ftrace:print", NULL },
                .prepare = prepare_print,
        },
        {
                .name = "exec",
                .summary = "sched:sched_process_exec (__data_loc char[], not UTF-8) and "
                           "syscalls:sys_enter_openat (a pointer, 8-byte \"int\" fields)",
                .events = (const char *const[]){ "sched:sched_process_exec", "syscalls:sys_enter_openat",
                                                 NULL },
                .prepare = prepare_exec,
                .filter = filter_first_pid,
        },
        {
                .name = "signed",
                .summary = "signal:signal_generate (negative codes), raw_syscalls:sys_exit (negative "
                           "returns), sched:sched_wakeup across CPUs",
                .events = (const char *const[]){ "signal:signal_generate", "raw_syscalls:sys_exit",
                                                 "sched:sched_wakeup", NULL },
                .prepare = prepare_signed,
                .filter = filter_signed,
        },
        {
                .name = "arrays",
                .summary = "raw_syscalls:sys_enter (unsigned long args[6]) and sock:inet_sock_set_state "
                           "(__u8 arrays, a pointer) of one loopback TCP connection",
                .events =
                        (const char *const[]){ "raw_syscalls:sys_enter", "sock:inet_sock_set_state", NULL },
                .prepare = prepare_arrays,
                .filter = filter_arrays,
        },
        {
                .name = "overrun",
                .summary = "3000 getppid calls into a 4 KiB-per-CPU buffer: the first page read says how "
                           "many records the kernel overwrote",
                .events = (const char *const[]){ "syscalls:sys_enter_getppid", NULL },
                .buffer_size_kb = 4,
                .prepare = prepare_overrun,
                .filter = filter_first_pid,
        },
};

static int ensure_tracefs(void) {
        if (access(TRACEFS "/instances", F_OK) == 0)
                return 0;
        /* tracefs is not always mounted at boot. */
        if (mount("nodev", TRACEFS, "tracefs", 0, NULL) < 0) {
                fprintf(stderr, "Failed to mount tracefs on " TRACEFS ": %m\n");
                return -errno;
        }
        return 0;
}

static int enable_event(Recording *rec, const char *event, bool on) {
        char file[PATH_MAX], sys[128];
        const char *colon = strchr(event, ':');

        snprintf(sys, sizeof(sys), "%.*s", (int) (colon - event), event);
        snprintf(file, sizeof(file), "events/%s/%s/enable", sys, colon + 1);
        return instance_write(rec, file, on ? "1" : "0");
}

static int set_filter(Recording *rec, const char *event) {
        char file[PATH_MAX], sys[128], filter[512];
        const char *colon = strchr(event, ':');

        if (!rec->set->filter)
                return 0;
        rec->set->filter(rec, event, filter, sizeof(filter));
        snprintf(sys, sizeof(sys), "%.*s", (int) (colon - event), event);
        snprintf(file, sizeof(file), "events/%s/%s/filter", sys, colon + 1);
        return instance_write(rec, file, filter);
}

static int save_format(const char *event, const char *outdir) {
        char src[PATH_MAX], dst[PATH_MAX * 2], sys[128];
        const char *colon = strchr(event, ':');
        int r;

        snprintf(sys, sizeof(sys), "%.*s", (int) (colon - event), event);
        snprintf(src, sizeof(src), TRACEFS "/events/%s/%s/format", sys, colon + 1);
        snprintf(dst, sizeof(dst), "%s/%s.%s.format", outdir, sys, colon + 1);
        r = copy_file(src, dst);
        if (r < 0)
                fprintf(stderr, "Failed to copy %s: %s\n", src, strerror(-r));
        return r;
}

/* Reads every page of every CPU; returns the number of pages saved. */
static int save_pages(Recording *rec, const char *outdir) {
        long n_cpus = sysconf(_SC_NPROCESSORS_CONF);
        int total = 0;

        for (long cpu = 0; cpu < n_cpus; cpu++) {
                char path[PATH_MAX * 2], page[PAGE_SIZE_TRACE];
                int fd, out = -1;
                ssize_t n;

                snprintf(path, sizeof(path), "%s/per_cpu/cpu%ld/trace_pipe_raw", rec->instance, cpu);
                fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
                if (fd < 0)
                        continue;
                /* read() hands out a partial page too, unlike splice: nothing is left behind. */
                while ((n = read(fd, page, sizeof(page))) > 0) {
                        if (n != PAGE_SIZE_TRACE) {
                                fprintf(stderr, "CPU %ld: short page read (%zd bytes)\n", cpu, n);
                                close(fd);
                                if (out >= 0)
                                        close(out);
                                return -EIO;
                        }
                        if (out < 0) {
                                snprintf(path, sizeof(path), "%s/cpu%ld.pages", outdir, cpu);
                                out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                                if (out < 0) {
                                        close(fd);
                                        return -errno;
                                }
                        }
                        if (write(out, page, sizeof(page)) != (ssize_t) sizeof(page)) {
                                close(fd);
                                close(out);
                                return -EIO;
                        }
                        total++;
                }
                if (n < 0 && errno != EAGAIN) {
                        fprintf(stderr, "Failed to read %s: %m\n", path);
                        close(fd);
                        if (out >= 0)
                                close(out);
                        return -errno;
                }
                close(fd);
                if (out >= 0)
                        close(out);
        }
        return total;
}

static int save_stats(Recording *rec, const char *outdir) {
        long n_cpus = sysconf(_SC_NPROCESSORS_CONF);
        char path[PATH_MAX * 2];
        FILE *out;

        snprintf(path, sizeof(path), "%s/stats.txt", outdir);
        out = fopen(path, "we");
        if (!out)
                return -errno;
        for (long cpu = 0; cpu < n_cpus; cpu++) {
                char line[256];
                FILE *in;

                snprintf(path, sizeof(path), "%s/per_cpu/cpu%ld/stats", rec->instance, cpu);
                in = fopen(path, "re");
                if (!in)
                        continue;
                fprintf(out, "cpu%ld\n", cpu);
                while (fgets(line, sizeof(line), in))
                        fprintf(out, "\t%s", line);
                fclose(in);
        }
        fclose(out);
        return 0;
}

static int record(const Dataset *set, const char *outdir) {
        Recording rec = { .set = set, .go = { -1, -1 }, .listen_fd = -1 };
        char path[PATH_MAX * 2];
        int r, status, failed = 0;
        FILE *f;

        r = ensure_tracefs();
        if (r < 0)
                return r;
        if (mkdir(outdir, 0755) < 0 && errno != EEXIST)
                return -errno;

        snprintf(rec.instance, sizeof(rec.instance), TRACEFS "/instances/tpd-record-%d", (int) getpid());
        if (mkdir(rec.instance, 0755) < 0) {
                fprintf(stderr, "Failed to create %s: %m\n", rec.instance);
                return -errno;
        }

        /* Nothing recorded until the filters are in place. */
        r = instance_write(&rec, "tracing_on", "0");
        if (r >= 0)
                r = instance_write(&rec, "trace_clock", "boot");
        if (r >= 0 && set->buffer_size_kb > 0) {
                char kb[32];
                snprintf(kb, sizeof(kb), "%u", set->buffer_size_kb);
                r = instance_write(&rec, "buffer_size_kb", kb);
        }
        if (r >= 0 && pipe2(rec.go, O_CLOEXEC) < 0)
                r = -errno;
        if (r >= 0)
                r = set->prepare(&rec);
        for (const char *const *e = set->events; r >= 0 && *e; e++) {
                r = set_filter(&rec, *e);
                if (r >= 0)
                        r = enable_event(&rec, *e, true);
        }
        if (r >= 0)
                r = instance_write(&rec, "tracing_on", "1");
        if (r >= 0) {
                char go[MAX_CHILDREN];
                memset(go, 'g', sizeof(go));
                if (write(rec.go[1], go, rec.n_children) != (ssize_t) rec.n_children)
                        r = -EIO;
        }
        if (rec.go[1] >= 0)
                close(rec.go[1]);
        for (unsigned i = 0; i < rec.n_children; i++) {
                if (r < 0)
                        kill(rec.pids[i], SIGKILL);
                if (waitpid(rec.pids[i], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                        failed = 1;
        }
        (void) instance_write(&rec, "tracing_on", "0");
        for (const char *const *e = set->events; *e; e++)
                (void) enable_event(&rec, *e, false);
        if (r >= 0 && failed) {
                fprintf(stderr, "A workload process of '%s' failed.\n", set->name);
                r = -ECHILD;
        }

        if (r >= 0) {
                /* The text rendering first: reading `trace` does not consume, trace_pipe_raw does. */
                snprintf(path, sizeof(path), "%s/trace", rec.instance);
                char dst[PATH_MAX * 2];
                snprintf(dst, sizeof(dst), "%s/trace.txt", outdir);
                r = copy_file(path, dst);
        }
        if (r >= 0)
                r = save_stats(&rec, outdir);
        if (r >= 0) {
                r = save_pages(&rec, outdir);
                if (r >= 0)
                        fprintf(stderr, "%s: %d pages\n", set->name, r);
        }
        if (r >= 0) {
                char dst[PATH_MAX * 2];
                snprintf(dst, sizeof(dst), "%s/header_page", outdir);
                r = copy_file(TRACEFS "/events/header_page", dst);
        }
        for (const char *const *e = set->events; r >= 0 && *e; e++)
                r = save_format(*e, outdir);
        for (const char *const *e = set->extra_formats; r >= 0 && e && *e; e++)
                r = save_format(*e, outdir);
        if (r >= 0) {
                snprintf(path, sizeof(path), "%s/comms", outdir);
                f = fopen(path, "we");
                if (!f)
                        r = -errno;
                else {
                        for (unsigned i = 0; i < rec.n_children; i++)
                                fprintf(f, "%d %s\n", (int) rec.pids[i], rec.comms[i]);
                        fclose(f);
                }
        }

        if (rmdir(rec.instance) < 0) {
                fprintf(stderr, "Failed to remove %s: %m\n", rec.instance);
                if (r >= 0)
                        r = -errno;
        }
        if (exec_link[0]) {
                unlink(exec_link);
                rmdir(exec_dir);
        }
        if (rec.listen_fd >= 0)
                close(rec.listen_fd);
        return r;
}

int main(int argc, char **argv) {
        if (argc == 2 && strcmp(argv[1], "--list") == 0) {
                for (size_t i = 0; i < sizeof(datasets) / sizeof(datasets[0]); i++)
                        printf("%-14s %s\n", datasets[i].name, datasets[i].summary);
                return 0;
        }
        if (argc != 3) {
                fprintf(stderr, "usage: record-pages DATASET OUTDIR | --list\n");
                return 2;
        }
        for (size_t i = 0; i < sizeof(datasets) / sizeof(datasets[0]); i++)
                if (strcmp(datasets[i].name, argv[1]) == 0) {
                        int r = record(&datasets[i], argv[2]);
                        if (r < 0) {
                                fprintf(stderr, "Recording '%s' failed: %s\n", argv[1], strerror(-r));
                                return 1;
                        }
                        return 0;
                }
        fprintf(stderr, "Unknown dataset '%s'; see --list.\n", argv[1]);
        return 2;
}
