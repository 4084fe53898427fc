/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Whether the decoder scales across threads: the recorded pages of tests/data replayed as a machine
 * of many CPUs and decoded by 1, 2, … worker threads. A benchmark, never a test
 * (tests/bench/README.md; the figures are in docs/performance.md, "Scaling past one core").
 *
 *   decode-scaling [--cpus C] [--pages P] [--workers 1,2] [--dataset NAME]… [--repeat N]
 *                  [--batch-pages N] [--rate NAME=PER_CPU_PER_S]… [--datadir DIR]
 *
 * CPU i of the machine gets its own copy of the dataset's pages (all of its CPUs' pages in a row),
 * repeated up to P pages: by default enough for half a second of one thread's work. Worker w owns
 * the CPUs i with i % W == w and decodes them as tpd's loop does: one read of --batch-pages pages
 * (the reader's splice size) of one CPU after another, page by page with decoder_decode_page()
 * into one Batch reset before each read, each CPU's pages in order.
 *
 * Each worker has a tep handle and a Decoder of its own. core/decode.c reads the tep only to compile
 * an event's plan (the first record of an id: tep_find_event(), which writes the handle's
 * last_event cache) and for the "sym" and "print" variants; a plain record touches no tep. A shared
 * handle would be safe only once every plan was compiled before the threads start; one per worker
 * is what separate decoders need anyway. The handles are filled before the workers start (see
 * machine_run()).
 */

#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>

#include "decode-helpers.h"
#include "util.h"

#define MAX_WORKERS 64
#define MAX_DATASETS 8
#define MAX_REPEAT 15
#define CALIBRATE_NS 200000000ULL /* of one thread's decoding, to choose P */
#define TARGET_NS 500000000ULL    /* what P should cost one thread */

typedef struct Machine {
        const char *name;
        unsigned n_cpus;
        size_t n_pages; /* per CPU */
        uint8_t **pages;
        uint64_t records; /* what one pass over all CPUs yields, from the first run */
        uint64_t bytes;   /* of JSON lines, the same */
} Machine;

/* One cache line each: nothing of one worker shares a line with another's. */
typedef struct Worker {
        _Alignas(64) pthread_t thread;
        const Machine *m;
        Dataset ds; /* its own tep handle and comms */
        pthread_barrier_t *start;
        unsigned index, n_workers, batch_pages;
        int pin; /* the CPU it runs on, or -1 */
        uint64_t records, bytes, cpu_ns;
        uint64_t begin, end; /* CLOCK_MONOTONIC */
        long ivcsw;          /* involuntary context switches: another task took its CPU */
} Worker;

typedef struct Run {
        uint64_t records, bytes, wall_ns, cpu_ns;
        long ivcsw;
} Run;

