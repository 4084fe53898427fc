/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tep_format_field;

/*
 * Aggregations of records, as bpftrace's hist(), lhist() and count() and BCC's runqlat compute
 * them (docs/design.md §7): groups by key, each a count and, of values, their sum, least, greatest
 * and buckets; and for latencies, the start times waiting for their end. Pure code: the glue
 * (daemon/aggregating.c) reads the values from records and hands them over in time order.
 *
 * Bounded whatever the records: at most AGGREGATE_GROUPS_MAX groups (fewer with many linear
 * buckets: AGGREGATE_CELLS_MAX buckets in all), further keys counted in keys_dropped; at most
 * AGGREGATE_PENDING_MAX starts waiting, the oldest half dropped (and counted) when more come.
 */

#define AGGREGATE_GROUPS_MAX 1024U
#define AGGREGATE_CELLS_MAX (256U * 1024U)
#define AGGREGATE_PENDING_MAX 65536U
#define AGGREGATE_LINEAR_MAX 1024U
/* Bytes of a key kept: comm is 16, and a longer string field is cut. */
#define AGGREGATE_KEY_MAX 63U
/* Negative values, 0, 1, then [2^k, 2^(k+1)) for k = 1..62. */
#define AGGREGATE_LOG2_BUCKETS 65U

typedef enum AggregateKind {
        AGGREGATE_HIST,
        AGGREGATE_COUNT,
        AGGREGATE_LATENCY,
        _AGGREGATE_KIND_MAX,
} AggregateKind;

/* "hist", "count", "latency"; -EINVAL for another name. */
int aggregate_kind_from_string(const char *s, AggregateKind *ret);
const char *aggregate_kind_to_string(AggregateKind kind);

typedef struct AggregateGroup {
        char key[AGGREGATE_KEY_MAX + 1];
        uint64_t count;
        int64_t sum, min, max; /* sum saturates */
        uint64_t *buckets;     /* n_buckets; NULL for a count */
} AggregateGroup;

typedef struct AggregatePending {
        uint64_t key;
        uint64_t ts;
        uint32_t group;
        bool used;
} AggregatePending;

typedef struct Aggregate {
        AggregateKind kind;
        bool linear;
        int64_t linear_min, linear_step;
        size_t n_buckets; /* 0 for a count */
        size_t groups_max;

        AggregateGroup *groups;
        size_t n_groups;
        uint32_t *slots; /* hash of keys: group index + 1, 0 free */
        size_t n_slots;

        AggregatePending *pending; /* open addressing by key */
        size_t pending_slots, n_pending;

        uint64_t records; /* values (of a latency: samples) counted */
        uint64_t keys_dropped;
        uint64_t pending_dropped;
        uint64_t no_value;
} Aggregate;

/* linear: NULL for log2 buckets; else min, max, step, which aggregate_check_linear() passed. */
int aggregate_init(Aggregate *a, AggregateKind kind, const int64_t *linear);
void aggregate_done(Aggregate *a);

/* Whether min, max, step make linear buckets: step > 0, min < max, at most AGGREGATE_LINEAR_MAX. */
bool aggregate_check_linear(int64_t min, int64_t max, int64_t step);

/* The index of the group of key (length bytes, cut at AGGREGATE_KEY_MAX), made when new; -ENOSPC
 * when there is no room for another (counted in keys_dropped), -ENOMEM. */
int aggregate_group(Aggregate *a, const char *key, size_t length);

/* Counts a record in group; of a hist or a latency, with its value. */
void aggregate_add(Aggregate *a, size_t group, int64_t value);

/* A latency's start: key waits from ts on, for group (a later start of the same key replaces it). */
int aggregate_start(Aggregate *a, uint64_t key, uint64_t ts, size_t group);
/* A latency's end at ts: the sample from key's start, if one waits, counted in its group. Returns
 * whether one did. */
bool aggregate_end(Aggregate *a, uint64_t key, uint64_t ts);

/* Bucket i's values: [*ret_low, *ret_high). */
void aggregate_bucket_bounds(const Aggregate *a, size_t i, int64_t *ret_low, int64_t *ret_high);
size_t aggregate_bucket_of(const Aggregate *a, int64_t value);
/* The greatest value the bucket of the permille-th quantile can hold, at most the group's max. */
int64_t aggregate_quantile(const Aggregate *a, const AggregateGroup *g, unsigned permille);

/* What a field of a record gives an aggregation: an integer, or a string. */
typedef struct AggregateField {
        uint16_t offset, size;
        uint8_t width; /* of an integer; 0 for a string */
        bool is_signed;
        bool loc;      /* a __data_loc string */
        bool relative; /* __rel_loc */
        bool tail;     /* char name[]: the rest of the record */
} AggregateField;

typedef struct AggregateValue {
        bool is_string;
        int64_t number; /* an unsigned value past INT64_MAX is INT64_MAX */
        const char *string;
        size_t length;
} AggregateValue;

/* How to read f: -EINVAL for what is neither an integer nor a string of chars (arrays, structs). */
int aggregate_field(const struct tep_format_field *f, AggregateField *ret);
/* Reads the field from a record's payload of size bytes; -EBADMSG when it lies outside. A string
 * is cut at its first NUL and at the record's end. */
int aggregate_field_read(const AggregateField *f, const void *data, size_t size, AggregateValue *ret);
/* The integer a string's text starts with (after blanks; decimal or 0x hexadecimal), as a
 * trace_marker line carries one. false when it starts with none. */
bool aggregate_string_number(const char *s, size_t length, int64_t *ret);
