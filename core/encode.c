/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdlib.h>
#include <string.h>

#include "core/encode.h"
#include "util.h"

int jsonbuf_reserve(JsonBuf *b, size_t n) {
        size_t want, cap;
        char *p;

        if (_likely_(b->cap - b->len >= n))
                return 0;

        want = b->len + n;
        cap = MAX(b->cap * 2, (size_t) 4096);
        while (cap < want)
                cap *= 2;
        p = realloc(b->data, cap);
        if (!p)
                return -ENOMEM;
        b->data = p;
        b->cap = cap;
        return 0;
}

void jsonbuf_done(JsonBuf *b) {
        free(b->data);
        *b = (JsonBuf){};
}

static const char digit_pairs[201] = "00010203040506070809"
                                     "10111213141516171819"
                                     "20212223242526272829"
                                     "30313233343536373839"
                                     "40414243444546474849"
                                     "50515253545556575859"
                                     "60616263646566676869"
                                     "70717273747576777879"
                                     "80818283848586878889"
                                     "90919293949596979899";

static inline unsigned count_digits(uint64_t v) {
        unsigned n = 1;

        for (;;) {
                if (v < 10)
                        return n;
                if (v < 100)
                        return n + 1;
                if (v < 1000)
                        return n + 2;
                if (v < 10000)
                        return n + 3;
                v /= 10000;
                n += 4;
        }
}

void json_put_u64(JsonBuf *b, uint64_t v) {
        unsigned n = count_digits(v);
        char *p = b->data + b->len + n;

        /* Straight into the reserved room, two digits per division: this runs for every integer
         * of every record. */
        b->len += n;
        while (v >= 100) {
                unsigned i = (unsigned) (v % 100) * 2;
                v /= 100;
                *--p = digit_pairs[i + 1];
                *--p = digit_pairs[i];
        }
        if (v >= 10) {
                unsigned i = (unsigned) v * 2;
                *--p = digit_pairs[i + 1];
                *--p = digit_pairs[i];
        } else
                *--p = (char) ('0' + v);
}

void json_put_i64(JsonBuf *b, int64_t v) {
        if (v < 0) {
                jsonbuf_putc(b, '-');
                /* Negate in unsigned arithmetic: -INT64_MIN overflows int64_t. */
                json_put_u64(b, -(uint64_t) v);
        } else
                json_put_u64(b, (uint64_t) v);
}

