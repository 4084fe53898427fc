/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <traceevent/event-parse.h>
#include <traceevent/trace-seq.h>

#include "core/decode.h"
#include "core/page.h"
#include "tpd-protocol.h"
#include "util.h"

typedef enum FieldKind {
        FIELD_UNSIGNED,
        FIELD_SIGNED,
        FIELD_POINTER,
        FIELD_STRING,      /* char name[N] */
        FIELD_STRING_LOC,  /* __data_loc char[] name, or __rel_loc */
        FIELD_STRING_TAIL, /* char name[]: the rest of the record */
        FIELD_ARRAY,       /* other fixed arrays, elements as integers */
        FIELD_ARRAY_LOC,   /* __data_loc of other element types */
        FIELD_ARRAY_TAIL,
} FieldKind;

typedef struct FieldPlan {
        uint32_t key; /* offset of `,"name":` in the plan's key text */
        uint16_t key_len;
        uint16_t offset;
        uint16_t size; /* of the field, or of the location word for *_LOC */
        uint8_t kind;
        uint8_t elem_size; /* integer width: the field's, or its elements' for arrays */
        bool is_signed;
        bool relative; /* __rel_loc: offsets count from the end of the field */
} FieldPlan;

typedef struct SymField SymField;

typedef struct EventPlan {
        struct tep_event *event;
        SymField *sym; /* the fields with a readable form, compiled on first use */
        uint16_t n_sym;
        bool sym_compiled;
        size_t sym_max;    /* worst-case bytes of the "sym" object */
        size_t sym_end;    /* a record shorter than this gets an empty "sym" */
        char *name;        /* "system:event" */
        char *keys;        /* `,"event":"s:e","pid":` then each field's key */
        uint32_t head_len; /* length of the `,"event"…"pid":` part */
        uint16_t pid_offset;
        uint16_t n_fields;
        size_t max_fixed; /* worst-case bytes of everything but dynamic strings and arrays */
        FieldPlan fields[];
} EventPlan;

struct Decoder {
        struct tep_handle *tep;
        DecoderCallbacks cb;
        EventPlan **plans; /* by event id */
        size_t n_plans;
        struct trace_seq seq;
        DecoderStats stats;
        uint8_t *scratch; /* see decoder_padded_raw() */
        size_t scratch_used;
};

/* A record holds 16-bit __data_loc offsets and lengths, and fields end within
 * DECODER_FIELD_END_MAX bytes: nothing libtraceevent reads lies further than this from its start
 * (a __rel_loc offset counts from its field's end, at most a page's size from it). */
#define SCRATCH_SIZE (DECODER_PADDED_MAX + DECODER_FIELD_END_MAX + 16)

static void sym_fields_free(SymField *f, size_t n);

static EventPlan *event_plan_free(EventPlan *p) {
        if (!p)
                return NULL;
        sym_fields_free(p->sym, p->n_sym);
        free(p->name);
        free(p->keys);
        free(p);
        return NULL;
}

int decoder_new(struct tep_handle *tep, const DecoderCallbacks *callbacks, Decoder **ret) {
        Decoder *d;

        d = calloc(1, sizeof(Decoder));
        if (!d)
                return -ENOMEM;

        d->scratch = calloc(1, SCRATCH_SIZE);
        if (!d->scratch) {
                free(d);
                return -ENOMEM;
        }
        d->tep = tep;
        if (callbacks)
                d->cb = *callbacks;
        trace_seq_init(&d->seq);
        *ret = d;
        return 0;
}

void decoder_reset_plans(Decoder *d) {
        for (size_t i = 0; i < d->n_plans; i++)
                d->plans[i] = event_plan_free(d->plans[i]);
}

Decoder *decoder_free(Decoder *d) {
        if (!d)
                return NULL;
        decoder_reset_plans(d);
        free(d->plans);
        trace_seq_destroy(&d->seq);
        free(d->scratch);
        free(d);
        return NULL;
}

const DecoderStats *decoder_stats(const Decoder *d) {
        return &d->stats;
}

/* The element type of a field's type text, without qualifiers and array brackets:
 * "__data_loc char[]" → "char", "const char name[16]"-style types → "char". */
static bool type_is_char(const char *type) {
        static const char *const prefixes[] = { "__data_loc ", "__rel_loc ", "const ", "signed " };
        const char *t = type;
        size_t n;

        for (bool again = true; again;) {
                again = false;
                for (size_t i = 0; i < ELEMENTSOF(prefixes); i++) {
                        size_t l = strlen(prefixes[i]);
                        if (strncmp(t, prefixes[i], l) == 0) {
                                t += l;
                                again = true;
                        }
                }
        }
        n = strcspn(t, "[ ");
        return n == 4 && strncmp(t, "char", 4) == 0;
}

/* The size of a type's elements from its name, for arrays whose format gives no element size
 * (libtraceevent leaves it 0 for "u32 vals[]"). 0 when the name says nothing. */
static unsigned type_element_size(const char *type) {
        static const struct {
                const char *name;
                unsigned size;
        } types[] = {
                { "u8", 1 },
                { "s8", 1 },
                { "__u8", 1 },
                { "__s8", 1 },
                { "u16", 2 },
                { "s16", 2 },
                { "__u16", 2 },
                { "__s16", 2 },
                { "short", 2 },
                { "u32", 4 },
                { "s32", 4 },
                { "__u32", 4 },
                { "__s32", 4 },
                { "int", 4 },
                { "u64", 8 },
                { "s64", 8 },
                { "__u64", 8 },
                { "__s64", 8 },
                { "long", sizeof(long) },
                { "pid_t", 4 },
                { "unsigned", 4 },
                { "unsigned int", 4 },
        };
        const char *t = type;
        size_t n;

        if (strncmp(t, "__data_loc ", 11) == 0)
                t += 11;
        else if (strncmp(t, "__rel_loc ", 10) == 0)
                t += 10;
        if (strncmp(t, "const ", 6) == 0)
                t += 6;
        n = strcspn(t, "[");
        while (n > 0 && t[n - 1] == ' ')
                n--;
        /* "unsigned long foo" and the like: the name is the last word. */
        for (size_t i = 0; i < ELEMENTSOF(types); i++)
                if (strlen(types[i].name) == n && strncmp(t, types[i].name, n) == 0)
                        return types[i].size;
        if (n > 9 && strncmp(t, "unsigned ", 9) == 0)
                return type_element_size(t + 9);
        if (n > 7 && strncmp(t, "signed ", 7) == 0)
                return type_element_size(t + 7);
        return 0;
}

static int plan_field(const struct tep_format_field *f, FieldPlan *fp) {
        bool is_char = type_is_char(f->type);

        *fp = (FieldPlan){
                .offset = (uint16_t) f->offset,
                .size = (uint16_t) f->size,
                .is_signed = f->flags & TEP_FIELD_IS_SIGNED,
                .relative = f->flags & TEP_FIELD_IS_RELATIVE,
        };

        if (f->flags & TEP_FIELD_IS_DYNAMIC) {
                fp->kind = is_char ? FIELD_STRING_LOC : FIELD_ARRAY_LOC;
                fp->elem_size = (uint8_t) (f->elementsize ?: type_element_size(f->type) ?: 1);
                /* The kernel does not say whether the elements are signed; the field's "signed"
                 * describes the location word. Take unsigned unless the type says "s". */
                fp->is_signed = false;
        } else if (f->flags & TEP_FIELD_IS_ARRAY) {
                fp->elem_size = (uint8_t) (f->elementsize ?: type_element_size(f->type) ?: 1);
                if (f->size == 0)
                        fp->kind = is_char ? FIELD_STRING_TAIL : FIELD_ARRAY_TAIL;
                else
                        fp->kind = is_char ? FIELD_STRING : FIELD_ARRAY;
        } else if (f->flags & TEP_FIELD_IS_POINTER) {
                fp->kind = FIELD_POINTER;
        } else if (f->size == 1 || f->size == 2 || f->size == 4 || f->size == 8) {
                fp->kind = fp->is_signed ? FIELD_SIGNED : FIELD_UNSIGNED;
                fp->elem_size = (uint8_t) f->size;
        } else {
                /* An odd-sized scalar (a struct or a 128-bit value): its bytes, as an array. */
                fp->kind = FIELD_ARRAY;
                fp->elem_size = 1;
                fp->is_signed = false;
        }

        if (fp->elem_size != 1 && fp->elem_size != 2 && fp->elem_size != 4 && fp->elem_size != 8)
                fp->elem_size = 1;
        if (fp->kind == FIELD_POINTER && fp->size != 4 && fp->size != 8)
                return -EINVAL;
        return 0;
}

