/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "connection.h"
#include "histogram.h"
#include "output.h"
#include "util.h"

/* bpftrace's columns: labels of at least 16, counts of 8, bars of 52. */
#define HISTOGRAM_LABEL_WIDTH 16
#define HISTOGRAM_COUNT_WIDTH 8
#define HISTOGRAM_BAR_WIDTH 52
/* Empty buckets drawn between two that hold any: enough for every log2 bucket and tpd's 1024
 * linear ones, a bound against a reply of absurd bounds. */
#define HISTOGRAM_GAP_MAX 2048U

#define LABEL_MAX 80

typedef struct Bucket {
        int64_t low, high;
        uint64_t count;
} Bucket;

static size_t array_length(json_object *a) {
        return json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;
}

/* A reply's count: a negative one, which tpd never sends, as 0. */
static uint64_t reply_count(json_object *o, const char *key) {
        int64_t v = reply_int(o, key, NULL);

        return v > 0 ? (uint64_t) v : 0;
}

/* A log2 bound as bpftrace writes one: a multiple of 1024 with K, M, G, T, P or E. */
static void format_bound(char *buf, size_t size, int64_t v, bool suffix) {
        static const char units[] = "KMGTPE";
        size_t u = 0;

        while (suffix && v >= 1024 && v % 1024 == 0 && u < sizeof(units) - 1) {
                v /= 1024;
                u++;
        }
        if (u > 0)
                snprintf(buf, size, "%" PRIi64 "%c", v, units[u - 1]);
        else
                snprintf(buf, size, "%" PRIi64, v);
}

static void format_label(char *buf, size_t size, const Bucket *b, const HistogramLayout *layout) {
        char low[32], high[32];
        bool log2 = !layout->linear;

        format_bound(low, sizeof(low), b->low, log2);
        format_bound(high, sizeof(high), b->high, log2);
        if (log2 && b->low >= 0 && b->high == b->low + 1)
                snprintf(buf, size, "[%s]", low);
        else if ((log2 && b->low < 0) || (layout->linear && b->high <= layout->min))
                snprintf(buf, size, "(..., %s)", high);
        else if (layout->linear && b->low >= layout->max)
                snprintf(buf, size, "[%s, ...)", low);
        else
                snprintf(buf, size, "[%s, %s)", low, high);
}

static bool bucket_parse(json_object *o, Bucket *ret) {
        bool found_low, found_high;

        ret->low = reply_int(o, "low", &found_low);
        ret->high = reply_int(o, "high", &found_high);
        ret->count = reply_count(o, "count");
        return found_low && found_high && ret->low < ret->high;
}

/* The bucket after b in the layout, when b is one of its regular ones: false at the end of what
 * an int64_t holds. */
static bool bucket_next(const Bucket *b, const HistogramLayout *layout, Bucket *ret) {
        int64_t width = b->high <= 1 ? 1 : b->high;

        if (layout->linear)
                width = layout->step;
        if (width <= 0 || b->high < 0 || b->high > INT64_MAX - width)
                return false;
        *ret = (Bucket){ .low = b->high, .high = b->high + width };
        return true;
}

static void render_bucket(FILE *f, const Bucket *b, uint64_t max, int width, const HistogramLayout *layout) {
        char label[LABEL_MAX], bar[HISTOGRAM_BAR_WIDTH + 1];
        size_t n = max > 0 ? (size_t) ((double) b->count * HISTOGRAM_BAR_WIDTH / (double) max) : 0;

        format_label(label, sizeof(label), b, layout);
        memset(bar, '@', MIN(n, (size_t) HISTOGRAM_BAR_WIDTH));
        bar[MIN(n, (size_t) HISTOGRAM_BAR_WIDTH)] = 0;
        fprintf(f, "%-*s %*" PRIu64 " |%-*s|\n", width, label, HISTOGRAM_COUNT_WIDTH, b->count,
                HISTOGRAM_BAR_WIDTH, bar);
}

/* The empty buckets between prev and next, so that the bars' heights read as a shape. */
static void render_gap(FILE *f, const Bucket *prev, const Bucket *next, int width,
                       const HistogramLayout *layout) {
        Bucket b = *prev;

        for (unsigned i = 0; i < HISTOGRAM_GAP_MAX && bucket_next(&b, layout, &b) && b.high <= next->low;
             i++)
                render_bucket(f, &b, 0, width, layout);
}

static void render_quantile(FILE *f, json_object *group, const char *key, const char *unit) {
        bool found;
        int64_t v = reply_int(group, key, &found);

        if (found)
                fprintf(f, "  %s %" PRIi64 "%s", key, v, unit);
        else
                fprintf(f, "  %s -", key);
}

