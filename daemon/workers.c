/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <traceevent/event-parse.h>

#include "core/page.h"
#include "log.h"
#include "workers.h"

static const char *context_comm(void *userdata, int pid, uint64_t ts) {
        DecodeContext *c = userdata;
        return comm_cache_lookup(c->comm, pid, ts);
}

static uint64_t context_missed(void *userdata, unsigned cpu, const uint64_t *stored) {
        DecodeContext *c = userdata;
        uint64_t n = c->missed(c->userdata, cpu, stored, &c->base);

        c->have_base = true;
        return n;
}

static const char *context_cgroup(void *userdata, int pid, uint64_t ts, size_t *ret_len) {
        DecodeContext *c = userdata;

        return c->cgroup ? c->cgroup(c->userdata, pid, ts, ret_len) : NULL;
}

static size_t context_ksym(void *userdata, uint64_t address, char *buf, size_t size) {
        DecodeContext *c = userdata;

        return c->ksym ? c->ksym(c->userdata, address, buf, size) : 0;
}

int decode_context_decoder(DecodeContext *c, struct tep_handle *tep, Decoder **ret) {
        DecoderCallbacks callbacks = {
                .comm = context_comm,
                .missed = context_missed,
                .cgroup = context_cgroup,
                .ksym = context_ksym,
                .userdata = c,
        };

        return decoder_new(tep, &callbacks, ret);
}

/* Counts the records of a page that a failed decode left out, by walking its entry headers. */
static uint64_t page_records_left(const void *page, size_t size, const Batch *b, size_t from) {
        uint64_t total = page_records(page, size), got = 0;

        for (size_t i = from; i < b->n_records; i++)
                if (b->records[i].kind == RECORD_EVENT)
                        got++;
                else if (b->records[i].kind == TPD_LOST_UNKNOWN)
                        got += b->records[i].lost;
        return total > got ? total - got : 0;
}

int decode_pages(Decoder *d, DecodeContext *c, unsigned cpu, const void *pages, size_t n_pages,
                 size_t page_size, uint64_t *pending, Batch *b) {
        int error = 0;

        /* Records a failed decode left out before: their lost record comes first. */
        if (*pending > 0 && batch_add_lost(b, 0, cpu, *pending, TPD_LOST_DECODE) >= 0)
                *pending = 0;

        for (size_t i = 0; i < n_pages; i++) {
                const uint8_t *page = (const uint8_t *) pages + i * page_size;
                size_t before = b->n_records;
                uint64_t left, page_ts = 0;
                int r;

                c->have_base = false;
                r = decoder_decode_page(d, page, page_size, cpu, b);
                /* The loss a page flags is its first record: it covers the kernel's counter from
                 * the base the callback took it at, which streams started since are charged from. */
                if (c->have_base)
                        for (size_t j = before; j < b->n_records; j++)
                                if (b->records[j].kind == TPD_LOST_OVERRUN) {
                                        b->records[j].lost_base = c->base;
                                        break;
                                }
                if (r >= 0)
                        continue;
                /* What the page held and tpd could not deliver becomes a lost record: the records
                 * a walk of the page can still count, or the page itself when it cannot be walked
                 * (at least one record). */
                left = page_records_left(page, page_size, b, before);
                if (r == -EBADMSG)
                        left = MAX(left, (uint64_t) 1);
                else if (error == 0)
                        error = r;
                if (page_size >= 8)
                        memcpy(&page_ts, page, 8);
                if (left > 0 && batch_add_lost(b, page_ts, cpu, left, TPD_LOST_DECODE) < 0)
                        *pending += left;
        }
        return error;
}

/* Jobs kept for reuse per worker, with their buffers: enough for the loop to hand over a batch
 * of pages while the worker decodes the last. */
#define WORKERS_SPARE_JOBS 2U

typedef struct Job Job;
struct Job {
        Job *next;
        unsigned cpu, worker;
        uint64_t lost; /* records lost before these pages, to report first */
        /* Instead of pages: the kernel's losses on cpu, reported at ts (workers_submit_losses()). */
        bool losses;
        uint64_t ts;
        uint8_t variant;
        size_t n_pages, page_size;
        uint8_t *pages;
        size_t capacity;
        Batch *batch;
        int error;
        /* A format to parse instead (system, text): queued to every worker in order with pages. */
        char *system, *text;
        size_t text_size;
};

