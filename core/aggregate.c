/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <traceevent/event-parse.h>

#include "core/aggregate.h"
#include "core/encode.h"
#include "util.h"

static const char *const kind_names[_AGGREGATE_KIND_MAX] = {
        [AGGREGATE_HIST] = "hist",
        [AGGREGATE_COUNT] = "count",
        [AGGREGATE_LATENCY] = "latency",
};

int aggregate_kind_from_string(const char *s, AggregateKind *ret) {
        for (size_t i = 0; i < _AGGREGATE_KIND_MAX; i++)
                if (s && streq(s, kind_names[i])) {
                        *ret = (AggregateKind) i;
                        return 0;
                }
        return -EINVAL;
}

const char *aggregate_kind_to_string(AggregateKind kind) {
        return kind < _AGGREGATE_KIND_MAX ? kind_names[kind] : NULL;
}

bool aggregate_check_linear(int64_t min, int64_t max, int64_t step) {
        uint64_t span;

        if (step <= 0 || min >= max)
                return false;
        span = (uint64_t) max - (uint64_t) min;
        return (span + (uint64_t) step - 1) / (uint64_t) step <= AGGREGATE_LINEAR_MAX;
}

int aggregate_init(Aggregate *a, AggregateKind kind, const int64_t *linear) {
        *a = (Aggregate){ .kind = kind };
        if (kind != AGGREGATE_COUNT && linear) {
                uint64_t span = (uint64_t) linear[1] - (uint64_t) linear[0];

                if (!aggregate_check_linear(linear[0], linear[1], linear[2]))
                        return -EINVAL;
                a->linear = true;
                a->linear_min = linear[0];
                a->linear_step = linear[2];
                /* Below min, the steps, and from their end up. */
                a->n_buckets = (span + (uint64_t) linear[2] - 1) / (uint64_t) linear[2] + 2;
        } else if (kind != AGGREGATE_COUNT)
                a->n_buckets = AGGREGATE_LOG2_BUCKETS;
        a->groups_max = a->n_buckets > 0 ? MIN(AGGREGATE_GROUPS_MAX, AGGREGATE_CELLS_MAX / a->n_buckets)
                                         : AGGREGATE_GROUPS_MAX;
        /* Twice the groups, a power of two: probes stay short. */
        a->n_slots = 2 * AGGREGATE_GROUPS_MAX;
        a->slots = calloc(a->n_slots, sizeof(uint32_t));
        return a->slots ? 0 : -ENOMEM;
}

void aggregate_done(Aggregate *a) {
        for (size_t i = 0; i < a->n_groups; i++)
                free(a->groups[i].buckets);
        free(a->groups);
        free(a->slots);
        free(a->pending);
        *a = (Aggregate){};
}

static uint64_t hash_bytes(const char *s, size_t n) {
        uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */

        for (size_t i = 0; i < n; i++)
                h = (h ^ (uint8_t) s[i]) * 0x100000001b3ULL;
        return h;
}

/* A key as it can go into JSON text: its valid UTF-8, other bytes and controls as '?', cut at a
 * character's end. Keys come from command names and fields that any local user may set. */
static size_t key_clean(const char *key, size_t length, char *out) {
        size_t i = 0, n = 0;

        while (i < length) {
                const unsigned char *s = (const unsigned char *) key + i;
                size_t k = *s < 0x20 || *s == 0x7f ? 0 : utf8_sequence_length(s, length - i);

                if (n + MAX(k, (size_t) 1) > AGGREGATE_KEY_MAX)
                        break;
                if (k == 0) {
                        out[n++] = '?';
                        i++;
                        continue;
                }
                memcpy(out + n, s, k);
                n += k;
                i += k;
        }
        out[n] = '\0';
        return n;
}

int aggregate_group(Aggregate *a, const char *raw, size_t raw_length) {
        char key[AGGREGATE_KEY_MAX + 1];
        size_t i, length = key_clean(raw, MIN(raw_length, (size_t) 4 * AGGREGATE_KEY_MAX), key);
        AggregateGroup *g;

        for (i = hash_bytes(key, length) & (a->n_slots - 1); a->slots[i]; i = (i + 1) & (a->n_slots - 1)) {
                g = &a->groups[a->slots[i] - 1];
                if (strncmp(g->key, key, length) == 0 && g->key[length] == '\0')
                        return (int) a->slots[i] - 1;
        }
        if (a->n_groups >= a->groups_max) {
                a->keys_dropped++;
                return -ENOSPC;
        }
        if (a->n_groups % 64 == 0) {
                AggregateGroup *groups = reallocarray(a->groups, a->n_groups + 64, sizeof(AggregateGroup));
                if (!groups)
                        return -ENOMEM;
                a->groups = groups;
        }
        g = &a->groups[a->n_groups];
        *g = (AggregateGroup){ .min = INT64_MAX, .max = INT64_MIN };
        if (a->n_buckets > 0) {
                g->buckets = calloc(a->n_buckets, sizeof(uint64_t));
                if (!g->buckets)
                        return -ENOMEM;
        }
        memcpy(g->key, key, length);
        g->key[length] = '\0';
        a->slots[i] = (uint32_t) ++a->n_groups;
        return (int) a->n_groups - 1;
}

