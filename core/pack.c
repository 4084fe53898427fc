/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sys/types.h>
#include <traceevent/event-parse.h>

#include "core/decode.h"
#include "core/decoder.h"
#include "core/pack.h"
#include "util.h"

/* The integer v as the decoder prints a field of size bytes: signed ones in their signed range,
 * others in their unsigned one. */
static bool get_integer(json_object *v, unsigned size, bool is_signed, uint64_t *ret) {
        int64_t s;
        uint64_t u;

        if (!json_object_is_type(v, json_type_int))
                return false;
        s = json_object_get_int64(v);
        u = json_object_get_uint64(v);
        if (is_signed) {
                int64_t min = size >= 8 ? INT64_MIN : -(INT64_C(1) << (size * 8 - 1));
                int64_t max = size >= 8 ? INT64_MAX : (INT64_C(1) << (size * 8 - 1)) - 1;
                if (s < 0) {
                        if (s < min)
                                return false;
                } else if (u > (uint64_t) max)
                        return false;
                *ret = s < 0 ? (uint64_t) s : u;
                return true;
        }
        if (s < 0 || (size < 8 && u >> (size * 8) != 0))
                return false;
        *ret = u;
        return true;
}

/* A pointer as the decoder prints it: "0x" and hex digits. */
static bool get_pointer(json_object *v, unsigned size, uint64_t *ret) {
        const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
        char *end;

        /* As the decoder writes them: no leading zero, so that they come back the same. */
        if (!s || strncmp(s, "0x", 2) != 0 || !s[2] || strspn(s + 2, "0123456789abcdef") != strlen(s + 2) ||
            (s[2] == '0' && s[3]))
                return false;
        errno = 0;
        *ret = strtoull(s + 2, &end, 16);
        return errno == 0 && !*end && (size >= 8 || *ret >> (size * 8) == 0);
}

/* A string's bytes; one with a NUL in it the decoder would have cut there, so it cannot be kept. */
static bool get_string(json_object *v, const char **ret, size_t *ret_len) {
        if (!json_object_is_type(v, json_type_string))
                return false;
        *ret = json_object_get_string(v);
        *ret_len = (size_t) json_object_get_string_len(v);
        return !memchr(*ret, 0, *ret_len);
}

/* The elements of an integer array into n * elem bytes at p (n: the array's length). */
static bool put_array(uint8_t *p, json_object *v, const FieldPlan *fp, size_t n) {
        for (size_t i = 0; i < n; i++) {
                uint64_t x;
                if (!get_integer(json_object_array_get_idx(v, i), fp->elem_size, fp->is_signed, &x))
                        return false;
                store_unsigned(p + i * fp->elem_size, x, fp->elem_size);
        }
        return true;
}

/* The bytes of a dynamic field (a string with its NUL, or array elements): their length, or -1. */
static ssize_t dynamic_length(const FieldPlan *fp, json_object *v) {
        const char *s;
        size_t len;

        if (fp->kind == FIELD_STRING_LOC || fp->kind == FIELD_STRING_TAIL)
                return get_string(v, &s, &len) ? (ssize_t) len + 1 : -1;
        if (!json_object_is_type(v, json_type_array))
                return -1;
        return (ssize_t) (json_object_array_length(v) * fp->elem_size);
}

static bool put_dynamic(uint8_t *p, const FieldPlan *fp, json_object *v, size_t len) {
        if (fp->kind == FIELD_STRING_LOC || fp->kind == FIELD_STRING_TAIL) {
                memcpy(p, json_object_get_string(v), len - 1);
                p[len - 1] = 0;
                return true;
        }
        return put_array(p, v, fp, len / fp->elem_size);
}

static bool put_fixed(uint8_t *p, const FieldPlan *fp, json_object *v) {
        const char *s;
        uint64_t x;
        size_t len;

        switch (fp->kind) {
        case FIELD_UNSIGNED:
        case FIELD_SIGNED:
                if (!get_integer(v, fp->elem_size, fp->kind == FIELD_SIGNED, &x))
                        return false;
                store_unsigned(p, x, fp->elem_size);
                return true;
        case FIELD_POINTER:
                if (!get_pointer(v, fp->size, &x))
                        return false;
                store_unsigned(p, x, fp->size);
                return true;
        case FIELD_STRING:
                /* Up to the array's size; a string that fills it has no NUL, as the kernel's. */
                if (!get_string(v, &s, &len) || len > fp->size)
                        return false;
                memcpy(p, s, len);
                return true;
        case FIELD_ARRAY:
                return json_object_is_type(v, json_type_array) &&
                       json_object_array_length(v) == (size_t) (fp->size / fp->elem_size) &&
                       put_array(p, v, fp, fp->size / fp->elem_size);
        default:
                return false;
        }
}

