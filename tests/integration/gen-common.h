/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Small helpers shared by the integration-test load generators. Header-only on purpose: each
 * generator is one self-contained executable and none of them links anything of tpd. The common
 * options and the stdin/stdout protocol live here once, so that the generators, which the tests
 * drive all alike (tpdtest.Generator), cannot drift apart.
 */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Exit statuses the tests tell apart (besides 0, and 1 for any failure). */
#define GEN_EXIT_USAGE 2
#define GEN_EXIT_EOF 3

static inline uint64_t gen_now_ns(clockid_t clock) {
        struct timespec ts;

        clock_gettime(clock, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

/* Sleeps until CLOCK_MONOTONIC reaches deadline_ns; restarts after signals. */
static inline void gen_sleep_until_ns(uint64_t deadline_ns) {
        struct timespec ts = {
                .tv_sec = (time_t) (deadline_ns / 1000000000ULL),
                .tv_nsec = (long) (deadline_ns % 1000000000ULL),
        };

        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                ;
}

static inline int gen_parse_u64(const char *s, uint64_t *ret) {
        char *end;
        unsigned long long v;

        if (!s || !*s || *s == '-')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 0);
        if (errno != 0 || *end != '\0')
                return -EINVAL;
        *ret = v;
        return 0;
}

static inline int gen_pin_cpu(int cpu) {
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) < 0)
                return -errno;
        return 0;
}

/*
 * The command line. Every generator takes --count/-n, --cpu/-c, --out/-o FILE (its lines go there)
 * and --help/-h; the flags add the rest of the common options and say whether operands follow. -w is
 * --no-wait in the generators that wait for the go by default and --wait in those that do not.
 */
enum {
        GEN_OPT_RATE = 1 << 0,     /* --rate/-r */
        GEN_OPT_NO_WAIT = 1 << 1,  /* waits for the go unless --no-wait/-w */
        GEN_OPT_WAIT = 1 << 2,     /* starts at once unless --wait/-w */
        GEN_OPT_OPERANDS = 1 << 3, /* one or more operands, from optind on; else none */
};

/* Common options plus a generator's own ones, and the terminating entry. */
#define GEN_OPTIONS_MAX 16

typedef struct GenArgs {
        /* Set by the generator; count holds its default. */
        const char *name;  /* prefixes the messages on stderr */
        const char *usage; /* for --help (stdout) and bad usage (stderr) */
        unsigned flags;
        const struct option *extra; /* the generator's own options (NULL-terminated) or NULL */
        uint64_t count;

        /* Set by gen_getopt(). */
        uint64_t rate, cpu;
        int pin, wait_for_go;

        /* Built by the first gen_getopt() call: shortopts holds val and maybe ':' per option. */
        struct option options[GEN_OPTIONS_MAX];
        char shortopts[2 * GEN_OPTIONS_MAX];
} GenArgs;

static inline void gen_bad_usage(const GenArgs *a) {
        fputs(a->usage, stderr);
        exit(GEN_EXIT_USAGE);
}

static inline void gen_add_option(GenArgs *a, size_t *n, const struct option *o) {
        char *s = a->shortopts + strlen(a->shortopts);

        /* Too many options is a bug in the generator, not bad usage: fail loudly. */
        if (*n >= GEN_OPTIONS_MAX - 1) {
                fprintf(stderr, "%s: more than %d options\n", a->name, GEN_OPTIONS_MAX - 1);
                abort();
        }
        a->options[(*n)++] = *o;
        *s++ = (char) o->val;
        if (o->has_arg == required_argument)
                *s++ = ':';
        *s = '\0';
}

static inline void gen_build_options(GenArgs *a) {
        static const struct option count = { "count", required_argument, NULL, 'n' },
                                   rate = { "rate", required_argument, NULL, 'r' },
                                   cpu = { "cpu", required_argument, NULL, 'c' },
                                   no_wait = { "no-wait", no_argument, NULL, 'w' },
                                   wait = { "wait", no_argument, NULL, 'w' },
                                   out = { "out", required_argument, NULL, 'o' },
                                   help = { "help", no_argument, NULL, 'h' };
        size_t n = 0;

        a->shortopts[0] = '\0';
        for (const struct option *o = a->extra; o && o->name; o++)
                gen_add_option(a, &n, o);
        gen_add_option(a, &n, &count);
        if (a->flags & GEN_OPT_RATE)
                gen_add_option(a, &n, &rate);
        gen_add_option(a, &n, &cpu);
        if (a->flags & GEN_OPT_NO_WAIT)
                gen_add_option(a, &n, &no_wait);
        if (a->flags & GEN_OPT_WAIT)
                gen_add_option(a, &n, &wait);
        gen_add_option(a, &n, &out);
        gen_add_option(a, &n, &help);
        a->options[n] = (struct option){ NULL, 0, NULL, 0 };
        a->wait_for_go = !!(a->flags & GEN_OPT_NO_WAIT);
}

/*
 * getopt_long() over the common options and a->extra, whose val must be their short option (none
 * of n, r, c, w, o, h). Handles the common ones itself, --help and bad usage included (those exit
 * with 0 and 2), and returns the generator's own ones one at a time, optarg set. Returns 0 once
 * all options are read and the operands are as the flags want them; a generator without options
 * of its own calls it just once.
 */