/* A field of a format tpd reads by its offset and size: inside the first DECODER_FIELD_END_MAX bytes
 * of a record, with a name of a C identifier's length. */
static bool field_is_sane(const struct tep_format_field *f) {
        return f->offset >= 0 && f->size >= 0 &&
               (size_t) f->offset + (size_t) f->size <= DECODER_FIELD_END_MAX && f->name &&
               strlen(f->name) <= DECODER_NAME_MAX;
}

int decoder_check_event(const struct tep_event *event, const char **ret_field) {
        const struct tep_format_field *f;
        int n;

        *ret_field = NULL;
        if (!event->system || !event->name ||
            strlen(event->system) + 1 + strlen(event->name) > TPD_EVENT_NAME_MAX)
                return -EBADMSG;
        n = 0;
        for (f = event->format.common_fields; f; f = f->next, n++) {
                *ret_field = f->name;
                if (!field_is_sane(f))
                        return -EBADMSG;
                /* Every record starts with its event id, as libtraceevent and tpd read it. */
                if (f->name && streq(f->name, "common_type") && (f->offset != 0 || f->size != 2))
                        return -EBADMSG;
                if (f->name && streq(f->name, "common_pid") && f->size != 4)
                        return -EBADMSG;
        }
        if (n != event->format.nr_common)
                return -EBADMSG;
        n = 0;
        for (f = event->format.fields; f; f = f->next, n++) {
                *ret_field = f->name;
                if (!field_is_sane(f))
                        return -EBADMSG;
        }
        if (n != event->format.nr_fields)
                return -EBADMSG;
        *ret_field = NULL;
        return 0;
}

static EventPlan *plan_compile(Decoder *d, unsigned id) {
        struct tep_event *event;
        struct tep_format_field *f, *pid;
        _cleanup_free_ char *name = NULL;
        JsonBuf keys = {};
        EventPlan *p;
        size_t i = 0;

        event = tep_find_event(d->tep, (int) id);
        /* A format from a file is not the kernel's: one that would make a read go beyond what a
         * record can hold is no format at all. */
        if (!event || decoder_check_event(event, &(const char *){ NULL }) < 0)
                return NULL;
        pid = tep_find_common_field(event, "common_pid");
        if (!pid || pid->size != 4)
                return NULL;

        if (asprintf(&name, "%s:%s", event->system, event->name) < 0)
                return NULL;

        p = calloc(1, sizeof(EventPlan) + (size_t) event->format.nr_fields * sizeof(FieldPlan));
        if (!p)
                return NULL;
        p->event = event;
        p->pid_offset = (uint16_t) pid->offset;
        p->max_fixed = 128 + 2 * JSON_U64_MAX_LEN + JSON_STRING_MAX_LEN(16);

        if (jsonbuf_reserve(&keys, 16) < 0)
                goto fail;
        jsonbuf_put(&keys, ",\"event\":", 9);
        if (json_append_string(&keys, name, strlen(name)) < 0 || jsonbuf_reserve(&keys, 8) < 0)
                goto fail;
        jsonbuf_put(&keys, ",\"pid\":", 7);
        p->head_len = (uint32_t) keys.len;
        /* The event's name goes into every record: kprobe, uprobe and user_events names can be
         * 64+64 bytes, more than the constant part above leaves. */
        p->max_fixed += p->head_len;

        for (f = event->format.fields; f; f = f->next, i++) {
                FieldPlan *fp = &p->fields[i];
                size_t start = keys.len;

                if (plan_field(f, fp) < 0)
                        goto fail;
                if (jsonbuf_reserve(&keys, 2) < 0)
                        goto fail;
                if (i > 0)
                        jsonbuf_putc(&keys, ',');
                if (json_append_string(&keys, f->name, strlen(f->name)) < 0 || jsonbuf_reserve(&keys, 1) < 0)
                        goto fail;
                jsonbuf_putc(&keys, ':');
                fp->key = (uint32_t) start;
                fp->key_len = (uint16_t) (keys.len - start);

                p->max_fixed += fp->key_len;
                switch (fp->kind) {
                case FIELD_STRING:
                        p->max_fixed += JSON_STRING_MAX_LEN(fp->size);
                        break;
                case FIELD_ARRAY:
                        p->max_fixed += 2 + (size_t) (fp->size / fp->elem_size) * (JSON_I64_MAX_LEN + 2);
                        break;
                default:
                        p->max_fixed += JSON_I64_MAX_LEN + 4;
                }
        }
        p->n_fields = (uint16_t) i;
        p->keys = keys.data;
        p->name = TAKE_PTR(name);
        return p;

fail:
        jsonbuf_done(&keys);
        free(p);
        return NULL;
}

static EventPlan *plan_get(Decoder *d, unsigned id) {
        if (_likely_(id < d->n_plans && d->plans[id]))
                return d->plans[id];

        if (id >= d->n_plans) {
                size_t n = MAX((size_t) id + 1, d->n_plans * 2);
                EventPlan **plans = reallocarray(d->plans, n, sizeof(EventPlan *));
                if (!plans)
                        return NULL;
                memset(plans + d->n_plans, 0, (n - d->n_plans) * sizeof(EventPlan *));
                d->plans = plans;
                d->n_plans = n;
        }
        return (d->plans[id] = plan_compile(d, id));
}

const char *decoder_event_name(Decoder *d, unsigned id) {
        EventPlan *p = plan_get(d, id);
        return p ? p->name : NULL;
}

static int put_array(JsonBuf *b, const uint8_t *p, size_t len, unsigned elem, bool is_signed) {
        size_t n = len / elem;
        int r;

        r = jsonbuf_reserve(b, 2 + n * (JSON_I64_MAX_LEN + 2));
        if (r < 0)
                return r;
        jsonbuf_putc(b, '[');
        for (size_t i = 0; i < n; i++) {
                if (i > 0)
                        jsonbuf_putc(b, ',');
                if (is_signed)
                        json_put_i64(b, load_signed(p + i * elem, elem));
                else
                        json_put_u64(b, load_unsigned(p + i * elem, elem));
        }
        jsonbuf_putc(b, ']');
        return 0;
}

/* Resolves a __data_loc/__rel_loc word to a byte range of the record, clamped to the record so
 * that a corrupt or hostile page can never make us read outside it. */
static void resolve_loc(const FieldPlan *fp, const uint8_t *data, size_t size, size_t *ret_off,
                        size_t *ret_len) {
        uint32_t loc = (uint32_t) load_unsigned(data + fp->offset, 4);
        size_t off = loc & 0xffff, len = loc >> 16;

        if (fp->relative)
                off += (size_t) fp->offset + fp->size;
        if (off > size)
                off = size;
        if (len > size - off)
                len = size - off;
        *ret_off = off;
        *ret_len = len;
}