typedef struct Worker {
        _Alignas(64) pthread_t thread;
        Workers *pool;
        bool started;
        struct tep_handle *tep;
        CommCache *comm;
        Decoder *decoder;
        DecodeContext context;
        uint64_t *pending; /* per possible CPU; only its own are used */
        unsigned generation, clock_epoch;
        /* Under the pool's lock: */
        pthread_cond_t wake;
        Job *head, *tail;
        unsigned decoding; /* jobs of pages queued or being decoded */
        unsigned held;     /* jobs of pages submitted and not handed over yet: at most WORKERS_QUEUE_JOBS */
        DecoderStats stats;
        uint64_t busy_ns; /* CPU time decoding, since workers_take_busy_ns() */
} Worker;

struct Workers {
        pthread_mutex_t lock;
        pthread_cond_t finished; /* a job of pages was decoded */
        Worker *workers;
        unsigned n_workers, n_cpus;
        unsigned active; /* the loop's: CPU i goes to worker i % active */
        WorkersSetup setup;
        int efd;
        sd_event_source *source;
        /* Under the lock: */
        bool stopping;
        Job *done_head, *done_tail;
        Job *spare; /* jobs to reuse, with their buffers */
        unsigned n_spare;
        unsigned generation, clock_epoch;
        char *clock;
};

static Job *job_free(Job *j) {
        if (!j)
                return NULL;
        batch_unref(j->batch);
        free(j->pages);
        free(j->system);
        free(j->text);
        free(j);
        return NULL;
}

static void job_list_free(Job *j) {
        while (j) {
                Job *next = j->next;
                job_free(j);
                j = next;
        }
}

/* The worker's caches follow the loop's settings, read under the lock. */
static void worker_follow(Worker *w, unsigned generation, unsigned clock_epoch, const char *clock) {
        if (w->generation != generation) {
                w->generation = generation;
                comm_cache_next_generation(w->comm);
        }
        if (w->clock_epoch != clock_epoch) {
                w->clock_epoch = clock_epoch;
                comm_cache_set_clock(w->comm, clock);
        }
}

/* Returns the CPU time it took decoding: what DecodeWorkers=auto weighs. */
static uint64_t worker_run_job(Worker *w, Job *j) {
        uint64_t begin;

        if (j->text) {
                /* A format the loop parsed: records of the event come in later jobs. */
                if (tracing_parse_format(w->tep, j->system, j->text, j->text_size) < 0)
                        j->error = -EBADMSG;
                return 0;
        }
        if (j->losses) {
                w->pool->setup.losses(w->pool->setup.userdata, j->cpu, j->ts, j->batch);
                return 0;
        }
        begin = thread_cpu_ns();
        w->pending[j->cpu] += j->lost;
        j->error = decode_pages(w->decoder, &w->context, j->cpu, j->pages, j->n_pages, j->page_size,
                                &w->pending[j->cpu], j->batch);
        return thread_cpu_ns() - begin;
}

