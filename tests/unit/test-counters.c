/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Per-event counters for GetCounters: exact sums, and bounds on memory whatever the load. */
#include <limits.h>

#include "core/counters.h"
#include "core/decode.h"
#include "core/page.h"
#include "tpd-test.h"

static const CounterEvent *event_of(const Counters *c, uint16_t id) {
        ASSERT(id < c->n_index && c->index[id] != 0);
        return &c->events[c->index[id] - 1];
}

static const CounterPid *pid_of(const CounterEvent *e, int32_t pid) {
        for (unsigned i = 0; i < e->n_pids; i++)
                if (e->pids[i].pid == pid)
                        return &e->pids[i];
        return NULL;
}

/* The processes and "other" sum to the event, always. */
static void check_sums(const Counters *c) {
        for (size_t i = 0; i < c->n_events; i++) {
                const CounterEvent *e = &c->events[i];
                uint64_t records = e->other_records, lost = e->other_lost;

                ASSERT(e->n_pids <= COUNTERS_PIDS);
                for (unsigned j = 0; j < e->n_pids; j++) {
                        records += e->pids[j].records;
                        lost += e->pids[j].lost;
                }
                ASSERT_U64_EQ(records, e->records);
                ASSERT_U64_EQ(lost, e->lost);
        }
}

static void count_record(void *userdata, uint16_t id, int32_t pid) {
        counter_run_add(userdata, id, pid, 1);
}

/* Recorded pages walked without decoding count what the decoder's golden output holds, by pid. */
static void check_recorded(const char *datadir) {
        char path[PATH_MAX], *pages, *golden;
        size_t len = 0, golden_len = 0;
        Counters *c = NULL;
        CounterRun run;
        uint64_t n = 0, lines = 0;

        snprintf(path, sizeof(path), "%s/sched_switch/cpu0.pages", datadir);
        pages = test_read_file(path, &len);
        if (!pages)
                TEST_FAIL("cannot read %s: %m", path);
        snprintf(path, sizeof(path), "%s/sched_switch/expected.ndjson", datadir);
        golden = test_read_file(path, &golden_len);
        if (!golden)
                TEST_FAIL("cannot read %s: %m", path);
        ASSERT(len % 4096 == 0);

        ASSERT_INT_EQ(counters_new(&c), 0);
        run = (CounterRun){ .counters = c };
        for (size_t i = 0; i < len / 4096; i++) {
                uint64_t k = decoder_page_walk(pages + i * 4096, 4096, count_record, &run);
                ASSERT_U64_EQ(k, page_records(pages + i * 4096, 4096));
                n += k;
        }
        counter_run_flush(&run);
        ASSERT_INT_EQ(c->n_events, 1);
        ASSERT_U64_EQ(c->events[0].records, n);
        check_sums(c);
        for (const char *l = golden; (l = strstr(l, "\"pid\":")); l++) {
                const CounterPid *p = pid_of(&c->events[0], (int32_t) strtol(l + 6, NULL, 10));
                uint64_t want = 0;

                ASSERT(p);
                for (const char *k = golden; (k = strstr(k, "\"pid\":")); k++)
                        want += strtol(k + 6, NULL, 10) == p->pid;
                ASSERT_U64_EQ(p->records, want);
                lines++;
        }
        ASSERT_U64_EQ(lines, n);
        counters_free(c);
        free(pages);
        free(golden);
}