static bool is_dynamic(const FieldPlan *fp) {
        return fp->kind == FIELD_STRING_LOC || fp->kind == FIELD_ARRAY_LOC ||
               fp->kind == FIELD_STRING_TAIL || fp->kind == FIELD_ARRAY_TAIL;
}

static bool is_tail(const FieldPlan *fp) {
        return fp->kind == FIELD_STRING_TAIL || fp->kind == FIELD_ARRAY_TAIL;
}

int decoder_pack(Decoder *d, unsigned id, json_object *record, JsonBuf *out, const char **ret_field) {
        EventPlan *p = id <= UINT16_MAX ? decoder_plan(d, id) : NULL;
        const struct tep_format_field *f;
        json_object *fields, *v;
        size_t fixed = 0, dynamic = 0, size;
        bool has_loc = false;
        uint64_t pid;
        int r;

        *ret_field = NULL;
        out->len = 0;
        if (!p)
                return -ENOENT;
        *ret_field = "pid";
        if (!json_object_object_get_ex(record, "pid", &v) || !get_integer(v, 4, true, &pid))
                return -EINVAL;
        *ret_field = "fields";
        if (!json_object_object_get_ex(record, "fields", &fields) ||
            !json_object_is_type(fields, json_type_object) ||
            json_object_object_length(fields) != (int) p->n_fields)
                return -EINVAL;

        /* The fixed part ends past the last field of the format, common ones included. */
        for (f = p->event->format.common_fields; f; f = f->next)
                fixed = MAX(fixed, (size_t) f->offset + (size_t) f->size);
        f = p->event->format.fields;
        for (unsigned i = 0; i < p->n_fields; i++, f = f->next) {
                const FieldPlan *fp = &p->fields[i];
                ssize_t len = 0;

                fixed = MAX(fixed, (size_t) fp->offset + fp->size);
                *ret_field = f->name;
                if (!json_object_object_get_ex(fields, *ret_field, &v))
                        return -EINVAL;
                if (is_dynamic(fp) && (len = dynamic_length(fp, v)) < 0)
                        return -EINVAL;
                /* Formats the kernel does not write (a location word not of 4 bytes, a tail
                 * before other fields' ends) and a tail array the page's 4-byte padding would
                 * lengthen on its way back cannot be kept. */
                if (!is_tail(fp) && is_dynamic(fp)) {
                        if (fp->size != 4)
                                return -EINVAL;
                        has_loc = true;
                }
                if (is_tail(fp) && (i + 1 != p->n_fields || fp->offset != fixed || has_loc ||
                                    (fp->kind == FIELD_ARRAY_TAIL && (fp->offset + (size_t) len) % 4 != 0)))
                        return -EINVAL;
                dynamic += (size_t) len;
        }
        size = fixed + dynamic;
        if (size > DECODER_FIELD_END_MAX)
                return -EINVAL;

        r = jsonbuf_reserve(out, size);
        if (r < 0)
                return r;
        memset(out->data, 0, size);
        store_unsigned((uint8_t *) out->data, id, 2);
        store_unsigned((uint8_t *) out->data + p->pid_offset, pid, 4);
        out->len = fixed;
        f = p->event->format.fields;
        for (unsigned i = 0; i < p->n_fields; i++, f = f->next) {
                const FieldPlan *fp = &p->fields[i];
                uint8_t *at = (uint8_t *) out->data;
                size_t len, off;

                *ret_field = f->name;
                json_object_object_get_ex(fields, *ret_field, &v);
                if (!is_dynamic(fp)) {
                        if (!put_fixed(at + fp->offset, fp, v))
                                return -EINVAL;
                        continue;
                }
                len = (size_t) dynamic_length(fp, v);
                /* A tail is the rest of the record, after every other field (checked above). */
                off = is_tail(fp) ? fp->offset : out->len;
                if (!is_tail(fp)) {
                        size_t rel = fp->relative ? off - (fp->offset + fp->size) : off;
                        if (rel > 0xffff || len > 0xffff)
                                return -EINVAL;
                        store_unsigned(at + fp->offset, (uint64_t) len << 16 | rel, 4);
                }
                if (!put_dynamic(at + off, fp, v, len))
                        return -EINVAL;
                out->len = off + len;
        }
        *ret_field = NULL;
        return 0;
}