static uint64_t now_ns(clockid_t clock) {
        struct timespec ts;

        ASSERT(clock_gettime(clock, &ts) == 0);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

static long thread_ivcsw(void) {
        struct rusage ru;

        ASSERT(getrusage(RUSAGE_THREAD, &ru) == 0);
        return ru.ru_nivcsw;
}

/* Every page of the dataset, CPU 0's first, in one buffer. */
static uint8_t *dataset_all_pages(const Dataset *ds, size_t *ret_n) {
        size_t n = 0, at = 0;
        uint8_t *all;

        for (unsigned cpu = 0; cpu < MAX_CPUS; cpu++)
                n += ds->n_pages[cpu];
        if (n == 0)
                TEST_FAIL("%s has no pages", ds->dir);
        all = malloc(n * PAGE);
        ASSERT(all);
        for (unsigned cpu = 0; cpu < MAX_CPUS; cpu++) {
                memcpy(all + at * PAGE, ds->pages[cpu], ds->n_pages[cpu] * PAGE);
                at += ds->n_pages[cpu];
        }
        *ret_n = n;
        return all;
}

/* One thread's nanoseconds per page of the dataset, decoding it over and over for a while. */
static double calibrate_ns_per_page(Dataset *ds, const uint8_t *all, size_t n) {
        Decoder *d = dataset_decoder(ds, false);
        Batch *b = batch_new();
        uint64_t start, pages = 0, ns;

        ASSERT(b);
        start = now_ns(CLOCK_THREAD_CPUTIME_ID);
        do {
                batch_reset(b);
                for (size_t i = 0; i < n; i++)
                        ASSERT(decoder_decode_page(d, all + i * PAGE, PAGE, 0, b) >= 0);
                pages += n;
                ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - start;
        } while (ns < CALIBRATE_NS);
        batch_unref(b);
        decoder_free(d);
        return (double) ns / (double) pages;
}

static void machine_make(Machine *m, const char *datadir, const char *name, unsigned n_cpus,
                         size_t n_pages) {
        size_t n_src;
        uint8_t *src;
        Dataset ds;

        dataset_load(&ds, datadir, name);
        src = dataset_all_pages(&ds, &n_src);
        if (n_pages == 0) {
                double per_page = calibrate_ns_per_page(&ds, src, n_src);
                n_pages = (size_t) ((double) TARGET_NS / (per_page * n_cpus)) + 1;
        }
        *m = (Machine){ .name = name, .n_cpus = n_cpus, .n_pages = MAX(n_pages, n_src) };
        m->pages = calloc(n_cpus, sizeof(uint8_t *));
        ASSERT(m->pages);
        for (unsigned cpu = 0; cpu < n_cpus; cpu++) {
                m->pages[cpu] = aligned_alloc(PAGE, m->n_pages * PAGE);
                ASSERT(m->pages[cpu]);
                for (size_t i = 0; i < m->n_pages; i++)
                        memcpy(m->pages[cpu] + i * PAGE, src + (i % n_src) * PAGE, PAGE);
        }
        free(src);
        dataset_done(&ds);
}

static void machine_done(Machine *m) {
        for (unsigned cpu = 0; cpu < m->n_cpus; cpu++)
                free(m->pages[cpu]);
        free(m->pages);
}

static void *worker_main(void *userdata) {
        Worker *w = userdata;
        const Machine *m = w->m;
        uint64_t records = 0, bytes = 0, cpu0;
        long ivcsw0;
        Decoder *d;
        Batch *b;

        if (w->pin >= 0) {
                cpu_set_t set;

                CPU_ZERO(&set);
                CPU_SET(w->pin, &set);
                ASSERT_INT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(set), &set), 0);
        }
        d = dataset_decoder(&w->ds, false);
        b = batch_new();
        ASSERT(b);

        pthread_barrier_wait(w->start);
        w->begin = now_ns(CLOCK_MONOTONIC);
        cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
        ivcsw0 = thread_ivcsw();
        for (size_t off = 0; off < m->n_pages; off += w->batch_pages) {
                size_t end = MIN(off + w->batch_pages, m->n_pages);

                for (unsigned cpu = w->index; cpu < m->n_cpus; cpu += w->n_workers) {
                        batch_reset(b);
                        for (size_t i = off; i < end; i++)
                                if (decoder_decode_page(d, m->pages[cpu] + i * PAGE, PAGE, cpu, b) < 0)
                                        TEST_FAIL("%s: CPU %u page %zu did not decode", m->name, cpu, i);
                        records += b->n_records;
                        bytes += b->buf.len;
                }
        }
        w->cpu_ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
        w->ivcsw = thread_ivcsw() - ivcsw0;
        w->end = now_ns(CLOCK_MONOTONIC);
        w->records = records;
        w->bytes = bytes;

        batch_unref(b);
        decoder_free(d);
        return NULL;
}

/* The CPUs this process may run on, in order; their number. */
static unsigned allowed_cpus(int *cpus, unsigned max) {
        cpu_set_t set;
        unsigned n = 0;

        ASSERT(sched_getaffinity(0, sizeof(set), &set) == 0);
        for (int cpu = 0; cpu < CPU_SETSIZE && n < max; cpu++)
                if (CPU_ISSET(cpu, &set))
                        cpus[n++] = cpu;
        return n;
}