size_t aggregate_bucket_of(const Aggregate *a, int64_t value) {
        if (a->linear) {
                uint64_t i;

                if (value < a->linear_min)
                        return 0;
                i = ((uint64_t) value - (uint64_t) a->linear_min) / (uint64_t) a->linear_step;
                return (size_t) MIN(i + 1, (uint64_t) a->n_buckets - 1);
        }
        if (value < 0)
                return 0;
        if (value < 2)
                return (size_t) value + 1;
        /* [2^k, 2^(k+1)) for k >= 1 */
        return (size_t) (63 - __builtin_clzll((uint64_t) value)) + 2;
}

void aggregate_bucket_bounds(const Aggregate *a, size_t i, int64_t *ret_low, int64_t *ret_high) {
        if (a->linear) {
                /* The steps' bounds fit: min + n * step covers max by less than a step. */
                *ret_low = i == 0 ? INT64_MIN : a->linear_min + (int64_t) (i - 1) * a->linear_step;
                *ret_high = i + 1 == a->n_buckets ? INT64_MAX : a->linear_min + (int64_t) i * a->linear_step;
                return;
        }
        if (i == 0) {
                *ret_low = INT64_MIN;
                *ret_high = 0;
        } else if (i < 3) {
                *ret_low = (int64_t) i - 1;
                *ret_high = (int64_t) i;
        } else {
                *ret_low = INT64_C(1) << (i - 2);
                *ret_high = i - 2 >= 62 ? INT64_MAX : INT64_C(1) << (i - 1);
        }
}

void aggregate_add(Aggregate *a, size_t group, int64_t value) {
        AggregateGroup *g = &a->groups[group];

        g->count++;
        a->records++;
        if (!g->buckets)
                return;
        if (__builtin_add_overflow(g->sum, value, &g->sum))
                g->sum = value > 0 ? INT64_MAX : INT64_MIN;
        g->min = MIN(g->min, value);
        g->max = MAX(g->max, value);
        g->buckets[aggregate_bucket_of(a, value)]++;
}

int64_t aggregate_quantile(const Aggregate *a, const AggregateGroup *g, unsigned permille) {
        uint64_t rank, seen = 0;

        if (g->count == 0 || !g->buckets)
                return 0;
        /* The sample of rank ceil(q * count), counted from 1. */
        rank = MAX((g->count * permille + 999) / 1000, UINT64_C(1));
        for (size_t i = 0; i < a->n_buckets; i++) {
                int64_t low, high;

                seen += g->buckets[i];
                if (seen < rank)
                        continue;
                aggregate_bucket_bounds(a, i, &low, &high);
                return MIN(high == INT64_MAX ? high : high - 1, g->max);
        }
        return g->max;
}

static size_t pending_probe(const Aggregate *a, uint64_t key) {
        size_t i = (size_t) ((key * 0x9e3779b97f4a7c15ULL) >> 32) & (a->pending_slots - 1);

        while (a->pending[i].used && a->pending[i].key != key)
                i = (i + 1) & (a->pending_slots - 1);
        return i;
}

/* Puts every waiting start into a table of n slots. */
static int pending_rehash(Aggregate *a, size_t n, uint64_t drop_before) {
        AggregatePending *old = a->pending;
        size_t old_n = a->pending_slots;

        a->pending = calloc(n, sizeof(AggregatePending));
        if (!a->pending) {
                a->pending = old;
                return -ENOMEM;
        }
        a->pending_slots = n;
        a->n_pending = 0;
        for (size_t i = 0; i < old_n; i++) {
                if (!old[i].used)
                        continue;
                if (old[i].ts < drop_before) {
                        a->pending_dropped++;
                        continue;
                }
                a->pending[pending_probe(a, old[i].key)] = old[i];
                a->n_pending++;
        }
        free(old);
        return 0;
}

static int cmp_u64(const void *x, const void *y) {
        uint64_t a = *(const uint64_t *) x, b = *(const uint64_t *) y;
        return a < b ? -1 : a > b;
}

/* Drops the older half of the starts: once per AGGREGATE_PENDING_MAX / 2 new ones at most, so a
 * start costs a bounded time on average, whatever keys come. */
static int pending_drop_oldest(Aggregate *a) {
        _cleanup_free_ uint64_t *ts = malloc(a->n_pending * sizeof(uint64_t));
        size_t n = 0;

        if (!ts)
                return -ENOMEM;
        for (size_t i = 0; i < a->pending_slots; i++)
                if (a->pending[i].used)
                        ts[n++] = a->pending[i].ts;
        qsort(ts, n, sizeof(uint64_t), cmp_u64);
        /* Ties at the median go too: at least half is freed. */
        return pending_rehash(a, a->pending_slots, ts[n / 2] + 1);
}

