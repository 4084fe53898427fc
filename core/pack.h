/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <json-c/json.h>

#include "core/decode.h"

/*
 * The decoder's inverse, for `tpctl convert` of NDJSON into a trace-cmd data file: a record of §3
 * of docs/design.md packed into the bytes its event's format lays out, by the decoder's own plan
 * of that format (decode.c), so that decoding the bytes gives the record's "pid" and "fields"
 * back. Pure code.
 */

/* Packs the "pid" and "fields" of record as a record of event id of the decoder's tep into out
 * (emptied first). Returns 0; -ENOENT when the decoder has no plan of id; -EINVAL when the pid or
 * a field is missing, of another JSON type, out of its field's range, too long for it, or not in
 * the format (*ret_field names it, "pid" for the pid); -ENOMEM. The record keeps no
 * common_flags or common_preempt_count: they are 0. */
int decoder_pack(Decoder *d, unsigned id, json_object *record, JsonBuf *out, const char **ret_field);