static Run machine_run(Machine *m, const char *datadir, unsigned n_workers, unsigned batch_pages) {
        int cpus[MAX_WORKERS];
        unsigned n_allowed = allowed_cpus(cpus, MAX_WORKERS);
        pthread_barrier_t start;
        Worker *w;
        Run run = {};
        uint64_t begin = UINT64_MAX, end = 0;

        w = aligned_alloc(64, n_workers * sizeof(Worker));
        ASSERT(w);
        ASSERT_INT_EQ(pthread_barrier_init(&start, NULL, n_workers + 1), 0);
        for (unsigned i = 0; i < n_workers; i++) {
                w[i] = (Worker){
                        .m = m,
                        .start = &start,
                        .index = i,
                        .n_workers = n_workers,
                        .batch_pages = batch_pages,
                        .pin = n_workers <= n_allowed ? cpus[i] : -1,
                };
                /* Here, one after the other: libtraceevent's format parser keeps its input in
                 * static variables, so tep_parse_event() must not run on two threads at once, not
                 * even into separate handles (helgrind shows the race). The pages it loads too are
                 * not used. */
                dataset_load(&w[i].ds, datadir, m->name);
                ASSERT_INT_EQ(pthread_create(&w[i].thread, NULL, worker_main, &w[i]), 0);
        }
        pthread_barrier_wait(&start);
        /* Wall time from the first worker's start to the last one's end: this thread may wake
         * later than they do. */
        for (unsigned i = 0; i < n_workers; i++) {
                ASSERT_INT_EQ(pthread_join(w[i].thread, NULL), 0);
                run.records += w[i].records;
                run.bytes += w[i].bytes;
                run.cpu_ns += w[i].cpu_ns;
                run.ivcsw += w[i].ivcsw;
                begin = MIN(begin, w[i].begin);
                end = MAX(end, w[i].end);
                dataset_done(&w[i].ds);
        }
        run.wall_ns = end - begin;
        pthread_barrier_destroy(&start);
        free(w);

        /* Every configuration must decode the same records, or it measured something else. */
        if (m->records == 0) {
                m->records = run.records;
                m->bytes = run.bytes;
        }
        ASSERT_U64_EQ(run.records, m->records);
        ASSERT_U64_EQ(run.bytes, m->bytes);
        return run;
}

static double rate(const Run *r) {
        return (double) r->records * 1e9 / (double) r->wall_ns;
}

static double cost(const Run *r) {
        return (double) r->cpu_ns / (double) r->records;
}

static int cmp_rate(const void *a, const void *b) {
        double x = rate(a), y = rate(b);
        return (x > y) - (x < y);
}

static unsigned parse_list(const char *s, unsigned *out, unsigned max) {
        unsigned n = 0;

        for (const char *p = s; *p;) {
                char *end;
                unsigned long v = strtoul(p, &end, 10);

                if (end == p || v == 0 || v > MAX_WORKERS || n == max || (*end && *end != ','))
                        TEST_FAIL("bad list of worker counts: %s", s);
                out[n++] = (unsigned) v;
                p = *end ? end + 1 : end;
        }
        return n;
}

typedef struct Options {
        unsigned n_cpus, repeat, batch_pages;
        size_t n_pages;
        unsigned workers[MAX_WORKERS], n_workers;
        char *datasets[MAX_DATASETS];
        unsigned n_datasets;
        char *rate_names[MAX_DATASETS];
        double rates[MAX_DATASETS];
        unsigned n_rates;
        const char *datadir;
} Options;

static void add_rate(Options *o, char *name, double per_cpu) {
        for (unsigned i = 0; i < o->n_rates; i++)
                if (strcmp(o->rate_names[i], name) == 0) {
                        o->rates[i] = per_cpu;
                        return;
                }
        ASSERT(o->n_rates < MAX_DATASETS);
        o->rate_names[o->n_rates] = name;
        o->rates[o->n_rates++] = per_cpu;
}