static int encode_fields(JsonBuf *b, const EventPlan *p, const uint8_t *data, size_t size) {
        const FieldPlan *fp;
        int r;

        for (fp = p->fields; fp < p->fields + p->n_fields; fp++) {
                size_t off, len;

                /* A record shorter than its format (corrupt page): stop rather than read past it. */
                if ((size_t) fp->offset +
                            (fp->kind == FIELD_STRING_LOC || fp->kind == FIELD_ARRAY_LOC ? 4 : fp->size) >
                    size)
                        return -EBADMSG;

                jsonbuf_put(b, p->keys + fp->key, fp->key_len);
                switch (fp->kind) {
                case FIELD_UNSIGNED:
                        json_put_u64(b, load_unsigned(data + fp->offset, fp->elem_size));
                        break;
                case FIELD_SIGNED:
                        json_put_i64(b, load_signed(data + fp->offset, fp->elem_size));
                        break;
                case FIELD_POINTER:
                        json_put_hex(b, load_unsigned(data + fp->offset, fp->size));
                        break;
                case FIELD_STRING:
                        json_put_string(b, (const char *) data + fp->offset, fp->size);
                        break;
                case FIELD_ARRAY:
                        /* Room for fixed arrays is part of max_fixed; put_array reserves anyway. */
                        r = put_array(b, data + fp->offset, fp->size, fp->elem_size, fp->is_signed);
                        if (r < 0)
                                return r;
                        break;
                case FIELD_STRING_LOC:
                case FIELD_STRING_TAIL:
                        if (fp->kind == FIELD_STRING_LOC)
                                resolve_loc(fp, data, size, &off, &len);
                        else {
                                off = fp->offset;
                                len = size - off;
                        }
                        r = jsonbuf_reserve(b, JSON_STRING_MAX_LEN(len) + 8);
                        if (r < 0)
                                return r;
                        json_put_string(b, (const char *) data + off, len);
                        break;
                case FIELD_ARRAY_LOC:
                case FIELD_ARRAY_TAIL:
                        if (fp->kind == FIELD_ARRAY_LOC)
                                resolve_loc(fp, data, size, &off, &len);
                        else {
                                off = fp->offset;
                                len = size - off;
                        }
                        r = put_array(b, data + off, len, fp->elem_size, fp->is_signed);
                        if (r < 0)
                                return r;
                        break;
                }
                /* Dynamic parts reserved their own room; keep the rest's worst case available. */
                r = jsonbuf_reserve(b, p->max_fixed);
                if (r < 0)
                        return r;
        }
        return 0;
}

static void sym_put(EventPlan *p, JsonBuf *b, const uint8_t *data, size_t size);
static int plan_compile_sym(EventPlan *p);

static int encode_record(Decoder *d, Batch *batch, const uint8_t *data, size_t size, uint64_t ts,
                         unsigned cpu) {
        EventPlan *p;
        size_t start = batch->buf.len;
        JsonBuf *b = &batch->buf;
        const char *comm = NULL;
        Record *rec;
        uint16_t id;
        int32_t pid;
        int r;

        if (size < 8)
                return -EBADMSG;
        memcpy(&id, data, 2);
        p = plan_get(d, id);
        if (!p) {
                d->stats.unknown++;
                return 0;
        }
        if ((size_t) p->pid_offset + 4 > size)
                return -EBADMSG;
        memcpy(&pid, data + p->pid_offset, 4);

        r = jsonbuf_reserve(b, p->max_fixed);
        if (r < 0)
                return r;
        rec = batch_add_record(batch);
        if (!rec)
                return -ENOMEM;

        jsonbuf_put(b, "{\"ts\":", 6);
        json_put_u64(b, ts);
        jsonbuf_put(b, ",\"cpu\":", 7);
        json_put_u64(b, cpu);
        jsonbuf_put(b, p->keys, p->head_len);
        json_put_i64(b, pid);
        if (d->cb.comm)
                comm = d->cb.comm(d->cb.userdata, pid, ts);
        if (comm) {
                jsonbuf_put(b, ",\"comm\":", 8);
                json_put_string(b, comm, 16);
        }
        jsonbuf_put(b, ",\"fields\":{", 11);
        r = encode_fields(b, p, data, size);
        if (r >= 0 && (batch->variant & DECODER_VARIANT_SYM)) {
                /* Every stream wants "sym": it goes into the plain line, without a copy. */
                if (!p->sym_compiled) {
                        r = plan_compile_sym(p);
                        p->sym_compiled = r >= 0;
                }
                if (r >= 0)
                        r = jsonbuf_reserve(b, p->sym_max + 3);
                if (r >= 0) {
                        jsonbuf_putc(b, '}');
                        sym_put(p, b, data, size);
                        jsonbuf_put(b, "}\n", 2);
                }
        } else if (r >= 0)
                jsonbuf_put(b, "}}\n", 3);
        if (r < 0) {
                /* Drop the half-written record. */
                batch->n_records--;
                b->len = start;
                return r;
        }

        *rec = (Record){
                .ts = ts,
                .raw = data,
                .raw_size = (uint32_t) size,
                .offset = (uint32_t) start,
                .length = (uint32_t) (b->len - start),
                .pid = pid,
                .cpu = cpu,
                .event_id = id,
                .kind = RECORD_EVENT,
        };
        batch_note_event(batch, id);
        d->stats.records++;
        return 1;
}

int decoder_flush_unknown(DecoderUnknownRun *u, Batch *batch, unsigned cpu) {
        Record *rec;
        int r;

        if (u->count == 0)
                return 0;
        r = batch_add_lost(batch, u->ts, cpu, u->count, RECORD_LOST_UNKNOWN);
        if (r < 0)
                return r;
        rec = &batch->records[batch->n_records - 1];
        rec->event_id = u->id;
        rec->pid = u->pid;
        /* A stream that selects events takes the batch whole only if it selects this id too. */
        batch_note_event(batch, u->id);
        u->count = 0;
        return 0;
}

int decoder_decode_missed(Decoder *d, uint64_t ts, unsigned cpu, const uint64_t *stored, Batch *batch) {
        uint64_t count = stored ? *stored : 0;
        int r;

        if (d->cb.missed)
                count = d->cb.missed(d->cb.userdata, cpu, stored);
        if (count == 0)
                return 0;
        r = batch_add_lost(batch, ts, cpu, count, RECORD_LOST_OVERRUN);
        if (r < 0)
                return r;
        d->stats.overrun += count;
        return 1;
}

int decoder_decode_record(Decoder *d, uint64_t ts, unsigned cpu, const void *data, size_t size,
                          DecoderUnknownRun *unknown, Batch *batch) {
        int r;

        if (size >= 8) {
                uint16_t id;
                memcpy(&id, data, 2);
                if (!plan_get(d, id)) {
                        int32_t pid;
                        memcpy(&pid, (const uint8_t *) data + 4, 4); /* common_pid of every format */
                        d->stats.unknown++;
                        if (unknown->count > 0 && (unknown->id != id || unknown->pid != pid)) {
                                r = decoder_flush_unknown(unknown, batch, cpu);
                                if (r < 0)
                                        return r;
                        }
                        *unknown = (DecoderUnknownRun){ id, pid, ts, unknown->count + 1 };
                        return 0;
                }
        }
        /* Losses come before what follows them. */
        r = decoder_flush_unknown(unknown, batch, cpu);
        if (r < 0)
                return r;
        return encode_record(d, batch, data, size, ts, cpu);
}

/* A page's entries are walked by core/page.c, every length checked against the page: a corrupt
 * page ends in -EBADMSG, never in a read past it or in an endless loop (libtraceevent's kbuffer 1.7
 * has both), without kbuffer's indirect calls per record. */