int main(int argc, char *argv[]) {
        Counters *c = NULL;
        const CounterEvent *e;

        ASSERT(argc == 2);
        check_recorded(argv[1]);

        ASSERT_INT_EQ(counters_new(&c), 0);

        /* Runs of one pid and interleaved pids. */
        for (int i = 0; i < 1000; i++)
                counters_add(c, 305, 100, 1);
        for (int i = 0; i < 1000; i++)
                counters_add(c, 305, 100 + i % 3, 1);
        counters_add(c, 7, 5, 42); /* a run of unknown records, counted at once */
        e = event_of(c, 305);
        ASSERT_U64_EQ(e->records, 2000);
        ASSERT_U64_EQ(pid_of(e, 100)->records, 1334);
        ASSERT_U64_EQ(pid_of(e, 101)->records, 333);
        ASSERT_U64_EQ(pid_of(e, 102)->records, 333);
        ASSERT_U64_EQ(event_of(c, 7)->records, 42);
        check_sums(c);

        /* Losses go to a process in the table, else to "other"; they never take a slot. */
        counters_add_lost(c, 305, 101, 5);
        counters_add_lost(c, 305, 999, 7);
        e = event_of(c, 305);
        ASSERT_U64_EQ(e->lost, 12);
        ASSERT_U64_EQ(pid_of(e, 101)->lost, 5);
        ASSERT(!pid_of(e, 999));
        ASSERT_U64_EQ(e->other_lost, 7);
        check_sums(c);

        /* More processes than slots: the rest is "other". */
        for (int32_t pid = 1000; pid < 1000 + 100; pid++)
                counters_add(c, 305, pid, 2);
        e = event_of(c, 305);
        ASSERT_INT_EQ(e->n_pids, COUNTERS_PIDS);
        ASSERT_U64_EQ(e->records, 2200);
        ASSERT_U64_EQ(e->other_records, 2 * (100 - (COUNTERS_PIDS - 3)));
        check_sums(c);

        /* A period in which only pid 100 wrote: every other slot becomes free for new processes,
         * their counts going to "other". */
        counters_age(c);
        counters_add(c, 305, 100, 1);
        counters_age(c);
        counters_add(c, 305, 5000, 3);
        e = event_of(c, 305);
        ASSERT(pid_of(e, 5000));
        ASSERT_U64_EQ(pid_of(e, 5000)->records, 3);
        ASSERT(pid_of(e, 100)); /* busy: kept */
        ASSERT_U64_EQ(pid_of(e, 100)->records, 1335);
        check_sums(c);
        /* Busy processes keep their slots: with none idle, a newcomer is "other". */
        for (int32_t pid = 6000; pid < 6000 + 2 * (int32_t) COUNTERS_PIDS; pid++)
                counters_add(c, 305, pid, 1);
        counters_age(c);
        for (unsigned i = 0; i < e->n_pids; i++)
                counters_add(c, 305, e->pids[i].pid, 1);
        counters_age(c);
        counters_add(c, 305, 7000, 1);
        ASSERT(!pid_of(e, 7000));
        check_sums(c);

        /* Events beyond the bound are counted together. */
        for (unsigned id = 0; id < 3000; id++)
                counters_add(c, (uint16_t) (10000 + id), 1, 1);
        ASSERT_INT_EQ(c->n_events, COUNTERS_EVENTS_MAX);
        ASSERT_U64_EQ(c->other_records, 3000 - (COUNTERS_EVENTS_MAX - 2));
        counters_add_lost(c, 65535, 1, 4);
        ASSERT_U64_EQ(c->other_lost, 4);
        ASSERT(c->n_index <= 65536);
        check_sums(c);

        /* Runs: counted once per run, the same sums as one by one. */
        {
                Counters *a = NULL, *b = NULL;
                CounterRun run;

                ASSERT_INT_EQ(counters_new(&a), 0);
                ASSERT_INT_EQ(counters_new(&b), 0);
                run = (CounterRun){ .counters = a };
                for (int i = 0; i < 10000; i++) {
                        uint16_t id = (uint16_t) (i % 7 == 0 ? 3 : 4);
                        int32_t pid = i / 100;

                        counter_run_add(&run, id, pid, 1);
                        counters_add(b, id, pid, 1);
                }
                counter_run_flush(&run);
                counter_run_flush(&run); /* nothing twice */
                ASSERT_INT_EQ(a->n_events, b->n_events);
                for (size_t i = 0; i < a->n_events; i++) {
                        ASSERT_INT_EQ(a->events[i].id, b->events[i].id);
                        ASSERT_U64_EQ(a->events[i].records, b->events[i].records);
                        ASSERT_U64_EQ(a->events[i].other_records, b->events[i].other_records);
                        ASSERT_INT_EQ(a->events[i].n_pids, b->events[i].n_pids);
                        for (unsigned j = 0; j < a->events[i].n_pids; j++)
                                ASSERT_U64_EQ(a->events[i].pids[j].records, b->events[i].pids[j].records);
                }
                check_sums(a);
                counters_free(a);
                counters_free(b);
        }

        counters_free(c);
        return 0;
}
