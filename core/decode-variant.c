/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The variants of a record's line: what a stream adds to the plain line ("sym", "cgroup", "stack",
 * "print"), made once per record for every stream that wants the same. */
#include <stdlib.h>
#include <string.h>

#include <traceevent/event-parse.h>

#include "core/decode.h"
#include "core/decoder.h"
#include "util.h"

/* Room for one frame's name: a kernel symbol is at most 512 bytes (KSYM_NAME_LEN), a module's name
 * 56; longer ones are cut. */
#define FRAME_NAME_MAX 640U

/* The frames of a kernel stack record: the addresses after the frames' offset up to the record's
 * end or the first ULONG_MAX, as the kernel's own text shows them. */
static size_t stack_frames(Decoder *d, const Record *rec, const uint8_t **ret) {
        size_t off;

        if (!rec->stack || decoder_stack_id(d) < 0)
                return 0;
        off = d->stack_frames_offset;
        if (rec->stack_size <= off)
                return 0;
        *ret = (const uint8_t *) rec->stack + off;
        for (size_t i = 0; i < (rec->stack_size - off) / 8; i++) {
                uint64_t a;

                memcpy(&a, *ret + i * 8, 8);
                if (a == UINT64_MAX)
                        return i;
        }
        return (rec->stack_size - off) / 8;
}

/* The name of a frame into name (FRAME_NAME_MAX bytes): its length. */
static size_t frame_name(Decoder *d, const uint8_t *frames, size_t i, char *name) {
        uint64_t a;
        size_t len;

        memcpy(&a, frames + i * 8, 8);
        len = d->cb.ksym ? d->cb.ksym(d->cb.userdata, a, name, FRAME_NAME_MAX) : 0;
        if (len == 0) {
                len = strlen(DECODER_STACK_UNKNOWN);
                memcpy(name, DECODER_STACK_UNKNOWN, len + 1);
        }
        return len;
}

/* ,"stack":["sym+0xoff",…], with room for the line's end after it. */
static int put_stack(Decoder *d, JsonBuf *b, const uint8_t *frames, size_t n) {
        char name[FRAME_NAME_MAX];
        int r;

        jsonbuf_put(b, ",\"stack\":[", 10);
        for (size_t i = 0; i < n; i++) {
                size_t len = frame_name(d, frames, i, name);

                r = jsonbuf_reserve(b, JSON_STRING_MAX_LEN(len) + 16);
                if (r < 0)
                        return r;
                if (i > 0)
                        jsonbuf_putc(b, ',');
                json_put_string(b, name, len);
        }
        jsonbuf_putc(b, ']');
        return 0;
}

int decoder_encode_variant(Decoder *d, Batch *batch, size_t index, unsigned variant) {
        Record *rec = &batch->records[index];
        EventPlan *p = NULL;
        JsonBuf *b = &batch->buf;
        const char *cgroup = NULL;
        const uint8_t *frames = NULL;
        size_t start, need, cgroup_len = 0, n_frames = 0;
        int r;

        if (rec->kind != RECORD_EVENT || (variant & ~(unsigned) batch->variant) == 0 ||
            (rec->print_length > 0 && rec->variant == variant))
                return 0;

        need = rec->length + 16;
        if ((variant & DECODER_VARIANT_SYM) && !(batch->variant & DECODER_VARIANT_SYM)) {
                p = decoder_plan(d, rec->event_id);
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
        if (variant & DECODER_VARIANT_STACK) {
                n_frames = stack_frames(d, rec, &frames);
                need += 16;
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
                /* With its stack, as trace-cmd report shows the stack record after it, frames
                 * named, not addressed. */
                if (frames) {
                        char name[FRAME_NAME_MAX];

                        trace_seq_puts(&d->seq, "\n<stack trace >");
                        for (size_t i = 0; i < n_frames; i++) {
                                frame_name(d, frames, i, name);
                                trace_seq_printf(&d->seq, "\n=> %s", name);
                        }
                }
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
        if (frames) {
                r = put_stack(d, b, frames, n_frames);
                /* What follows the frames: the frames' reserves may have taken its room. */
                if (r >= 0)
                        r = jsonbuf_reserve(b, (variant & DECODER_VARIANT_PRINT
                                                        ? JSON_STRING_MAX_LEN(d->seq.len) + 16
                                                        : 0) +
                                                       4);
                if (r < 0) {
                        b->len = start;
                        return r;
                }
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