void json_put_hex(JsonBuf *b, uint64_t v) {
        static const char hex[] = "0123456789abcdef";
        char tmp[16];
        int n = 0;

        do {
                tmp[15 - n++] = hex[v & 0xf];
                v >>= 4;
        } while (v);

        jsonbuf_put(b, "\"0x", 3);
        jsonbuf_put(b, tmp + 16 - n, (size_t) n);
        jsonbuf_putc(b, '"');
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 when it is not valid. Rejects
 * overlong forms, surrogates and code points above U+10FFFF, as RFC 3629 requires. */
size_t utf8_sequence_length(const unsigned char *s, size_t n) {
        unsigned char c = s[0];

        if (c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf)
                return n >= 2 && (s[1] & 0xc0) == 0x80 ? 2 : 0;
        if (c >= 0xe0 && c <= 0xef) {
                if (n < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80)
                        return 0;
                if (c == 0xe0 && s[1] < 0xa0) /* overlong */
                        return 0;
                if (c == 0xed && s[1] >= 0xa0) /* surrogates */
                        return 0;
                return 3;
        }
        if (c >= 0xf0 && c <= 0xf4) {
                if (n < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80)
                        return 0;
                if (c == 0xf0 && s[1] < 0x90) /* overlong */
                        return 0;
                if (c == 0xf4 && s[1] >= 0x90) /* above U+10FFFF */
                        return 0;
                return 4;
        }
        return 0;
}

void json_put_string(JsonBuf *b, const char *s, size_t n) {
        static const char hex[] = "0123456789abcdef";
        const unsigned char *p = (const unsigned char *) s;
        size_t i = 0, plain = 0;

        jsonbuf_putc(b, '"');
        while (i < n && p[i]) {
                unsigned char c = p[i];
                size_t k;

                if (_likely_(c >= 0x20 && c < 0x80 && c != '"' && c != '\\')) {
                        i++;
                        continue;
                }

                /* Flush the run of plain ASCII before this byte in one copy. */
                jsonbuf_put(b, p + plain, i - plain);

                if (c >= 0x80) {
                        k = utf8_sequence_length(p + i, n - i);
                        if (k == 0) {
                                jsonbuf_put(b, "\xef\xbf\xbd", 3); /* U+FFFD */
                                k = 1;
                        } else
                                jsonbuf_put(b, p + i, k);
                        i += k;
                } else {
                        jsonbuf_putc(b, '\\');
                        switch (c) {
                        case '"':
                        case '\\':
                                jsonbuf_putc(b, (char) c);
                                break;
                        case '\n':
                                jsonbuf_putc(b, 'n');
                                break;
                        case '\t':
                                jsonbuf_putc(b, 't');
                                break;
                        case '\r':
                                jsonbuf_putc(b, 'r');
                                break;
                        default:
                                jsonbuf_put(b, "u00", 3);
                                jsonbuf_putc(b, hex[c >> 4]);
                                jsonbuf_putc(b, hex[c & 0xf]);
                        }
                        i++;
                }
                plain = i;
        }
        jsonbuf_put(b, p + plain, i - plain);
        jsonbuf_putc(b, '"');
}

int json_append_string(JsonBuf *b, const char *s, size_t n) {
        int r = jsonbuf_reserve(b, JSON_STRING_MAX_LEN(n));
        if (r < 0)
                return r;
        json_put_string(b, s, n);
        return 0;
}

Batch *batch_new(void) {
        Batch *b = calloc(1, sizeof(Batch));
        if (!b)
                return NULL;
        b->refs = 1;
        return b;
}

Batch *batch_ref(Batch *b) {
        if (b)
                b->refs++;
        return b;
}

Batch *batch_unref(Batch *b) {
        if (!b || --b->refs > 0)
                return NULL;
        jsonbuf_done(&b->buf);
        free(b->records);
        free(b);
        return NULL;
}

void batch_reset(Batch *b) {
        b->buf.len = 0;
        b->n_records = 0;
        b->n_ids = 0;
        b->many_ids = false;
        b->n_lost = 0;
        b->plain_end = 0;
        b->variant = 0;
        b->lead_stack = NULL;
        b->lead_stack_size = 0;
}

Record *batch_add_record(Batch *b) {
        if (b->n_records == b->cap_records) {
                size_t cap = MAX(b->cap_records * 2, (size_t) 256);
                Record *r = reallocarray(b->records, cap, sizeof(Record));
                if (!r)
                        return NULL;
                b->records = r;
                b->cap_records = cap;
        }
        return memset(&b->records[b->n_records++], 0, sizeof(Record));
}

size_t batch_memory(const Batch *b) {
        return sizeof(Batch) + b->buf.len;
}

void batch_trim(Batch *b) {
        char *data;

        b->records = mfree(b->records);
        b->n_records = b->cap_records = 0;
        if (b->buf.cap <= b->buf.len)
                return;
        /* Shrinking in place or by mremap(): no copy. On failure the batch keeps its room. */
        data = realloc(b->buf.data, MAX(b->buf.len, (size_t) 1));
        if (!data)
                return;
        b->buf.data = data;
        b->buf.cap = b->buf.len;
}

int batch_add_lost(Batch *b, uint64_t ts, unsigned cpu, uint64_t count, int kind) {
        const char *cause;
        size_t start = b->buf.len;
        Record *rec;
        int r;

        cause = tpd_lost_cause_name(kind);
        if (!cause)
                return -EINVAL;

        r = jsonbuf_reserve(&b->buf, 64 + 3 * JSON_U64_MAX_LEN);
        if (r < 0)
                return r;
        rec = batch_add_record(b);
        if (!rec)
                return -ENOMEM;

        jsonbuf_put(&b->buf, "{\"ts\":", 6);
        json_put_u64(&b->buf, ts);
        jsonbuf_put(&b->buf, ",\"cpu\":", 7);
        json_put_u64(&b->buf, cpu);
        jsonbuf_put(&b->buf, ",\"lost\":", 8);
        json_put_u64(&b->buf, count);
        jsonbuf_put(&b->buf, ",\"cause\":\"", 10);
        jsonbuf_put(&b->buf, cause, strlen(cause));
        jsonbuf_put(&b->buf, "\"}\n", 3);

        rec->ts = ts;
        rec->cpu = cpu;
        rec->kind = (uint8_t) kind;
        rec->lost = count;
        rec->pid = -1;
        rec->offset = (uint32_t) start;
        rec->length = (uint32_t) (b->buf.len - start);
        b->n_lost++;
        return 0;
}