static const char usage[] =
        "decode-scaling [--cpus C] [--pages P] [--workers 1,2] [--dataset NAME]... [--repeat N]\n"
        "               [--batch-pages N] [--rate NAME=PER_CPU_PER_S]... [--datadir DIR]\n"
        "  --cpus         CPUs of the replayed machine (192)\n"
        "  --pages        pages per CPU (0: about 0.5 s of one thread's decoding)\n"
        "  --workers      worker counts to compare, the first one the base of the speed-up (1,2)\n"
        "  --dataset      datasets of tests/data (sched_switch,getppid)\n"
        "  --repeat       runs of each count, interleaved; the median is shown (3)\n"
        "  --batch-pages  pages of one CPU decoded into a batch between resets, tpd's read (64)\n"
        "  --rate         records per second per CPU a machine makes, for the cores it would need\n"
        "                 (sched_switch=50000, getppid=2100000)\n";

static void parse_options(Options *o, int argc, char **argv) {
        static const struct option longopts[] = {
                { "cpus", required_argument, NULL, 'c' },    { "pages", required_argument, NULL, 'p' },
                { "workers", required_argument, NULL, 'w' }, { "dataset", required_argument, NULL, 'd' },
                { "repeat", required_argument, NULL, 'r' },  { "batch-pages", required_argument, NULL, 'b' },
                { "rate", required_argument, NULL, 'R' },    { "datadir", required_argument, NULL, 'D' },
                { "help", no_argument, NULL, 'h' },          {},
        };
        int c;

        *o = (Options){ .n_cpus = 192, .repeat = 3, .batch_pages = 64, .datadir = TPD_TEST_DATA_DIR };
        o->n_workers = parse_list("1,2", o->workers, MAX_WORKERS);
        /* A busy server's scheduler, and the getppid storm one CPU generates (docs/performance.md). */
        add_rate(o, (char *) "sched_switch", 50000);
        add_rate(o, (char *) "getppid", 2100000);
        while ((c = getopt_long(argc, argv, "", longopts, NULL)) >= 0) {
                char *eq;

                switch (c) {
                case 'c':
                        o->n_cpus = (unsigned) strtoul(optarg, NULL, 10);
                        break;
                case 'p':
                        o->n_pages = strtoul(optarg, NULL, 10);
                        break;
                case 'w':
                        o->n_workers = parse_list(optarg, o->workers, MAX_WORKERS);
                        break;
                case 'd':
                        for (char *s = strtok(optarg, ","); s; s = strtok(NULL, ",")) {
                                ASSERT(o->n_datasets < MAX_DATASETS);
                                o->datasets[o->n_datasets++] = s;
                        }
                        break;
                case 'r':
                        o->repeat = (unsigned) strtoul(optarg, NULL, 10);
                        break;
                case 'b':
                        o->batch_pages = (unsigned) strtoul(optarg, NULL, 10);
                        break;
                case 'R':
                        eq = strchr(optarg, '=');
                        if (!eq)
                                TEST_FAIL("--rate wants NAME=RECORDS_PER_CPU_PER_SECOND");
                        *eq = 0;
                        add_rate(o, optarg, strtod(eq + 1, NULL));
                        break;
                case 'D':
                        o->datadir = optarg;
                        break;
                case 'h':
                        printf("%s", usage);
                        exit(0);
                default:
                        fprintf(stderr, "%s", usage);
                        exit(2);
                }
        }
        if (o->n_datasets == 0) {
                o->datasets[o->n_datasets++] = (char *) "sched_switch";
                o->datasets[o->n_datasets++] = (char *) "getppid";
        }
        if (o->n_cpus == 0 || o->repeat == 0 || o->repeat > MAX_REPEAT || o->batch_pages == 0)
                TEST_FAIL("--cpus, --repeat (at most %d) and --batch-pages must be positive", MAX_REPEAT);
}