int decoder_decode_page(Decoder *d, const void *page, size_t size, unsigned cpu, Batch *batch) {
        DecoderUnknownRun unknown = {};
        size_t before = batch->n_records;
        uint64_t stored;
        PageWalk w;
        PageEntry e;
        int r;

        if (page_walk_init(&w, page, size) < 0)
                goto bad;
        /* The count is stored after the data when there was room; otherwise only the flag says that
         * events were lost, and the kernel's overrun counter tells how many. */
        if (page_missed(&w, &stored)) {
                r = decoder_decode_missed(d, w.page_ts, cpu, stored == UINT64_MAX ? NULL : &stored, batch);
                if (r < 0)
                        return r;
        }
        while ((r = page_walk_next(&w, &e)) > 0) {
                r = decoder_decode_record(d, e.ts, cpu, e.payload, e.size, &unknown, batch);
                if (r == -EBADMSG)
                        goto bad;
                if (r < 0)
                        return r;
        }
        if (r < 0)
                goto bad;
        r = decoder_flush_unknown(&unknown, batch, cpu);
        if (r < 0)
                return r;
        return (int) (batch->n_records - before);

bad:
        (void) decoder_flush_unknown(&unknown, batch, cpu);
        d->stats.bad_pages++;
        return -EBADMSG;
}

const char *decoder_comm(Decoder *d, int pid, uint64_t ts) {
        return d->cb.comm ? d->cb.comm(d->cb.userdata, pid, ts) : NULL;
}

typedef struct PageWalkAdapter {
        DecoderRecordFn fn;
        void *userdata;
} PageWalkAdapter;

static void page_walk_record(void *userdata, const PageEntry *e) {
        PageWalkAdapter *a = userdata;
        uint16_t id;
        int32_t pid;

        if (e->size < 8)
                return;
        memcpy(&id, e->payload, 2);
        memcpy(&pid, e->payload + 4, 4); /* common_pid of every format */
        a->fn(a->userdata, id, pid);
}

uint64_t decoder_page_walk(const void *page, size_t size, DecoderRecordFn fn, void *userdata) {
        PageWalkAdapter a = { fn, userdata };

        return page_for_each(page, size, fn ? page_walk_record : NULL, &a);
}

void *decoder_padded_raw(Decoder *d, const Record *r) {
        size_t n = MIN((size_t) r->raw_size, (size_t) DECODER_PADDED_MAX);

        /* Only the bytes the previous record left need clearing. */
        if (d->scratch_used > n)
                memset(d->scratch + n, 0, d->scratch_used - n);
        if (n > 0) /* a record without payload may have no raw pointer at all */
                memcpy(d->scratch, r->raw, n);
        d->scratch_used = n;
        return d->scratch;
}

/*
 * Readable values ("sym", docs/design.md §3). For each argument of an event's print format that renders
 * one field through __print_flags or __print_symbolic (possibly inside a ternary: sched_switch's
 * prev_state is `(prev_state & MASK) ? __print_flags(prev_state & MASK, "|", ...) : "R"` followed
 * by `prev_state & PREEMPT ? "+" : ""`), the argument tree is compiled once into SymNodes: the
 * constant parts folded, the flag and symbol tables turned into arrays of numbers. A record then
 * costs a few loads, operations and table scans per such field, not libtraceevent's printing of
 * the whole line (which also parses each table value from text on every record). The text is what
 * the kernel prints: flags in table order joined by the delimiter, leftover bits as 0x…, an
 * unknown symbol as 0x…. A field's text is the concatenation of the text arguments that read only
 * that field ("R" and "+" make "R+"). An argument with anything else (a function, an array index,
 * a name libtraceevent itself cannot evaluate) gives its field no readable form.
 */

#define SYM_TEXT_MAX 512U

/* The build target's system call names by number (syscall-names.py makes syscall-names.c from
 * <sys/syscall.h>); NULL for unused numbers. */
extern const char *const syscall_names[];
extern const size_t syscall_names_count;
#define SYM_ARGS_MAX 16U

typedef enum SymKind {
        SYM_NUM,    /* value */
        SYM_FIELD,  /* the unsigned integer at offset, of size bytes, as libtraceevent reads it, & value */
        SYM_CAST,   /* a & value */
        SYM_UNARY,  /* op a */
        SYM_BINARY, /* a op b */
        SYM_COND,   /* a ? b : c */
        SYM_TEXT,   /* text */
        SYM_FLAGS,  /* a as flags of the table, joined by text */
        SYM_SYMBOL, /* a as one symbol of the table */
} SymKind;

typedef struct SymEntry {
        uint64_t value;
        const char *name; /* owned by the tep handle's format, which outlives the plan */
        size_t len;
} SymEntry;

typedef struct SymNode {
        uint8_t kind;
        char op[3];
        uint8_t size;
        uint16_t offset;
        uint64_t value;
        const char *text;
        size_t text_len;
        char *owned; /* text of the format between two arguments */
        struct SymNode *a, *b, *c;
        SymEntry *entries;
        size_t n_entries;
} SymNode;

#define SYM_CACHE_SLOTS 16U
#define SYM_CACHE_TEXT 62U

typedef struct SymCacheSlot {
        uint64_t value;
        uint8_t valid;
        uint8_t len;
        char text[SYM_CACHE_TEXT]; /* `"name":"text"` */
} SymCacheSlot;

typedef enum SymFieldKind {
        SYMF_PRINT,   /* through the print format's arguments */
        SYMF_SYSCALL, /* a system call number of raw_syscalls */
        SYMF_ERRNO,   /* a system call's return: a negative one is an errno */
} SymFieldKind;

struct SymField {
        uint8_t kind;
        uint8_t size;
        uint16_t offset; /* of the field (SYMF_SYSCALL, SYMF_ERRNO) */
        size_t end;      /* of the fields the arguments read, conditions' included */
        unsigned index;  /* of the field in the format: the order of "sym" */
        char *key;       /* `"name":` */
        size_t key_len;
        const struct tep_format_field *field;
        SymNode *args[SYM_ARGS_MAX];
        unsigned n_args;
        bool has_table;    /* an argument goes through __print_flags or __print_symbolic */
        unsigned last_arg; /* index of the last print argument taken */
        /* The longest text the arguments can make, and whether all of their text is printable
         * ASCII that JSON takes as it is: then it is written straight into the line. */
        size_t max_len;
        bool plain;
        /* The text depends on the field's value alone (no condition reads another field): the
         * last texts made are kept by value, so a value seen before costs a look-up and a copy. */
        bool multi;
        SymCacheSlot *cache;
};

static SymNode *sym_node_free(SymNode *n) {
        if (!n)
                return NULL;
        sym_node_free(n->a);
        sym_node_free(n->b);
        sym_node_free(n->c);
        free(n->entries);
        free(n->owned);
        free(n);
        return NULL;
}

static inline void sym_node_freep(SymNode **n) {
        sym_node_free(*n);
}

static void sym_fields_free(SymField *f, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(f[i].key);
                free(f[i].cache);
                for (unsigned k = 0; k < f[i].n_args && k < SYM_ARGS_MAX; k++)
                        sym_node_free(f[i].args[k]);
        }
        free(f);
}

/* A number as the kernel writes it into a format: 0x1f, 12, -1, 1UL. */
static bool sym_parse_number(const char *s, uint64_t *ret) {
        char *end;

        if (!s || !(isdigit((unsigned char) s[0]) || (s[0] == '-' && isdigit((unsigned char) s[1]))))
                return false;
        errno = 0;
        *ret = strtoull(s, &end, 0);
        if (errno != 0)
                return false;
        end += strspn(end, "uUlL");
        return *end == '\0';
}

