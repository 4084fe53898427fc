/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Event names and globs over them, as clients send them: "system:event" with [A-Za-z0-9_] on both
 * sides, and globs of *, ? and [...] over those characters and ':'. Nothing else passes, so no
 * client string that passes can name a path. Pure: no tracefs, the caller owns the list of events.
 */

/* True when name has the form "system:event" with only [A-Za-z0-9_] on both sides. */
bool names_event_is_valid(const char *name);
/* True when pattern uses glob syntax (*, ?, [). */
bool names_is_glob(const char *pattern);

/*
 * Globs are compiled once per call and matched by hand: fnmatch() parses the pattern again for
 * every one of the ~2,300 names, which made a glob cost up to 0.3 ms. The semantics are fnmatch's
 * without flags for the characters names_glob_is_valid() lets through: '*' and '?' match any character
 * (':' too), "[...]" a set with '!' negation and ranges, ']' first in a set is literal, and a '['
 * without its ']' is a literal '['. Character classes ("[[:alpha:]]") are not supported.
 */
typedef enum GlobKind {
        GLOB_CHAR,
        GLOB_ANY,
        GLOB_STAR,
        GLOB_SET,
} GlobKind;

typedef struct GlobToken {
        GlobKind kind;
        char c;
        uint64_t set[2]; /* ASCII: names are ASCII */
} GlobToken;

typedef struct Glob {
        GlobToken tokens[256];
        size_t n;
        size_t prefix; /* leading literal characters */
        size_t colon;  /* index of the only literal ':' token, or SIZE_MAX */
} Glob;

/* Compiles a glob; -EINVAL when it uses anything but name characters, ':', *, ?, [...]. */
int glob_compile(const char *pattern, Glob *g);
bool glob_match(const Glob *g, const char *s);
/* For a glob with one literal ':' (g->colon set): the part before it against the system of name
 * (up to colon), the part after it against the event. */
bool glob_match_system(const Glob *g, const char *name, const char *colon);
bool glob_match_event(const Glob *g, const char *colon);
/* Compiles pattern and matches name: 1, 0, or -EINVAL. */
int glob_match_text(const char *pattern, const char *name);