/* What one core does and what a machine of n_cpus at the given rate per CPU would need. */
static void print_per_core(const Options *o, const Machine *m, unsigned n_workers, const Run *run) {
        double per_core = (double) run->records * 1e9 / (double) run->cpu_ns;

        printf("%s: %.2f M records/s per core (%.0f ns of CPU per record, %u worker%s)", m->name,
               per_core / 1e6, (double) run->cpu_ns / (double) run->records, n_workers,
               n_workers == 1 ? "" : "s");
        for (unsigned i = 0; i < o->n_rates; i++)
                if (strcmp(o->rate_names[i], m->name) == 0) {
                        double need = o->rates[i] * o->n_cpus;
                        printf("; %u CPUs at %.0f/s each = %.1f M/s: %.1f cores of decoding", o->n_cpus,
                               o->rates[i], need / 1e6, need / per_core);
                }
        printf("\n");
}

static void report(const Options *o, const Machine *m, Run runs[][MAX_REPEAT], Run *medians) {
        int cpus[MAX_WORKERS];
        unsigned n_allowed = allowed_cpus(cpus, MAX_WORKERS);

        printf("\n%s: %u CPUs × %zu pages, %" PRIu64 " records a run (%.0f bytes of JSON each), reads of %u "
               "pages, median of %u\n",
               m->name, m->n_cpus, m->n_pages, m->records, (double) m->bytes / (double) m->records,
               o->batch_pages, o->repeat);
        printf("%-7s %-14s %9s %19s %11s %7s %6s %8s %6s\n", "workers", "pinned", "wall ms",
               "M rec/s (min-max)", "CPU ns/rec", "on-CPU", "ivcsw", "speed-up", "cost");
        for (unsigned k = 0; k < o->n_workers; k++) {
                Run *sorted = runs[k], *med = &medians[k];
                unsigned w = o->workers[k];

                qsort(sorted, o->repeat, sizeof(Run), cmp_rate);
                *med = sorted[o->repeat / 2];
                printf("%-7u %-14s %9.1f %5.2f (%5.2f-%5.2f) %11.1f %6.0f%% %6ld %7.2fx %6.2f\n", w,
                       w <= n_allowed ? "yes" : "oversubscribed", (double) med->wall_ns / 1e6,
                       rate(med) / 1e6, rate(&sorted[0]) / 1e6, rate(&sorted[o->repeat - 1]) / 1e6,
                       cost(med), 100.0 * (double) med->cpu_ns / ((double) med->wall_ns * w), med->ivcsw,
                       rate(med) / rate(&medians[0]), cost(med) / cost(&medians[0]));
        }
}

int main(int argc, char **argv) {
        static Run runs[MAX_WORKERS][MAX_REPEAT];
        Run medians[MAX_WORKERS];
        Options o;

        parse_options(&o, argc, argv);
        printf("speed-up: records/s against the first worker count; cost: CPU time per record against it\n"
               "(above 1: the threads slow each other down); on-CPU: CPU time of the workers over wall\n"
               "time × workers (below 100%%: they waited for a CPU); ivcsw: involuntary switches\n");
        /* One machine at a time: hundreds of MiB each at the default size. */
        for (unsigned i = 0; i < o.n_datasets; i++) {
                Machine m;

                machine_make(&m, o.datadir, o.datasets[i], o.n_cpus, o.n_pages);
                /* Interleaved, so that a slow phase of the machine spreads over every count. */
                for (unsigned r = 0; r < o.repeat; r++)
                        for (unsigned k = 0; k < o.n_workers; k++)
                                runs[k][r] = machine_run(&m, o.datadir, o.workers[k], o.batch_pages);
                report(&o, &m, runs, medians);
                print_per_core(&o, &m, o.workers[0], &medians[0]);
                machine_done(&m);
        }
        return 0;
}