static uint64_t sym_eval(const SymNode *n, const uint8_t *data) {
        uint64_t a, b;

        switch (n->kind) {
        case SYM_NUM:
                return n->value;
        case SYM_FIELD:
                return load_unsigned(data + n->offset, n->size) & n->value;
        case SYM_CAST:
                return sym_eval(n->a, data) & n->value;
        case SYM_COND:
                return sym_eval(n->a, data) ? sym_eval(n->b, data) : sym_eval(n->c, data);
        case SYM_UNARY:
                a = sym_eval(n->a, data);
                switch (n->op[0]) {
                case '!':
                        return !a;
                case '~':
                        return ~a;
                case '-':
                        return -a;
                default:
                        return a;
                }
        case SYM_BINARY:
                break;
        default:
                return 0;
        }

        a = sym_eval(n->a, data);
        b = sym_eval(n->b, data);
        /* The operators of libtraceevent's eval_num_arg(), on unsigned 64-bit values as there. */
        switch (n->op[0]) {
        case '|':
                return n->op[1] ? a || b : a | b;
        case '&':
                return n->op[1] ? a && b : a & b;
        case '^':
                return a ^ b;
        case '+':
                return a + b;
        case '-':
                return a - b;
        case '*':
                return a * b;
        case '/':
                return b ? a / b : 0;
        case '%':
                return b ? a % b : 0;
        case '=':
                return a == b;
        case '!':
                return a != b;
        case '<':
                return n->op[1] == '<' ? (b < 64 ? a << b : 0) : n->op[1] == '=' ? a <= b : a < b;
        case '>':
                return n->op[1] == '>' ? (b < 64 ? a >> b : 0) : n->op[1] == '=' ? a >= b : a > b;
        default:
                return 0;
        }
}

/* The mask of a cast to type, as libtraceevent's eval_type_str() applies it. */
static uint64_t sym_cast_mask(const char *type) {
        static const struct {
                const char *name;
                uint64_t mask;
        } casts[] = {
                { "u8", 0xff },        { "s8", 0xff },
                { "char", 0xff },      { "unsigned char", 0xff },
                { "u16", 0xffff },     { "s16", 0xffff },
                { "short", 0xffff },   { "unsigned short", 0xffff },
                { "u32", 0xffffffff }, { "s32", 0xffffffff },
                { "int", 0xffffffff }, { "unsigned int", 0xffffffff },
        };

        for (size_t i = 0; i < ELEMENTSOF(casts); i++)
                if (streq(type, casts[i].name))
                        return casts[i].mask;
        return UINT64_MAX;
}

typedef struct SymCompile {
        struct tep_event *event;
        const struct tep_format_field *field; /* the one field whose value the argument renders */
        /* Fields read only to choose (the condition of a ternary: kvm_exit's isa, ext4's found):
         * the argument's field when it renders no other. */
        const struct tep_format_field *cond_field;
        bool cond_many;
        bool in_cond;
        bool has_table;
        size_t end; /* of the fields the argument reads: a shorter record gets no "sym" */
} SymCompile;

static int sym_compile_num(SymCompile *sc, const struct tep_print_arg *arg, SymNode **ret);
static int sym_compile_text(SymCompile *sc, const struct tep_print_arg *arg, SymNode **ret);

/* A condition: its fields choose, they are not what is rendered. */
static int sym_compile_cond(SymCompile *sc, const struct tep_print_arg *arg, SymNode **ret) {
        bool was = sc->in_cond;
        int r;

        sc->in_cond = true;
        r = sym_compile_num(sc, arg, ret);
        sc->in_cond = was;
        return r;
}

static SymNode *sym_node_new(SymKind kind) {
        SymNode *n = calloc(1, sizeof(SymNode));

        if (n)
                n->kind = kind;
        return n;
}

/* Folds a node of constants into a constant, and a field masked by a constant (a cast, or
 * `field & MASK` as in sched_switch's prev_state) into the field: one load and one AND a record. */
static void sym_fold(SymNode *n) {
        SymNode *field = NULL;
        uint64_t mask = 0;

        if (n->kind == SYM_CAST && n->a->kind == SYM_FIELD) {
                field = n->a;
                mask = n->value;
                n->a = NULL;
        } else if (n->kind == SYM_BINARY && streq(n->op, "&") && n->a->kind == SYM_FIELD &&
                   n->b->kind == SYM_NUM) {
                field = n->a;
                mask = n->b->value;
                n->a = NULL;
        } else if (n->kind == SYM_BINARY && streq(n->op, "&") && n->b->kind == SYM_FIELD &&
                   n->a->kind == SYM_NUM) {
                field = n->b;
                mask = n->a->value;
                n->b = NULL;
        }
        if (field) {
                sym_node_free(n->a);
                sym_node_free(n->b);
                *n = *field;
                n->value &= mask;
                free(field);
                return;
        }
        if ((n->a && n->a->kind != SYM_NUM) || (n->b && n->b->kind != SYM_NUM) ||
            (n->c && n->c->kind != SYM_NUM))
                return;
        n->value = sym_eval(n, NULL);
        n->kind = SYM_NUM;
        n->a = sym_node_free(n->a);
        n->b = sym_node_free(n->b);
        n->c = sym_node_free(n->c);
}

/* The names that older kernels leave in their tables and libtraceevent knows (its eval_flag()):
 * other names have no number in the format, and no readable form here either. */
static int sym_known_name(const char *name, uint64_t *ret) {
        static const char *const softirqs[] = { "HI_SOFTIRQ",      "TIMER_SOFTIRQ", "NET_TX_SOFTIRQ",
                                                "NET_RX_SOFTIRQ",  "BLOCK_SOFTIRQ", "IRQ_POLL_SOFTIRQ",
                                                "TASKLET_SOFTIRQ", "SCHED_SOFTIRQ", "HRTIMER_SOFTIRQ",
                                                "RCU_SOFTIRQ" };

        for (size_t i = 0; i < ELEMENTSOF(softirqs); i++)
                if (streq(name, softirqs[i])) {
                        *ret = i;
                        return 0;
                }
        if (streq(name, "HRTIMER_NORESTART") || streq(name, "HRTIMER_RESTART")) {
                *ret = streq(name, "HRTIMER_RESTART");
                return 0;
        }
        return -ENOENT;
}

static int sym_compile_table(const struct tep_print_flag_sym *list, SymNode *n) {
        size_t k = 0;

        for (const struct tep_print_flag_sym *f = list; f; f = f->next)
                k++;
        n->entries = calloc(MAX(k, (size_t) 1), sizeof(SymEntry));
        if (!n->entries)
                return -ENOMEM;
        for (const struct tep_print_flag_sym *f = list; f; f = f->next) {
                uint64_t v;

                /* The kernel's tables end in { 0, NULL }, which libtraceevent may keep. */
                if (!f->str || !f->value || streq(f->str, "((void *)0)"))
                        continue;
                if (!sym_parse_number(f->value, &v) && sym_known_name(f->value, &v) < 0)
                        return -EOPNOTSUPP;
                n->entries[n->n_entries++] = (SymEntry){ v, f->str, strlen(f->str) };
        }
        return 0;
}

