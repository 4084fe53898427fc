/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <traceevent/event-parse.h>
#include <traceevent/trace-seq.h>

#include "core/decode.h"
#include "core/decoder.h"
#include "core/page.h"
#include "core/symbolic.h"
#include "tpd-protocol.h"
#include "util.h"

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
        d->stack_id = -1;
        if (callbacks)
                d->cb = *callbacks;
        trace_seq_init(&d->seq);
        *ret = d;
        return 0;
}

void decoder_reset_plans(Decoder *d) {
        d->stack_id = -1;
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

EventPlan *decoder_plan(Decoder *d, unsigned id) {
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
        EventPlan *p = decoder_plan(d, id);
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

/* Whether a record of size bytes holds field fp (for *_LOC, its location word). */
static bool field_fits(const FieldPlan *fp, size_t size) {
        return (size_t) fp->offset +
                       (fp->kind == FIELD_STRING_LOC || fp->kind == FIELD_ARRAY_LOC ? 4 : fp->size) <=
               size;
}

const char *decoder_plan_name(const EventPlan *p) {
        return p->name;
}

unsigned decoder_plan_n_fields(const EventPlan *p) {
        return p->n_fields;
}

const char *decoder_plan_field_name(const EventPlan *p, unsigned i, size_t *ret_len) {
        const FieldPlan *fp = &p->fields[i];
        /* The key is `"name":`, with a comma first after the first field: names are C
         * identifiers, written without escapes. */
        size_t skip = i > 0 ? 2 : 1;

        *ret_len = fp->key_len - skip - 2;
        return p->keys + fp->key + skip;
}

int decoder_plan_pid(const EventPlan *p, const void *data, size_t size, int32_t *ret) {
        if ((size_t) p->pid_offset + 4 > size)
                return -EBADMSG;
        *ret = (int32_t) load_unsigned((const uint8_t *) data + p->pid_offset, 4);
        return 0;
}

int decoder_plan_read(const EventPlan *p, unsigned i, const void *data, size_t size, DecoderValue *ret) {
        const FieldPlan *fp = &p->fields[i];
        const uint8_t *d = data;
        size_t off = fp->offset, len = fp->size;

        if (!field_fits(fp, size))
                return -EBADMSG;
        *ret = (DecoderValue){ .elem_size = fp->elem_size, .is_signed = fp->is_signed };
        switch (fp->kind) {
        case FIELD_UNSIGNED:
                ret->kind = DECODER_VALUE_UNSIGNED;
                ret->u = load_unsigned(d + off, fp->elem_size);
                return 0;
        case FIELD_SIGNED:
                ret->kind = DECODER_VALUE_SIGNED;
                ret->i = load_signed(d + off, fp->elem_size);
                return 0;
        case FIELD_POINTER:
                ret->kind = DECODER_VALUE_POINTER;
                ret->u = load_unsigned(d + off, fp->size);
                return 0;
        case FIELD_STRING_LOC:
        case FIELD_ARRAY_LOC:
                resolve_loc(fp, d, size, &off, &len);
                break;
        case FIELD_STRING_TAIL:
        case FIELD_ARRAY_TAIL:
                len = size - off;
                break;
        default: /* FIELD_STRING, FIELD_ARRAY: fixed */
                break;
        }
        ret->p = d + off;
        if (fp->kind == FIELD_STRING || fp->kind == FIELD_STRING_LOC || fp->kind == FIELD_STRING_TAIL) {
                const uint8_t *nul = memchr(ret->p, 0, len);

                ret->kind = DECODER_VALUE_STRING;
                ret->len = nul ? (size_t) (nul - ret->p) : len;
        } else {
                ret->kind = DECODER_VALUE_ARRAY;
                ret->len = len - len % fp->elem_size;
        }
        return 0;
}

int decoder_value_json(const DecoderValue *v, JsonBuf *b) {
        int r;

        switch (v->kind) {
        case DECODER_VALUE_STRING:
                return json_append_string(b, (const char *) v->p, v->len);
        case DECODER_VALUE_ARRAY:
                return put_array(b, v->p, v->len, v->elem_size, v->is_signed);
        default:
                r = jsonbuf_reserve(b, JSON_I64_MAX_LEN + 4);
                if (r < 0)
                        return r;
                if (v->kind == DECODER_VALUE_SIGNED)
                        json_put_i64(b, v->i);
                else if (v->kind == DECODER_VALUE_UNSIGNED)
                        json_put_u64(b, v->u);
                else
                        json_put_hex(b, v->u);
                return 0;
        }
}

static int encode_fields(JsonBuf *b, const EventPlan *p, const uint8_t *data, size_t size) {
        const FieldPlan *fp;
        int r;

        for (fp = p->fields; fp < p->fields + p->n_fields; fp++) {
                size_t off, len;

                /* A record shorter than its format (corrupt page): stop rather than read past it. */
                if (!field_fits(fp, size))
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

int decoder_put_cgroup(Decoder *d, JsonBuf *b, int32_t pid, uint64_t ts) {
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
        p = decoder_plan(d, id);
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
                r = decoder_put_cgroup(d, b, pid, ts);
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

int decoder_stack_id(Decoder *d) {
        struct tep_event *e;
        struct tep_format_field *f;

        /* Not there: looked up again once formats were added. */
        if (d->stack_id >= 0 || (d->stack_id == -2 && tep_get_events_count(d->tep) == d->stack_looked_at))
                return d->stack_id;
        d->stack_looked_at = tep_get_events_count(d->tep);
        e = tep_find_event_by_name(d->tep, "ftrace", "kernel_stack");
        f = e ? tep_find_field(e, "caller") : NULL;
        d->stack_id = -2;
        if (f && e->id >= 0 && e->id <= UINT16_MAX && f->offset >= 8 && f->offset <= UINT16_MAX) {
                d->stack_id = e->id;
                d->stack_frames_offset = (uint16_t) f->offset;
        }
        return d->stack_id;
}

/* A kernel stack record: joined to the event record before it, of the same task, or when the batch
 * holds none yet, the batch's lead (its record was in the previous read). Any other is dropped:
 * its record was lost, or had no format. */
static void decode_stack(Decoder *d, const void *data, size_t size, unsigned cpu,
                         const DecoderUnknownRun *unknown, Batch *batch) {
        Record *last = batch->n_records > 0 ? &batch->records[batch->n_records - 1] : NULL;
        int32_t pid;

        memcpy(&pid, (const uint8_t *) data + 4, 4);
        if (unknown->count > 0)
                return;
        /* tpd's batches are of one CPU; tpctl replay's, in time order, of all. */
        if (last && last->kind == RECORD_EVENT && !last->stack && last->pid == pid && last->cpu == cpu) {
                last->stack = data;
                last->stack_size = (uint32_t) size;
        } else if (batch->n_records == batch->n_lost && !batch->lead_stack) {
                batch->lead_stack = data;
                batch->lead_stack_size = (uint32_t) size;
                batch->lead_stack_pid = pid;
        }
}

int decoder_decode_record(Decoder *d, uint64_t ts, unsigned cpu, const void *data, size_t size,
                          DecoderUnknownRun *unknown, Batch *batch) {
        int r;

        if (size >= 8) {
                uint16_t id;
                memcpy(&id, data, 2);
                /* The id of kernel_stack is looked up again only for an id without a plan yet (the
                 * stack records never get one): none of it on the path of every record. */
                if (id == d->stack_id ||
                    ((id >= d->n_plans || !d->plans[id]) && id == decoder_stack_id(d))) {
                        decode_stack(d, data, size, cpu, unknown, batch);
                        return 0;
                }
                if (!decoder_plan(d, id)) {
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