static inline int gen_getopt(GenArgs *a, int argc, char **argv) {
        int c;

        if (!a->options[0].name)
                gen_build_options(a);

        while ((c = getopt_long(argc, argv, a->shortopts, a->options, NULL)) >= 0) {
                switch (c) {
                case 'n':
                        if (gen_parse_u64(optarg, &a->count) < 0)
                                gen_bad_usage(a);
                        break;
                case 'r':
                        if (gen_parse_u64(optarg, &a->rate) < 0)
                                gen_bad_usage(a);
                        break;
                case 'c':
                        if (gen_parse_u64(optarg, &a->cpu) < 0 || a->cpu >= CPU_SETSIZE)
                                gen_bad_usage(a);
                        a->pin = 1;
                        break;
                case 'w':
                        a->wait_for_go = !(a->flags & GEN_OPT_NO_WAIT);
                        break;
                case 'o':
                        /* The lines elsewhere: a generator run by `tpctl stream -- CMD` shares
                         * tpctl's stdout otherwise. */
                        if (!freopen(optarg, "w", stdout)) {
                                fprintf(stderr, "%s: cannot write %s: %s\n", a->name, optarg,
                                        strerror(errno));
                                exit(2);
                        }
                        break;
                case 'h':
                        fputs(a->usage, stdout);
                        exit(0);
                case '?':
                        gen_bad_usage(a);
                        break;
                default:
                        return c;
                }
        }
        if (a->flags & GEN_OPT_OPERANDS ? optind >= argc : optind != argc)
                gen_bad_usage(a);
        return 0;
}

/* Pins to --cpu, if given; on failure says why, and the generator exits 1. */
static inline int gen_pin(const GenArgs *a) {
        int r;

        if (!a->pin)
                return 0;
        r = gen_pin_cpu((int) a->cpu);
        if (r < 0)
                fprintf(stderr, "%s: cannot pin to CPU %" PRIu64 ": %s\n", a->name, a->cpu, strerror(-r));
        return r;
}

/*
 * Pacing: with rate_per_s == 0 it never waits. Otherwise the i-th operation is due at
 * start + i / rate; operations run in batches of about 1 ms so that a paced run does not cost a
 * timer wake-up per operation (which would perturb the very thing being measured).
 */
typedef struct GenPacer {
        uint64_t rate_per_s;
        uint64_t start_ns;
        uint64_t batch;
} GenPacer;

static inline void gen_pacer_init(GenPacer *p, uint64_t rate_per_s) {
        p->rate_per_s = rate_per_s;
        p->start_ns = gen_now_ns(CLOCK_MONOTONIC);
        p->batch = rate_per_s / 1000;
        if (p->batch == 0)
                p->batch = 1;
}

/* Called before operation number done (0-based); waits if that operation is not due yet. */
static inline void gen_pacer_wait(GenPacer *p, uint64_t done) {
        uint64_t due_ns;

        if (p->rate_per_s == 0 || done % p->batch != 0)
                return;
        due_ns = p->start_ns + (uint64_t) ((unsigned __int128) done * 1000000000ULL / p->rate_per_s);
        if (gen_now_ns(CLOCK_MONOTONIC) < due_ns)
                gen_sleep_until_ns(due_ns);
}

/* Every line goes out at once: the test reads each one while the generator is still running. */
__attribute__((format(printf, 1, 2))) static inline void gen_say(const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        fflush(stdout);
}

/* Reads one line from stdin into buf (newline stripped). Returns 0, or -1 at EOF. */
static inline int gen_read_command(char *buf, size_t size) {
        size_t n;

        if (!fgets(buf, (int) size, stdin))
                return -1;
        n = strlen(buf);
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
                buf[--n] = '\0';
        return 0;
}

/*
 * Waits for the go on stdin, if a->wait_for_go. Without a probe any line is the go. With one,
 * "probe" calls it and answers "probed <boottime_ns>" (a test repeats that until its stream shows
 * the event, so it knows the stream is live before the measured run), "go" or an empty line is the
 * go and anything else is an error. Returns 0 at the go, else the status to exit with: 3 at EOF,
 * 1 after an unknown command.
 */
static inline int gen_wait_for_go(const GenArgs *a, void (*probe)(void)) {
        char cmd[128];

        while (a->wait_for_go) {
                if (gen_read_command(cmd, sizeof(cmd)) < 0)
                        return GEN_EXIT_EOF;
                if (!probe || cmd[0] == '\0' || strcmp(cmd, "go") == 0)
                        break;
                if (strcmp(cmd, "probe") != 0) {
                        fprintf(stderr, "%s: unknown command '%s'\n", a->name, cmd);
                        return 1;
                }
                probe();
                gen_say("probed %" PRIu64 "\n", gen_now_ns(CLOCK_BOOTTIME));
        }
        return 0;
}

/*
 * gen_wait_for_go(), then "go <boottime_ns>": taken just before the first event of the run, so a
 * test can tell the run's records from earlier ones (the probes) by their ts.
 */
static inline int gen_go(const GenArgs *a, void (*probe)(void)) {
        int r = gen_wait_for_go(a, probe);

        if (r != 0)
                return r;
        gen_say("go %" PRIu64 "\n", gen_now_ns(CLOCK_BOOTTIME));
        return 0;
}