static int sym_compile_num(SymCompile *sc, const struct tep_print_arg *arg, SymNode **ret) {
        _cleanup_(sym_node_freep) SymNode *n = NULL;
        const struct tep_format_field *f;
        int r;

        if (!arg)
                return -EOPNOTSUPP;
        switch (arg->type) {
        case TEP_PRINT_ATOM:
                if (!(n = sym_node_new(SYM_NUM)))
                        return -ENOMEM;
                if (!sym_parse_number(arg->atom.atom, &n->value))
                        return -EOPNOTSUPP;
                break;
        case TEP_PRINT_FIELD:
                f = arg->field.field ?: tep_find_any_field(sc->event, arg->field.name);
                if (!f || (!sc->in_cond && sc->field && sc->field != f) ||
                    f->flags & (TEP_FIELD_IS_ARRAY | TEP_FIELD_IS_DYNAMIC | TEP_FIELD_IS_STRING) ||
                    !(f->size == 1 || f->size == 2 || f->size == 4 || f->size == 8))
                        return -EOPNOTSUPP;
                if (!sc->in_cond)
                        sc->field = f;
                else if (sc->cond_field && sc->cond_field != f)
                        sc->cond_many = true;
                else
                        sc->cond_field = f;
                if (!(n = sym_node_new(SYM_FIELD)))
                        return -ENOMEM;
                n->offset = (uint16_t) f->offset;
                n->size = (uint8_t) f->size;
                n->value = UINT64_MAX;
                sc->end = MAX(sc->end, (size_t) f->offset + (size_t) f->size);
                break;
        case TEP_PRINT_TYPE:
                if (!(n = sym_node_new(SYM_CAST)))
                        return -ENOMEM;
                n->value = sym_cast_mask(arg->typecast.type);
                r = sym_compile_num(sc, arg->typecast.item, &n->a);
                if (r < 0)
                        return r;
                sym_fold(n);
                break;
        case TEP_PRINT_OP: {
                const char *op = arg->op.op;

                if (!op || strlen(op) > 2 || streq(op, "["))
                        return -EOPNOTSUPP;
                if (streq(op, "?")) {
                        const struct tep_print_arg *alt = arg->op.right;

                        if (!alt || alt->type != TEP_PRINT_OP || !alt->op.op || !streq(alt->op.op, ":"))
                                return -EOPNOTSUPP;
                        if (!(n = sym_node_new(SYM_COND)))
                                return -ENOMEM;
                        r = sym_compile_cond(sc, arg->op.left, &n->a);
                        if (r >= 0)
                                r = sym_compile_num(sc, alt->op.left, &n->b);
                        if (r >= 0)
                                r = sym_compile_num(sc, alt->op.right, &n->c);
                        if (r < 0)
                                return r;
                } else if (!arg->op.left || arg->op.left->type == TEP_PRINT_NULL) {
                        if (!(n = sym_node_new(SYM_UNARY)))
                                return -ENOMEM;
                        r = sym_compile_num(sc, arg->op.right, &n->a);
                        if (r < 0)
                                return r;
                } else {
                        if (!strchr("|&^+-*/%=!<>", op[0]) || (op[0] == '!' && op[1] != '=') ||
                            (op[0] == '=' && op[1] != '='))
                                return -EOPNOTSUPP;
                        if (!(n = sym_node_new(SYM_BINARY)))
                                return -ENOMEM;
                        r = sym_compile_num(sc, arg->op.left, &n->a);
                        if (r >= 0)
                                r = sym_compile_num(sc, arg->op.right, &n->b);
                        if (r < 0)
                                return r;
                }
                memcpy(n->op, op, strlen(op));
                sym_fold(n);
                break;
        }
        default:
                return -EOPNOTSUPP;
        }
        *ret = TAKE_PTR(n);
        return 0;
}

static int sym_compile_text(SymCompile *sc, const struct tep_print_arg *arg, SymNode **ret) {
        _cleanup_(sym_node_freep) SymNode *n = NULL;
        int r;

        if (!arg)
                return -EOPNOTSUPP;
        switch (arg->type) {
        case TEP_PRINT_ATOM:
                if (!(n = sym_node_new(SYM_TEXT)))
                        return -ENOMEM;
                n->text = arg->atom.atom ?: "";
                n->text_len = strlen(n->text);
                break;
        case TEP_PRINT_FLAGS:
        case TEP_PRINT_SYMBOL:
                if (!(n = sym_node_new(arg->type == TEP_PRINT_FLAGS ? SYM_FLAGS : SYM_SYMBOL)))
                        return -ENOMEM;
                n->text = arg->type == TEP_PRINT_FLAGS ? arg->flags.delim : NULL;
                n->text_len = n->text ? strlen(n->text) : 0;
                r = sym_compile_num(sc, arg->type == TEP_PRINT_FLAGS ? arg->flags.field : arg->symbol.field,
                                    &n->a);
                if (r >= 0)
                        r = sym_compile_table(
                                arg->type == TEP_PRINT_FLAGS ? arg->flags.flags : arg->symbol.symbols, n);
                if (r < 0)
                        return r;
                sc->has_table = true;
                break;
        case TEP_PRINT_OP: {
                const struct tep_print_arg *alt = arg->op.right;

                if (!arg->op.op || !streq(arg->op.op, "?") || !alt || alt->type != TEP_PRINT_OP ||
                    !alt->op.op || !streq(alt->op.op, ":"))
                        return -EOPNOTSUPP;
                if (!(n = sym_node_new(SYM_COND)))
                        return -ENOMEM;
                r = sym_compile_cond(sc, arg->op.left, &n->a);
                if (r >= 0)
                        r = sym_compile_text(sc, alt->op.left, &n->b);
                if (r >= 0)
                        r = sym_compile_text(sc, alt->op.right, &n->c);
                if (r < 0)
                        return r;
                break;
        }
        default:
                return -EOPNOTSUPP;
        }
        *ret = TAKE_PTR(n);
        return 0;
}

/* Whether a print argument renders text of its own making (a flag or symbol table, or a ternary
 * choosing between texts), rather than a field's value or string. */
static bool sym_arg_is_text(const struct tep_print_arg *arg) {
        const struct tep_print_arg *alt;
        uint64_t v;

        if (!arg)
                return false;
        switch (arg->type) {
        case TEP_PRINT_FLAGS:
        case TEP_PRINT_SYMBOL:
                return true;
        case TEP_PRINT_ATOM:
                return !sym_parse_number(arg->atom.atom, &v);
        case TEP_PRINT_OP:
                alt = arg->op.right;
                if (!arg->op.op || !streq(arg->op.op, "?") || !alt || alt->type != TEP_PRINT_OP)
                        return false;
                return (sym_arg_is_text(alt->op.left) || sym_arg_is_text(alt->op.right)) &&
                       (sym_arg_is_text(alt->op.left) || alt->op.left->type == TEP_PRINT_ATOM) &&
                       (sym_arg_is_text(alt->op.right) || alt->op.right->type == TEP_PRINT_ATOM);
        default:
                return false;
        }
}

static unsigned sym_field_index(const struct tep_event *event, const struct tep_format_field *field) {
        unsigned i = 0;

        for (const struct tep_format_field *f = event->format.fields; f; f = f->next, i++)
                if (f == field)
                        return i;
        return UINT_MAX;
}

static SymField *sym_field_get(SymField *fields, size_t *n, const struct tep_event *event,
                               const struct tep_format_field *field) {
        for (size_t i = 0; i < *n; i++)
                if (fields[i].field == field)
                        return &fields[i];
        fields[*n] = (SymField){ .field = field, .index = sym_field_index(event, field) };
        return &fields[(*n)++];
}

static int sym_field_cmp(const void *a, const void *b) {
        const SymField *x = a, *y = b;

        return x->index < y->index ? -1 : x->index > y->index;
}

