/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <traceevent/event-parse.h>
#include <traceevent/trace-seq.h>

#include "core/decode.h"
#include "core/page.h"
#include "core/symbolic.h"
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

typedef struct EventPlan {
        struct tep_event *event;
        SymbolicProgram sym; /* compiled on first use */
        char *name;          /* "system:event" */
        char *keys;          /* `,"event":"s:e","pid":` then each field's key */
        uint32_t head_len;   /* length of the `,"event"…"pid":` part */
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

static EventPlan *event_plan_free(EventPlan *p) {
        if (!p)
                return NULL;
        symbolic_done(&p->sym);
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

/* Appends ,"cgroup":… when the callback knows pid's cgroup at ts, with room for the line's end. */
static int encode_cgroup(Decoder *d, JsonBuf *b, int32_t pid, uint64_t ts) {
        size_t len = 0;
        const char *s = d->cb.cgroup ? d->cb.cgroup(d->cb.userdata, pid, ts, &len) : NULL;
        int r;

        if (!s)
                return 0;
        r = jsonbuf_reserve(b, len + 12);
        if (r < 0)
                return r;
        jsonbuf_put(b, ",\"cgroup\":", 10);
        jsonbuf_put(b, s, len);
        return 0;
}

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
                if (!p->sym.compiled)
                        r = symbolic_compile(&p->sym, p->event);
                if (r >= 0)
                        r = jsonbuf_reserve(b, p->sym.max + 3);
                if (r >= 0) {
                        jsonbuf_putc(b, '}');
                        symbolic_put(&p->sym, b, data, size);
                }
        } else if (r >= 0)
                jsonbuf_putc(b, '}');
        /* Likewise "cgroup". */
        if (r >= 0 && (batch->variant & DECODER_VARIANT_CGROUP))
                r = encode_cgroup(d, b, pid, ts);
        if (r >= 0)
                jsonbuf_put(b, "}\n", 2);
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
        r = batch_add_lost(batch, u->ts, cpu, u->count, TPD_LOST_UNKNOWN);
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
        r = batch_add_lost(batch, ts, cpu, count, TPD_LOST_OVERRUN);
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

int decoder_encode_variant(Decoder *d, Batch *batch, size_t index, unsigned variant) {
        Record *rec = &batch->records[index];
        EventPlan *p = NULL;
        JsonBuf *b = &batch->buf;
        const char *cgroup = NULL;
        size_t start, need, cgroup_len = 0;
        int r;

        if (rec->kind != RECORD_EVENT || (variant & ~(unsigned) batch->variant) == 0 ||
            (rec->print_length > 0 && rec->variant == variant))
                return 0;

        need = rec->length + 16;
        if ((variant & DECODER_VARIANT_SYM) && !(batch->variant & DECODER_VARIANT_SYM)) {
                p = plan_get(d, rec->event_id);
                if (p && !p->sym.compiled) {
                        r = symbolic_compile(&p->sym, p->event);
                        if (r < 0)
                                return r;
                }
                need += p ? p->sym.max : 16;
        }
        if ((variant & DECODER_VARIANT_CGROUP) && !(batch->variant & DECODER_VARIANT_CGROUP) &&
            d->cb.cgroup) {
                cgroup = d->cb.cgroup(d->cb.userdata, rec->pid, rec->ts, &cgroup_len);
                need += cgroup ? cgroup_len + 10 : 0;
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
                        symbolic_put(&p->sym, b, rec->raw, rec->raw_size);
                else
                        jsonbuf_put(b, ",\"sym\":{}", 9);
        }
        if (cgroup) {
                jsonbuf_put(b, ",\"cgroup\":", 10);
                jsonbuf_put(b, cgroup, cgroup_len);
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