int aggregate_start(Aggregate *a, uint64_t key, uint64_t ts, size_t group) {
        size_t i;
        int r;

        if (a->n_pending >= AGGREGATE_PENDING_MAX) {
                r = pending_drop_oldest(a);
                if (r < 0)
                        return r;
        }
        /* At most half full. */
        if (2 * (a->n_pending + 1) > a->pending_slots) {
                r = pending_rehash(a, MAX(a->pending_slots * 2, (size_t) 1024), 0);
                if (r < 0)
                        return r;
        }
        i = pending_probe(a, key);
        if (!a->pending[i].used)
                a->n_pending++;
        a->pending[i] = (AggregatePending){ .key = key, .ts = ts, .group = (uint32_t) group, .used = true };
        return 0;
}

bool aggregate_end(Aggregate *a, uint64_t key, uint64_t ts) {
        AggregatePending *p;
        size_t i, j;

        if (a->n_pending == 0)
                return false;
        i = pending_probe(a, key);
        p = &a->pending[i];
        if (!p->used)
                return false;
        aggregate_add(a, p->group, ts >= p->ts ? (int64_t) MIN(ts - p->ts, (uint64_t) INT64_MAX) : 0);
        /* Backward-shift deletion: the entries after it that probed past it move up. */
        p->used = false;
        a->n_pending--;
        for (j = (i + 1) & (a->pending_slots - 1); a->pending[j].used;
             j = (j + 1) & (a->pending_slots - 1)) {
                size_t home = (size_t) ((a->pending[j].key * 0x9e3779b97f4a7c15ULL) >> 32) &
                              (a->pending_slots - 1);

                /* j's home lies cyclically in (i, j]: it stays. */
                if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
                        continue;
                a->pending[i] = a->pending[j];
                a->pending[j].used = false;
                i = j;
        }
        return true;
}

int aggregate_field(const struct tep_format_field *f, AggregateField *ret) {
        bool chars = f->type && strstr(f->type, "char");

        if (f->offset < 0 || f->size < 0 || f->offset + f->size > UINT16_MAX)
                return -EINVAL;
        *ret = (AggregateField){
                .offset = (uint16_t) f->offset,
                .size = (uint16_t) f->size,
                .is_signed = f->flags & TEP_FIELD_IS_SIGNED,
        };
        if (f->flags & TEP_FIELD_IS_DYNAMIC) {
                if (!chars || f->size != 4)
                        return -EINVAL;
                ret->loc = true;
                ret->relative = f->flags & TEP_FIELD_IS_RELATIVE;
                return 0;
        }
        if (f->flags & TEP_FIELD_IS_ARRAY) {
                if (!chars)
                        return -EINVAL;
                ret->tail = f->size == 0;
                return 0;
        }
        if (f->size != 1 && f->size != 2 && f->size != 4 && f->size != 8)
                return -EINVAL;
        ret->width = (uint8_t) f->size;
        return 0;
}

int aggregate_field_read(const AggregateField *f, const void *data, size_t size, AggregateValue *ret) {
        const uint8_t *p = data;
        size_t off = f->offset, len = f->size;

        if (off + (f->loc ? 4U : f->width ?: 0U) > size || (!f->loc && !f->tail && off + len > size))
                return -EBADMSG;
        if (f->width > 0) {
                uint64_t u = 0;

                /* The kernel's byte order, which is ours. */
                memcpy((uint8_t *) &u + (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? 8 - f->width : 0), p + off,
                       f->width);
                if (f->is_signed && f->width < 8 && (u >> (f->width * 8 - 1)) & 1)
                        u |= ~UINT64_C(0) << (f->width * 8);
                *ret = (AggregateValue){
                        .number = f->is_signed || u <= INT64_MAX ? (int64_t) u : INT64_MAX,
                };
                return 0;
        }
        if (f->loc) {
                uint32_t loc;

                memcpy(&loc, p + off, 4);
                len = loc >> 16;
                off = (loc & 0xffff) + (f->relative ? off + 4 : 0);
                if (off > size)
                        return -EBADMSG;
        } else if (f->tail)
                len = size - off;
        len = MIN(len, size - off);
        *ret = (AggregateValue){ .is_string = true,
                                 .string = (const char *) p + off,
                                 .length = strnlen((const char *) p + off, len) };
        return 0;
}

bool aggregate_string_number(const char *s, size_t length, int64_t *ret) {
        char buf[32], *end;
        size_t i = 0, n;

        while (i < length && (s[i] == ' ' || s[i] == '\t'))
                i++;
        n = MIN(length - i, sizeof(buf) - 1);
        memcpy(buf, s + i, n);
        buf[n] = '\0';
        if (n == 0 || !(buf[0] == '-' || (buf[0] >= '0' && buf[0] <= '9')))
                return false;
        errno = 0;
        /* Not base 0: a leading zero is no octal number in a line of text. */
        if (buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X'))
                *ret = strtoll(buf, &end, 16);
        else
                *ret = strtoll(buf, &end, 10);
        return end != buf && errno == 0;
}
