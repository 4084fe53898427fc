/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Aggregations: buckets and their bounds, quantiles, groups and their bound, latencies matched by
 * key with the oldest starts dropped past the bound, fields read from records, and numbers read
 * from text. */
#include <string.h>

#include "core/aggregate.h"
#include "tpd-test.h"

static void test_log2(void) {
        static const struct {
                int64_t v;
                int64_t low, high;
        } cases[] = {
                { -5, INT64_MIN, 0 }, { 0, 0, 1 },
                { 1, 1, 2 },          { 2, 2, 4 },
                { 3, 2, 4 },          { 1023, 512, 1024 },
                { 1024, 1024, 2048 }, { INT64_MAX, INT64_C(1) << 62, INT64_MAX },
        };
        Aggregate a;

        ASSERT_INT_EQ(aggregate_init(&a, AGGREGATE_HIST, NULL), 0);
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                int64_t low, high;

                aggregate_bucket_bounds(&a, aggregate_bucket_of(&a, cases[i].v), &low, &high);
                ASSERT_U64_EQ((uint64_t) low, (uint64_t) cases[i].low);
                ASSERT_U64_EQ((uint64_t) high, (uint64_t) cases[i].high);
        }
        aggregate_done(&a);
}

static void test_linear_and_quantiles(void) {
        int64_t lin[3] = { 0, 100, 10 }, low, high;
        Aggregate a;
        int g;

        ASSERT(!aggregate_check_linear(0, 100, 0));
        ASSERT(!aggregate_check_linear(5, 5, 1));
        ASSERT(!aggregate_check_linear(0, 1025, 1));
        ASSERT(aggregate_check_linear(0, 1024, 1));
        ASSERT_INT_EQ(aggregate_init(&a, AGGREGATE_HIST, lin), 0);
        ASSERT_U64_EQ(a.n_buckets, 12);
        aggregate_bucket_bounds(&a, aggregate_bucket_of(&a, -1), &low, &high);
        ASSERT(low == INT64_MIN && high == 0);
        aggregate_bucket_bounds(&a, aggregate_bucket_of(&a, 15), &low, &high);
        ASSERT(low == 10 && high == 20);
        aggregate_bucket_bounds(&a, aggregate_bucket_of(&a, 100), &low, &high);
        ASSERT(low == 100 && high == INT64_MAX);

        g = aggregate_group(&a, "k", 1);
        ASSERT_INT_EQ(g, 0);
        /* 1..100: p50 is in [50, 60), p90 in [90, 100), p99 in [100, ...) capped at the max. */
        for (int64_t v = 1; v <= 100; v++)
                aggregate_add(&a, (size_t) g, v);
        ASSERT_U64_EQ(a.groups[0].count, 100);
        ASSERT_U64_EQ((uint64_t) a.groups[0].sum, 5050);
        ASSERT_U64_EQ((uint64_t) a.groups[0].min, 1);
        ASSERT_U64_EQ((uint64_t) a.groups[0].max, 100);
        ASSERT_U64_EQ((uint64_t) aggregate_quantile(&a, &a.groups[0], 500), 59);
        ASSERT_U64_EQ((uint64_t) aggregate_quantile(&a, &a.groups[0], 900), 99);
        ASSERT_U64_EQ((uint64_t) aggregate_quantile(&a, &a.groups[0], 990), 99);
        ASSERT_U64_EQ((uint64_t) aggregate_quantile(&a, &a.groups[0], 1000), 100);
        aggregate_done(&a);
}

static void test_groups(void) {
        char key[16], bad[] = { 'a', '\n', (char) 0xff, 'b' };
        Aggregate a;

        ASSERT_INT_EQ(aggregate_init(&a, AGGREGATE_COUNT, NULL), 0);
        for (unsigned i = 0; i < AGGREGATE_GROUPS_MAX; i++) {
                int n = snprintf(key, sizeof(key), "k%u", i);
                ASSERT_INT_EQ(aggregate_group(&a, key, (size_t) n), (int) i);
        }
        ASSERT_INT_EQ(aggregate_group(&a, "k7", 2), 7);
        ASSERT_INT_EQ(aggregate_group(&a, "new", 3), -ENOSPC);
        ASSERT_U64_EQ(a.keys_dropped, 1);
        aggregate_done(&a);

        /* Keys become valid JSON text: controls and invalid UTF-8 as '?'. */
        ASSERT_INT_EQ(aggregate_init(&a, AGGREGATE_COUNT, NULL), 0);
        ASSERT_INT_EQ(aggregate_group(&a, bad, sizeof(bad)), 0);
        ASSERT_STR_EQ(a.groups[0].key, "a??b");
        aggregate_done(&a);
}