uint64_t thread_cpu_ns(void) {
        struct timespec ts;

        /* Never fails for the calling thread; 0 would make a difference of garbage. */
        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
                abort();
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

static void pool_push_done(Workers *p, Job *j) {
        uint64_t one = 1;

        j->next = NULL;
        if (p->done_tail)
                p->done_tail->next = j;
        else {
                p->done_head = j;
                /* The loop has nothing to take yet: wake it. A write that fails leaves the counter
                 * set (EAGAIN): it is readable anyway. */
                (void) !write(p->efd, &one, sizeof(one));
        }
        p->done_tail = j;
}

static void *worker_main(void *userdata) {
        Worker *w = userdata;
        Workers *p = w->pool;
        _cleanup_free_ char *clock = NULL;

        pthread_mutex_lock(&p->lock);
        for (;;) {
                unsigned generation, clock_epoch;
                uint64_t busy;
                Job *j;

                while (!w->head && !p->stopping)
                        pthread_cond_wait(&w->wake, &p->lock);
                j = w->head;
                if (!j)
                        break;
                w->head = j->next;
                if (!w->head)
                        w->tail = NULL;
                generation = p->generation;
                clock_epoch = p->clock_epoch;
                if (clock_epoch != w->clock_epoch) {
                        free(clock);
                        clock = p->clock ? strdup(p->clock) : NULL;
                }
                pthread_mutex_unlock(&p->lock);

                worker_follow(w, generation, clock_epoch, clock);
                busy = worker_run_job(w, j);

                pthread_mutex_lock(&p->lock);
                w->busy_ns += busy;
                if (j->text) {
                        job_free(j);
                        continue;
                }
                w->stats = *decoder_stats(w->decoder);
                w->decoding--;
                pool_push_done(p, j);
                pthread_cond_broadcast(&p->finished);
        }
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

/* Hands the decoded batches to the loop, and keeps their jobs for reuse. */
static void workers_deliver(Workers *p) {
        Job *j;

        pthread_mutex_lock(&p->lock);
        j = p->done_head;
        p->done_head = p->done_tail = NULL;
        pthread_mutex_unlock(&p->lock);

        while (j) {
                Job *next = j->next;

                p->setup.done(p->setup.userdata, j->cpu, j->batch, j->error);
                /* Streams that hold lines of the batch keep it; the job gets a new one. */
                if (j->batch && j->batch->refs > 1)
                        j->batch = batch_unref(j->batch);
                pthread_mutex_lock(&p->lock);
                p->workers[j->worker].held--;
                if (p->n_spare < p->n_workers * WORKERS_SPARE_JOBS) {
                        j->next = p->spare;
                        p->spare = j;
                        p->n_spare++;
                        j = NULL;
                }
                pthread_mutex_unlock(&p->lock);
                job_free(j);
                j = next;
        }
}

static int workers_on_done(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Workers *p = userdata;
        uint64_t n;

        (void) !read(fd, &n, sizeof(n));
        workers_deliver(p);
        return 0;
}

/* A spare job or a new one, with room for size bytes of pages and an empty batch. */
static Job *workers_take_job(Workers *p, size_t size) {
        Job *j;

        pthread_mutex_lock(&p->lock);
        j = p->spare;
        if (j) {
                p->spare = j->next;
                p->n_spare--;
        }
        pthread_mutex_unlock(&p->lock);
        if (!j) {
                j = calloc(1, sizeof(Job));
                if (!j)
                        return NULL;
        }
        if (j->capacity < size) {
                uint8_t *pages = realloc(j->pages, size);
                if (!pages) {
                        job_free(j);
                        return NULL;
                }
                j->pages = pages;
                j->capacity = size;
        }
        if (j->batch)
                batch_reset(j->batch);
        else if (!(j->batch = batch_new())) {
                job_free(j);
                return NULL;
        }
        j->next = NULL;
        j->error = 0;
        j->lost = 0;
        j->losses = false;
        return j;
}

static void worker_queue(Worker *w, Job *j) {
        if (w->tail)
                w->tail->next = j;
        else
                w->head = j;
        w->tail = j;
        pthread_cond_signal(&w->wake);
}

/* One step of the loop waiting for the workers, with p->lock held: it hands over the batches that
 * are done (the lock dropped meanwhile), or else sleeps until a worker finishes one. The loop never
 * sleeps while batches wait for it: their records would be held back for nothing. */
static void workers_wait_locked(Workers *p) {
        if (p->done_head) {
                pthread_mutex_unlock(&p->lock);
                workers_deliver(p);
                pthread_mutex_lock(&p->lock);
        } else
                pthread_cond_wait(&p->finished, &p->lock);
}

/* The worker of cpu, once it has room: at most WORKERS_QUEUE_JOBS of its jobs alive, decoded ones
 * included, so that what the workers hold is bounded whatever the loop does meanwhile. */
static Worker *workers_room(Workers *p, unsigned cpu) {
        Worker *w = &p->workers[cpu % p->active];

        pthread_mutex_lock(&p->lock);
        while (w->held >= WORKERS_QUEUE_JOBS)
                workers_wait_locked(p);
        pthread_mutex_unlock(&p->lock);
        return w;
}

static void workers_queue(Workers *p, Worker *w, Job *j) {
        j->worker = (unsigned) (w - p->workers);
        pthread_mutex_lock(&p->lock);
        w->held++;
        w->decoding++;
        worker_queue(w, j);
        pthread_mutex_unlock(&p->lock);
}

int workers_submit(Workers *p, unsigned cpu, const void *pages, size_t n_pages, size_t page_size,
                   uint8_t variant, uint64_t lost) {
        Worker *w;
        Job *j;

        if (p->active == 0 || cpu >= p->n_cpus || n_pages > SIZE_MAX / page_size)
                return -EINVAL;
        w = workers_room(p, cpu);
        j = workers_take_job(p, n_pages * page_size);
        if (!j)
                return -ENOMEM;
        memcpy(j->pages, pages, n_pages * page_size);
        j->cpu = cpu;
        j->n_pages = n_pages;
        j->page_size = page_size;
        j->batch->variant = variant;
        j->lost = lost;
        workers_queue(p, w, j);
        return 0;
}

int workers_submit_losses(Workers *p, unsigned cpu, uint64_t ts) {
        Worker *w;
        Job *j;

        if (p->active == 0 || cpu >= p->n_cpus)
                return -EINVAL;
        w = workers_room(p, cpu);
        j = workers_take_job(p, 0);
        if (!j)
                return -ENOMEM;
        j->cpu = cpu;
        j->n_pages = 0;
        j->losses = true;
        j->ts = ts;
        workers_queue(p, w, j);
        return 0;
}

void workers_sync(Workers *p) {
        pthread_mutex_lock(&p->lock);
        for (;;) {
                unsigned decoding = 0;

                for (unsigned i = 0; i < p->n_workers; i++)
                        decoding += p->workers[i].decoding;
                if (decoding == 0)
                        break;
                workers_wait_locked(p);
        }
        pthread_mutex_unlock(&p->lock);
        workers_deliver(p);
}

/* The tracing's format handler: every worker parses the format before its next pages. */
static void workers_on_format(void *userdata, const char *system, const char *text, size_t size) {
        Workers *p = userdata;

        for (unsigned i = 0; i < p->n_workers; i++) {
                Job *j = calloc(1, sizeof(Job));

                if (j) {
                        j->system = strdup(system);
                        j->text = malloc(size + 1);
                }
                if (!j || !j->system || !j->text) {
                        /* Its records will be lost as of an unknown event, and counted so. */
                        log_warning("Worker %u: no memory for the format of a %s event.", i, system);
                        job_free(j);
                        continue;
                }
                memcpy(j->text, text, size);
                j->text[size] = 0;
                j->text_size = size;
                pthread_mutex_lock(&p->lock);
                worker_queue(&p->workers[i], j);
                pthread_mutex_unlock(&p->lock);
        }
}

void workers_next_generation(Workers *p) {
        pthread_mutex_lock(&p->lock);
        p->generation++;
        pthread_mutex_unlock(&p->lock);
}

int workers_set_clock(Workers *p, const char *clock) {
        char *copy = clock ? strdup(clock) : NULL;

        if (clock && !copy)
                return -ENOMEM;
        pthread_mutex_lock(&p->lock);
        free(p->clock);
        p->clock = copy;
        p->clock_epoch++;
        pthread_mutex_unlock(&p->lock);
        return 0;
}

void workers_stats(Workers *p, DecoderStats *ret) {
        DecoderStats sum = {};

        pthread_mutex_lock(&p->lock);
        for (unsigned i = 0; i < p->n_workers; i++) {
                sum.records += p->workers[i].stats.records;
                sum.unknown += p->workers[i].stats.unknown;
                sum.bad_pages += p->workers[i].stats.bad_pages;
                sum.overrun += p->workers[i].stats.overrun;
        }
        pthread_mutex_unlock(&p->lock);
        *ret = sum;
}

unsigned workers_count(const Workers *p) {
        return p ? p->n_workers : 0;
}

unsigned workers_active(const Workers *p) {
        return p ? p->active : 0;
}

void workers_set_active(Workers *p, unsigned active) {
        /* A CPU changes hands only after its last batch was handed over: its order holds. */
        workers_sync(p);
        p->active = MIN(active, p->n_workers);
}

unsigned workers_wanted(unsigned active, unsigned max, uint64_t busy_ns, uint64_t interval_ns,
                        unsigned *fewer) {
        uint64_t per = interval_ns / 100 * WORKERS_BUSY_PERCENT, need;
        unsigned want;

        if (per == 0)
                return active;
        need = (busy_ns + per - 1) / per; /* threads, each busy at most WORKERS_BUSY_PERCENT */
        if (active == 0)
                want = need >= 2 ? (unsigned) MIN(need, (uint64_t) max) : 0;
        else if (busy_ns < interval_ns / 100 * WORKERS_IDLE_PERCENT)
                want = 0;
        else
                want = (unsigned) MAX(MIN(need, (uint64_t) max), (uint64_t) 1);

        if (want >= active) {
                *fewer = 0;
                return want;
        }
        if (++*fewer < WORKERS_FEWER_CHECKS)
                return active;
        *fewer = 0;
        return want;
}

uint64_t workers_take_pending(Workers *p, unsigned cpu) {
        uint64_t sum = 0;

        if (cpu >= p->n_cpus)
                return 0;
        pthread_mutex_lock(&p->lock);
        for (unsigned i = 0; i < p->n_workers; i++) {
                sum += p->workers[i].pending[cpu];
                p->workers[i].pending[cpu] = 0;
        }
        pthread_mutex_unlock(&p->lock);
        return sum;
}

uint64_t workers_take_busy_ns(Workers *p) {
        uint64_t sum = 0;

        pthread_mutex_lock(&p->lock);
        for (unsigned i = 0; i < p->n_workers; i++) {
                sum += p->workers[i].busy_ns;
                p->workers[i].busy_ns = 0;
        }
        pthread_mutex_unlock(&p->lock);
        return sum;
}

static void worker_done(Worker *w) {
        job_list_free(w->head);
        decoder_free(w->decoder);
        comm_cache_free(w->comm);
        if (w->tep)
                tep_free(w->tep);
        free(w->pending);
        pthread_cond_destroy(&w->wake);
}

Workers *workers_free(Workers *p) {
        if (!p)
                return NULL;
        tracing_set_format_handler(p->setup.tracing, NULL, NULL);
        pthread_mutex_lock(&p->lock);
        p->stopping = true;
        for (unsigned i = 0; i < p->n_workers; i++)
                pthread_cond_signal(&p->workers[i].wake);
        pthread_mutex_unlock(&p->lock);
        for (unsigned i = 0; i < p->n_workers; i++)
                if (p->workers[i].started)
                        pthread_join(p->workers[i].thread, NULL);
        for (unsigned i = 0; i < p->n_workers; i++)
                worker_done(&p->workers[i]);
        free(p->workers);
        job_list_free(p->done_head);
        job_list_free(p->spare);
        sd_event_source_disable_unref(p->source);
        safe_close(p->efd);
        free(p->clock);
        pthread_cond_destroy(&p->finished);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(Workers *, workers_free);

static int worker_setup(Workers *p, Worker *w) {
        const char *path = tracing_saved_cmdlines_path(p->setup.tracing);
        int r;

        w->pool = p;
        pthread_cond_init(&w->wake, NULL);
        w->pending = calloc(p->n_cpus, sizeof(uint64_t));
        if (!w->pending)
                return -ENOMEM;
        r = tracing_tep_copy(p->setup.tracing, &w->tep);
        if (r < 0)
                return r;
        r = comm_cache_new(path, &w->comm);
        if (r < 0)
                return r;
        comm_cache_set_clock(w->comm, p->setup.clock);
        w->context = (DecodeContext){
                .comm = w->comm,
                .missed = p->setup.missed,
                .userdata = p->setup.userdata,
        };
        return decode_context_decoder(&w->context, w->tep, &w->decoder);
}

int workers_new(sd_event *event, const WorkersSetup *setup, Workers **ret) {
        _cleanup_(workers_freep) Workers *p = NULL;
        sigset_t all, old;
        int r;

        if (setup->n_workers == 0 || setup->n_cpus == 0)
                return -EINVAL;
        p = calloc(1, sizeof(Workers));
        if (!p)
                return -ENOMEM;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->finished, NULL);
        p->efd = -1;
        p->setup = *setup;
        p->n_cpus = setup->n_cpus;
        /* aligned_alloc() wants a multiple of the alignment: Worker is one (its _Alignas). */
        p->workers = aligned_alloc(64, setup->n_workers * sizeof(Worker));
        if (!p->workers)
                return -ENOMEM;
        memset(p->workers, 0, setup->n_workers * sizeof(Worker));
        p->n_workers = setup->n_workers;
        p->active = setup->active;
        for (unsigned i = 0; i < p->n_workers; i++) {
                r = worker_setup(p, &p->workers[i]);
                if (r < 0)
                        return r;
        }
        p->setup.clock = NULL; /* the caller's, read by worker_setup() only */
        /* From here on, every format the loop parses reaches the workers' handles too. */
        tracing_set_format_handler(setup->tracing, workers_on_format, p);

        p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (p->efd < 0)
                return negative_errno();
        r = sd_event_add_io(event, &p->source, p->efd, EPOLLIN, workers_on_done, p);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(p->source, "decode-workers");

        /* The threads take no signal: the loop's (sd_event_add_signal()) must reach the loop. */
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        for (unsigned i = 0; i < p->n_workers && r >= 0; i++) {
                r = -pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]);
                p->workers[i].started = r >= 0;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(p);
        return 0;
}
