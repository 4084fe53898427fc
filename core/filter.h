/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * tpd's own reading of the kernel's event filter language, checked against an event's format
 * before any library or the kernel sees it. Only the canonical text this module produces is ever
 * handed on: to libtraceevent for stream filters, to events/S/E/filter for kernel filters.
 *
 *   expr      := and ( "||" and )*
 *   and       := unary ( "&&" unary )*
 *   unary     := "!" unary | "(" expr ")" | predicate
 *   predicate := FIELD op VALUE
 *
 * FIELD is a field of the format (common_* included). A numeric field compares with ==, !=, <, <=,
 * >, >= or & (a bit test, kernel filters only) against a decimal or 0x hexadecimal number of at
 * most 64 bits (63 for signed fields; no leading zero; a '-' only for signed fields in kernel
 * filters). A string field (char array,
 * __data_loc/__rel_loc char[]) compares with ==, != or ~ (a glob, kernel filters only) against a
 * string in "..." or '...' of printable ASCII without backslashes (the kernel reads none and
 * libtraceevent 1.7 reads them its own way) and without '"'.
 *
 * Pure: depends on libtraceevent's format structs only.
 */

#include <stddef.h>

struct tep_event;

typedef enum FilterTarget {
        FILTER_KERNEL, /* written to the kernel */
        FILTER_STREAM, /* applied by libtraceevent, which has no glob and no bit test */
} FilterTarget;

/* Parentheses and "!" nested deeper than this are refused. */
#define FILTER_DEPTH_MAX 16U
/* Comparisons in one filter. */
#define FILTER_PREDICATES_MAX 128U
/* Longest string value; the kernel's MAX_FILTER_STR_VAL is 256 with the NUL. */
#define FILTER_STRING_MAX 255U

/*
 * Parses text for event. On success returns 0 and, when ret_canonical is not NULL, the canonical
 * text (tokens separated by single spaces, numbers in decimal, strings in double quotes,
 * parentheses wherever libtraceevent's left-to-right reading could differ from the kernel's
 * precedence; for the kernel "!" is followed by a parenthesised operand, for streams it is pushed
 * down into the comparisons). Canonical text parses to itself.
 * On -EINVAL *ret_message (when not NULL) says where (1-based column) and why, and never contains
 * bytes of the input other than printable ASCII. -ENOMEM on allocation failure.
 */
int filter_canonicalize(const struct tep_event *event, const char *text, FilterTarget target,
                        char **ret_canonical, char **ret_message);
/*
 * For a stream: parses text for event once, as the kernel reads it, and tells whether libtraceevent
 * can apply it too. Returns 0 with the stream's canonical text; -EINVAL when the kernel's grammar
 * refuses it (the message filter_canonicalize() gives for FILTER_KERNEL); -EOPNOTSUPP when only the
 * kernel could apply it (the message it gives for FILTER_STREAM); -ENOMEM.
 */
int filter_canonicalize_stream(const struct tep_event *event, const char *text, char **ret_canonical,
                               char **ret_message);