static void test_latency(void) {
        Aggregate a;

        ASSERT_INT_EQ(aggregate_init(&a, AGGREGATE_LATENCY, NULL), 0);
        ASSERT_INT_EQ(aggregate_group(&a, "", 0), 0);
        ASSERT(!aggregate_end(&a, 1, 50));
        ASSERT_INT_EQ(aggregate_start(&a, 1, 100, 0), 0);
        /* A later start of the same key replaces the earlier. */
        ASSERT_INT_EQ(aggregate_start(&a, 1, 150, 0), 0);
        ASSERT_INT_EQ(aggregate_start(&a, 2, 160, 0), 0);
        ASSERT(aggregate_end(&a, 1, 250));
        ASSERT(!aggregate_end(&a, 1, 260));
        ASSERT(aggregate_end(&a, 2, 1184));
        ASSERT_U64_EQ(a.groups[0].count, 2);
        ASSERT_U64_EQ((uint64_t) a.groups[0].min, 100);
        ASSERT_U64_EQ((uint64_t) a.groups[0].max, 1024);
        ASSERT_U64_EQ(a.n_pending, 0);

        /* Past the bound, the older half goes, counted; the newest still match. */
        for (uint64_t k = 0; k <= AGGREGATE_PENDING_MAX; k++)
                ASSERT_INT_EQ(aggregate_start(&a, k + 10, 1000 + k, 0), 0);
        ASSERT_U64_EQ(a.pending_dropped, AGGREGATE_PENDING_MAX / 2 + 1);
        ASSERT_U64_EQ(a.n_pending + a.pending_dropped, AGGREGATE_PENDING_MAX + 1);
        ASSERT(!aggregate_end(&a, 10, 5000000));
        ASSERT(aggregate_end(&a, AGGREGATE_PENDING_MAX + 10, 1000 + AGGREGATE_PENDING_MAX + 7));
        ASSERT_U64_EQ((uint64_t) a.groups[0].min, 7);
        /* Every other one still waiting is found after the deletions. */
        for (uint64_t k = AGGREGATE_PENDING_MAX / 2 + 1; k < AGGREGATE_PENDING_MAX; k++)
                ASSERT(aggregate_end(&a, k + 10, 2000000));
        ASSERT_U64_EQ(a.n_pending, 0);
        aggregate_done(&a);
}

static void test_fields(void) {
        uint8_t rec[32] = {};
        AggregateField f = { .offset = 8, .width = 4, .is_signed = true },
                       s = { .offset = 16, .size = 4, .loc = true };
        AggregateValue v;
        uint32_t loc = (6u << 16) | 20u;
        int32_t n = -7;
        int64_t x;

        memcpy(rec + 8, &n, 4);
        memcpy(rec + 16, &loc, 4);
        memcpy(rec + 20, " 42abc", 6);
        ASSERT_INT_EQ(aggregate_field_read(&f, rec, sizeof(rec), &v), 0);
        ASSERT(!v.is_string && v.number == -7);
        f.is_signed = false;
        ASSERT_INT_EQ(aggregate_field_read(&f, rec, sizeof(rec), &v), 0);
        ASSERT(v.number == 0xfffffff9);
        ASSERT_INT_EQ(aggregate_field_read(&f, rec, 10, &v), -EBADMSG);
        ASSERT_INT_EQ(aggregate_field_read(&s, rec, sizeof(rec), &v), 0);
        ASSERT(v.is_string && v.length == 6);
        ASSERT(aggregate_string_number(v.string, v.length, &x) && x == 42);
        /* Cut at the record's end. */
        ASSERT_INT_EQ(aggregate_field_read(&s, rec, 22, &v), 0);
        ASSERT(v.length == 2);
        ASSERT(!aggregate_string_number("abc", 3, &x));
        ASSERT(aggregate_string_number("010", 3, &x) && x == 10);
        ASSERT(aggregate_string_number("0x10\n", 5, &x) && x == 16);
        ASSERT(aggregate_string_number("-3", 2, &x) && x == -3);
}

int main(void) {
        test_log2();
        test_linear_and_quantiles();
        test_groups();
        test_latency();
        test_fields();
        return 0;
}