static void render_group(FILE *f, json_object *group, const HistogramLayout *layout, bool latency) {
        json_object *buckets = json_object_object_get(group, "buckets");
        size_t n = array_length(buckets);
        const char *key = json_object_get_string(json_object_object_get(group, "key"));
        Bucket prev = {}, b;
        bool have_prev = false;
        uint64_t max = 0;
        int width = HISTOGRAM_LABEL_WIDTH;

        if (key && *key)
                fprintf(f, "@[%s]:\n", output_escape(key));
        else
                fputs("@:\n", f);
        for (size_t i = 0; i < n; i++) {
                char label[LABEL_MAX];

                if (!bucket_parse(json_object_array_get_idx(buckets, i), &b))
                        continue;
                max = MAX(max, b.count);
                format_label(label, sizeof(label), &b, layout);
                width = MAX(width, (int) strlen(label));
        }
        for (size_t i = 0; i < n; i++) {
                if (!bucket_parse(json_object_array_get_idx(buckets, i), &b))
                        continue;
                if (have_prev && prev.high < b.low)
                        render_gap(f, &prev, &b, width, layout);
                render_bucket(f, &b, max, width, layout);
                prev = b;
                have_prev = true;
        }
        fprintf(f, "count %" PRIu64, reply_count(group, "count"));
        render_quantile(f, group, "p50", latency ? " ns" : "");
        render_quantile(f, group, "p90", latency ? " ns" : "");
        render_quantile(f, group, "p99", latency ? " ns" : "");
        render_quantile(f, group, "max", latency ? " ns" : "");
        fputs("\n\n", f);
}

typedef struct Row {
        const char *key;
        uint64_t count;
} Row;

static int row_compare(const void *a, const void *b) {
        const Row *x = a, *y = b;

        if (x->count != y->count)
                return x->count < y->count ? 1 : -1;
        return strcmp(x->key, y->key);
}

/* The groups of a count by count, the largest first; the group of no key is "(all)". */
static void render_count(FILE *f, json_object *groups) {
        size_t n = array_length(groups), m = 0;
        _cleanup_free_ Row *rows = calloc(MAX(n, (size_t) 1), sizeof(Row));
        int width = (int) strlen("KEY");

        if (!rows) {
                fputs("(out of memory)\n", f);
                return;
        }
        for (size_t i = 0; i < n; i++) {
                json_object *g = json_object_array_get_idx(groups, i);
                const char *key = json_object_get_string(json_object_object_get(g, "key"));

                rows[m++] = (Row){ key && *key ? key : "(all)", reply_count(g, "count") };
        }
        qsort(rows, m, sizeof(Row), row_compare);
        for (size_t i = 0; i < m; i++)
                width = MAX(width, (int) strlen(output_escape(rows[i].key)));
        if (output_legend)
                fprintf(f, "%-*s %12s\n", width, "KEY", "COUNT");
        for (size_t i = 0; i < m; i++)
                fprintf(f, "%-*s %12" PRIu64 "\n", width, output_escape(rows[i].key), rows[i].count);
}

/* What the snapshot may have missed, on one line; nothing when it missed nothing. */
static void render_losses(FILE *f, json_object *snapshot) {
        static const struct {
                const char *key, *before, *after;
        } losses[] = {
                { "lost", "lost ", " records" },
                { "keys_dropped", "", " keys dropped" },
                { "pending_dropped", "", " unmatched records dropped" },
                { "no_value", "", " records without a value" },
        };
        const char *sep = "";

        for (size_t i = 0; i < ELEMENTSOF(losses); i++) {
                uint64_t v = reply_count(snapshot, losses[i].key);

                if (v == 0)
                        continue;
                fprintf(f, "%s%s%" PRIu64 "%s", sep, losses[i].before, v, losses[i].after);
                sep = "; ";
        }
        if (*sep)
                fputc('\n', f);
}

void histogram_render(FILE *f, json_object *snapshot, const HistogramLayout *layout) {
        json_object *groups = json_object_object_get(snapshot, "groups");
        const char *kind = json_object_get_string(json_object_object_get(snapshot, "kind"));
        size_t n = array_length(groups);

        if (kind && streq(kind, "count"))
                render_count(f, groups);
        else
                for (size_t i = 0; i < n; i++)
                        render_group(f, json_object_array_get_idx(groups, i), layout,
                                     kind && streq(kind, "latency"));
        render_losses(f, snapshot);
}