static bool sym_is_plain(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (s[i] < 0x20 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\')
                        return false;
        return true;
}

/* The longest text a node can make ("0x" and 16 digits for a number no name covers), and whether
 * all of it is plain (see SymField). */
static size_t sym_node_max_len(const SymNode *n, bool *plain) {
        size_t max = 0, sum = 0;

        switch (n->kind) {
        case SYM_TEXT:
                *plain = *plain && sym_is_plain(n->text, n->text_len);
                return n->text_len;
        case SYM_COND:
                return MAX(sym_node_max_len(n->b, plain), sym_node_max_len(n->c, plain));
        case SYM_FLAGS:
                *plain = *plain && sym_is_plain(n->text ?: "", n->text_len);
                for (size_t i = 0; i < n->n_entries; i++) {
                        *plain = *plain && sym_is_plain(n->entries[i].name, n->entries[i].len);
                        sum += n->entries[i].len + n->text_len;
                }
                return sum + 18 + n->text_len;
        case SYM_SYMBOL:
                for (size_t i = 0; i < n->n_entries; i++) {
                        *plain = *plain && sym_is_plain(n->entries[i].name, n->entries[i].len);
                        max = MAX(max, n->entries[i].len);
                }
                return MAX(max, (size_t) 18);
        default:
                return 0;
        }
}

/* Where each conversion of a print format is, by the argument it takes: the text between two
 * conversions is what the kernel writes between their arguments. */
typedef struct SymSpan {
        size_t start;
        size_t end;
} SymSpan;

static bool sym_format_spans(const char *fmt, SymSpan *spans, size_t n) {
        size_t k = 0;

        for (const char *p = fmt; p && *p; p++) {
                const char *start = p;

                if (*p != '%')
                        continue;
                if (p[1] == '%') {
                        p++;
                        continue;
                }
                p++;
                p += strspn(p, "-+ #0");
                for (int part = 0; part < 2; part++) {
                        /* A '*' width or precision takes an argument of its own. */
                        if (*p == '*') {
                                if (k >= n)
                                        return false;
                                spans[k++] = (SymSpan){ (size_t) (start - fmt), (size_t) (start - fmt) };
                                p++;
                        } else
                                p += strspn(p, "0123456789");
                        if (part == 0 && *p == '.')
                                p++;
                        else
                                break;
                }
                p += strspn(p, "hlLqjzt");
                if (!*p || k >= n)
                        return false;
                if (*p == 'p') /* %pS, %pI4, ...: the kernel's extensions */
                        while (isalnum((unsigned char) p[1]))
                                p++;
                spans[k++] = (SymSpan){ (size_t) (start - fmt), (size_t) (p + 1 - fmt) };
        }
        return k == n;
}

static int plan_compile_sym(EventPlan *p) {
        struct tep_event *event = p->event;
        struct tep_format_field *f;
        _cleanup_free_ SymSpan *spans = NULL;
        SymField *fields;
        size_t n = 0, max = 0, k = 0;
        bool spans_ok;
        bool raw_syscalls = streq(event->system, "raw_syscalls");
        bool sys_exit = (raw_syscalls && streq(event->name, "sys_exit")) ||
                        (streq(event->system, "syscalls") && strncmp(event->name, "sys_exit_", 9) == 0);
        int r = 0;

        for (struct tep_print_arg *a = event->print_fmt.args; a; a = a->next)
                max++;
        max += 2;
        fields = calloc(max, sizeof(SymField));
        if (!fields)
                return -ENOMEM;

        /* System call numbers and errnos: not in the print format, but what strace shows. */
        for (f = event->format.fields; f; f = f->next) {
                SymFieldKind kind;

                if (raw_syscalls && streq(f->name, "id"))
                        kind = SYMF_SYSCALL;
                else if (sys_exit && streq(f->name, "ret"))
                        kind = SYMF_ERRNO;
                else
                        continue;
                if (f->flags & (TEP_FIELD_IS_ARRAY | TEP_FIELD_IS_DYNAMIC) ||
                    !(f->size == 1 || f->size == 2 || f->size == 4 || f->size == 8))
                        continue;
                fields[n] = (SymField){ .kind = kind,
                                        .field = f,
                                        .index = sym_field_index(event, f),
                                        .offset = (uint16_t) f->offset,
                                        .size = (uint8_t) f->size };
                n++;
        }

        spans = calloc(MAX(max, (size_t) 1), sizeof(SymSpan));
        if (!spans) {
                r = -ENOMEM;
                goto fail;
        }
        spans_ok = sym_format_spans(event->print_fmt.format, spans, max - 2);

        k = 0;
        for (struct tep_print_arg *a = event->print_fmt.args; a; a = a->next, k++) {
                SymCompile sc = { .event = event };
                const struct tep_format_field *field;
                SymNode *node = NULL, *literal = NULL;
                SymField *sf;

                if (!sym_arg_is_text(a))
                        continue;
                r = sym_compile_text(&sc, a, &node);
                if (r == -ENOMEM)
                        goto fail;
                field = sc.field ?: sc.cond_many ? NULL : sc.cond_field;
                /* Text of no field, or of a common one: nothing to add to "fields". */
                if (!field || sym_field_index(event, field) == UINT_MAX) {
                        sym_node_free(node);
                        continue;
                }
                sf = sym_field_get(fields, &n, event, field);
                if (sf->kind != SYMF_PRINT || sf->n_args == UINT_MAX) {
                        sym_node_free(node);
                        continue;
                }
                /* One text is one run of conversions next to each other, with what the format
                 * writes between them ("(%s|%s)"); a later one of the same field is left out. */
                if (sf->n_args > 0 && sf->last_arg + 1 != k) {
                        sym_node_free(node);
                        continue;
                }
                if (sf->n_args > 0 && spans_ok && r >= 0) {
                        const char *lit = event->print_fmt.format + spans[k - 1].end;
                        size_t lit_len = spans[k].start - spans[k - 1].end;

                        if (lit_len > 0) {
                                literal = sym_node_new(SYM_TEXT);
                                if (!literal || !(literal->owned = strndup(lit, lit_len))) {
                                        sym_node_free(literal);
                                        sym_node_free(node);
                                        r = -ENOMEM;
                                        goto fail;
                                }
                                literal->text = literal->owned;
                                literal->text_len = lit_len;
                        }
                }
                /* An argument we cannot evaluate leaves the field without a readable form: a part
                 * of its text would be wrong. */
                if (r < 0 || sf->n_args + 2 > SYM_ARGS_MAX) {
                        sym_node_free(literal);
                        sym_node_free(node);
                        sf->n_args = UINT_MAX;
                        continue;
                }
                if (literal)
                        sf->args[sf->n_args++] = literal;
                sf->args[sf->n_args++] = node;
                sf->last_arg = k;
                sf->multi = sf->multi || sc.cond_many || (sc.cond_field && sc.cond_field != field);
                sf->has_table = sf->has_table || sc.has_table;
                sf->end = MAX(sf->end, sc.end);
        }
        r = 0;

        /* Keep the fields with a table, and those of system calls, in the format's order. */
        for (size_t i = 0; i < n; i++) {
                SymField *sf = &fields[i];
                bool keep = sf->kind != SYMF_PRINT || (sf->n_args != UINT_MAX && sf->has_table);
                JsonBuf key = {};

                if (sf->n_args == UINT_MAX)
                        sf->n_args = 0;
                if (!keep) {
                        for (unsigned j = 0; j < sf->n_args; j++)
                                sym_node_free(sf->args[j]);
                        sf->n_args = 0;
                        continue;
                }
                if (json_append_string(&key, sf->field->name, strlen(sf->field->name)) < 0 ||
                    jsonbuf_reserve(&key, 1) < 0) {
                        jsonbuf_done(&key);
                        r = -ENOMEM;
                        goto fail;
                }
                jsonbuf_putc(&key, ':');
                sf->key = key.data;
                sf->key_len = key.len;
                if (!sf->multi) {
                        sf->cache = calloc(SYM_CACHE_SLOTS, sizeof(SymCacheSlot));
                        if (!sf->cache) {
                                r = -ENOMEM;
                                goto fail;
                        }
                }
                /* System call and errno names are C identifiers. */
                sf->plain = true;
                sf->max_len = 64;
                if (sf->kind == SYMF_PRINT) {
                        sf->max_len = 0;
                        for (unsigned j = 0; j < sf->n_args; j++)
                                sf->max_len += sym_node_max_len(sf->args[j], &sf->plain);
                        if (sf->max_len > SYM_TEXT_MAX)
                                sf->plain = false;
                }
        }
        k = 0;
        for (size_t i = 0; i < n; i++)
                if (fields[i].key)
                        fields[k++] = fields[i];
        n = k;
        qsort(fields, n, sizeof(SymField), sym_field_cmp);

        p->sym_max = 16;
        p->sym_end = 0;
        for (size_t i = 0; i < n; i++) {
                p->sym_max += fields[i].key_len + 1 +
                              (fields[i].plain ? fields[i].max_len + 2 : JSON_STRING_MAX_LEN(SYM_TEXT_MAX));
                p->sym_end = MAX(p->sym_end, MAX(fields[i].end, (size_t) fields[i].field->offset +
                                                                        (size_t) fields[i].field->size));
        }
        p->sym = fields;
        p->n_sym = (uint16_t) n;
        return 0;
fail:
        sym_fields_free(fields, n);
        return r;
}

/* Where a field's text goes: straight into the line when it is plain (room for max_len made),
 * else into a buffer of SYM_TEXT_MAX bytes, cut there, and escaped afterwards. */
typedef struct SymText {
        char *buf;
        size_t len;
        size_t cap;
} SymText;

static inline void sym_text_putn(SymText *t, const char *s, size_t n) {
        n = MIN(n, t->cap - t->len);
        memcpy(t->buf + t->len, s, n);
        t->len += n;
}

static void sym_text_hex(SymText *t, uint64_t v) {
        char hex[24];

        sym_text_putn(t, hex, (size_t) snprintf(hex, sizeof(hex), "0x%" PRIx64, v));
}

/* sym_eval(), with the common case inline: a (masked) field. */
static inline uint64_t sym_value(const SymNode *n, const uint8_t *data) {
        if (n->kind == SYM_FIELD)
                return load_unsigned(data + n->offset, n->size) & n->value;
        return sym_eval(n, data);
}

static void sym_text(const SymNode *n, const uint8_t *data, SymText *t) {
        uint64_t v;
        bool first = true;

        switch (n->kind) {
        case SYM_TEXT:
                sym_text_putn(t, n->text, n->text_len);
                return;
        case SYM_COND:
                sym_text(sym_value(n->a, data) ? n->b : n->c, data, t);
                return;
        case SYM_FLAGS:
                /* The kernel's trace_print_flags_seq(): table order, until no bit is left. */
                v = sym_value(n->a, data);
                for (size_t i = 0; i < n->n_entries && v; i++) {
                        uint64_t m = n->entries[i].value;

                        if ((v & m) != m)
                                continue;
                        if (!first && n->text_len > 0)
                                sym_text_putn(t, n->text, n->text_len);
                        sym_text_putn(t, n->entries[i].name, n->entries[i].len);
                        first = false;
                        v &= ~m;
                }
                if (v) {
                        if (!first && n->text_len > 0)
                                sym_text_putn(t, n->text, n->text_len);
                        sym_text_hex(t, v);
                }
                return;
        case SYM_SYMBOL:
                /* The kernel's trace_print_symbols_seq(): the first equal value, else the number. */
                v = sym_value(n->a, data);
                for (size_t i = 0; i < n->n_entries; i++)
                        if (n->entries[i].value == v) {
                                sym_text_putn(t, n->entries[i].name, n->entries[i].len);
                                return;
                        }
                sym_text_hex(t, v);
                return;
        default:
                return;
        }
}

/* Appends `,"sym":{…}` for a record of plan p (room reserved by the caller: p->sym_max). */
static void sym_put(EventPlan *p, JsonBuf *b, const uint8_t *data, size_t size) {
        char buf[SYM_TEXT_MAX];
        bool first = true;

        jsonbuf_put(b, ",\"sym\":{", 8);
        for (size_t i = 0; size >= p->sym_end && i < p->n_sym; i++) {
                SymField *sf = &p->sym[i];
                SymCacheSlot *slot = NULL;
                size_t start = b->len, from;
                const char *name = NULL;
                uint64_t value = 0;
                SymText t;
                int64_t v;

                if (sf->cache) {
                        value = load_unsigned(data + sf->field->offset, (unsigned) sf->field->size);
                        slot = &sf->cache[(value ^ (value >> 8)) % SYM_CACHE_SLOTS];
                        if (slot->valid && slot->value == value) {
                                if (slot->len > 0) {
                                        if (!first)
                                                jsonbuf_putc(b, ',');
                                        jsonbuf_put(b, slot->text, slot->len);
                                        first = false;
                                }
                                continue;
                        }
                }

                if (!first)
                        jsonbuf_putc(b, ',');
                from = b->len;
                jsonbuf_put(b, sf->key, sf->key_len);
                if (sf->plain) {
                        jsonbuf_putc(b, '"');
                        t = (SymText){ b->data + b->len, 0, sf->max_len };
                } else
                        t = (SymText){ buf, 0, sizeof(buf) };

                switch (sf->kind) {
                case SYMF_PRINT:
                        for (unsigned k = 0; k < sf->n_args; k++)
                                sym_text(sf->args[k], data, &t);
                        break;
                case SYMF_SYSCALL:
                        v = load_signed(data + sf->offset, sf->size);
                        if (v >= 0 && (uint64_t) v < syscall_names_count)
                                name = syscall_names[v];
                        break;
                case SYMF_ERRNO:
                        /* The kernel returns -errno, from -1 to -MAX_ERRNO (4095). */
                        v = load_signed(data + sf->offset, sf->size);
                        if (v < 0 && v >= -4095)
                                name = strerrorname_np((int) -v);
                        break;
                }
                if (sf->kind != SYMF_PRINT && !name) {
                        /* No name: no key either. */
                        b->len = start;
                        from = start;
                } else {
                        if (sf->kind != SYMF_PRINT)
                                sym_text_putn(&t, name, strlen(name));
                        if (sf->plain) {
                                b->len += t.len;
                                jsonbuf_putc(b, '"');
                        } else
                                json_put_string(b, t.buf, t.len);
                        first = false;
                }
                if (slot && b->len - from <= SYM_CACHE_TEXT) {
                        memcpy(slot->text, b->data + from, b->len - from);
                        slot->len = (uint8_t) (b->len - from);
                        slot->value = value;
                        slot->valid = 1;
                }
        }
        jsonbuf_putc(b, '}');
}

int decoder_encode_variant(Decoder *d, Batch *batch, size_t index, unsigned variant) {
        Record *rec = &batch->records[index];
        EventPlan *p = NULL;
        JsonBuf *b = &batch->buf;
        size_t start, need;
        int r;

        if (rec->kind != RECORD_EVENT || (variant & ~(unsigned) batch->variant) == 0 ||
            (rec->print_length > 0 && rec->variant == variant))
                return 0;

        need = rec->length + 16;
        if ((variant & DECODER_VARIANT_SYM) && !(batch->variant & DECODER_VARIANT_SYM)) {
                p = plan_get(d, rec->event_id);
                if (p && !p->sym_compiled) {
                        r = plan_compile_sym(p);
                        if (r < 0)
                                return r;
                        p->sym_compiled = true;
                }
                need += p ? p->sym_max : 16;
        }
        if (variant & DECODER_VARIANT_PRINT) {
                struct tep_record record = {
                        .ts = rec->ts,
                        .data = decoder_padded_raw(d, rec),
                        .size = (int) MIN(rec->raw_size, DECODER_PADDED_MAX),
                        .record_size = (int) MIN(rec->raw_size, DECODER_PADDED_MAX),
                        .cpu = (int) rec->cpu,
                };

                trace_seq_reset(&d->seq);
                tep_print_event(d->tep, &d->seq, &record, "%s", TEP_PRINT_INFO);
                trace_seq_terminate(&d->seq);
                need += JSON_STRING_MAX_LEN(d->seq.len) + 16;
        }

        r = jsonbuf_reserve(b, need);
        if (r < 0)
                return r;
        rec = &batch->records[index];
        start = b->len;
        /* The plain line ends in "}\n": reuse all but those two bytes. */
        jsonbuf_put(b, b->data + rec->offset, rec->length - 2);
        if ((variant & DECODER_VARIANT_SYM) && !(batch->variant & DECODER_VARIANT_SYM)) {
                if (p)
                        sym_put(p, b, rec->raw, rec->raw_size);
                else
                        jsonbuf_put(b, ",\"sym\":{}", 9);
        }
        if (variant & DECODER_VARIANT_PRINT) {
                jsonbuf_put(b, ",\"print\":", 9);
                json_put_string(b, d->seq.buffer, d->seq.len);
        }
        jsonbuf_put(b, "}\n", 2);
        rec->print_offset = (uint32_t) start;
        rec->print_length = (uint32_t) (b->len - start);
        rec->variant = (uint8_t) variant;
        return 0;
}

int decoder_encode_print(Decoder *d, Batch *batch, size_t index) {
        return decoder_encode_variant(d, batch, index, DECODER_VARIANT_PRINT);
}
