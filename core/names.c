/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdint.h>
#include <string.h>

#include "core/names.h"
#include "util.h"

static bool is_name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool names_event_is_valid(const char *name) {
        const char *colon = strchr(name, ':');
        size_t n = strlen(name);

        if (!colon || colon == name || !colon[1] || n > 255)
                return false;
        for (const char *p = name; *p; p++)
                if (p != colon && !is_name_char(*p))
                        return false;
        return true;
}

bool names_is_glob(const char *pattern) {
        return strpbrk(pattern, "*?[") != NULL;
}

/* Globs may use *, ? and bracket sets over name characters, and nothing that could name a path. */
static bool names_glob_is_valid(const char *pattern) {
        if (strlen(pattern) > 255 || !*pattern)
                return false;
        for (const char *p = pattern; *p; p++)
                if (!is_name_char(*p) && !strchr(":*?[]!-", *p))
                        return false;
        return true;
}

static void set_add(uint64_t set[2], unsigned char c) {
        if (c < 128)
                set[c / 64] |= UINT64_C(1) << (c % 64);
}

static bool set_has(const uint64_t set[2], unsigned char c) {
        return c < 128 && (set[c / 64] >> (c % 64)) & 1;
}

int glob_compile(const char *pattern, Glob *g) {
        const char *p = pattern;

        if (!names_glob_is_valid(pattern))
                return -EINVAL;
        *g = (Glob){};
        while (*p) {
                GlobToken *tok = &g->tokens[g->n++];

                *tok = (GlobToken){};
                if (*p == '*') {
                        tok->kind = GLOB_STAR;
                        while (*p == '*')
                                p++;
                        continue;
                }
                if (*p == '?') {
                        tok->kind = GLOB_ANY;
                        p++;
                        continue;
                }
                if (*p == '[') {
                        const char *q = p + 1;
                        bool negate = false, first = true;
                        uint64_t set[2] = {};

                        if (*q == '!') {
                                negate = true;
                                q++;
                        }
                        for (; *q && (first || *q != ']'); first = false) {
                                unsigned char lo = (unsigned char) *q++, hi = lo;
                                if (lo == '[' && (*q == ':' || *q == '.' || *q == '='))
                                        return -EINVAL;
                                if (*q == '-' && q[1] && q[1] != ']') {
                                        hi = (unsigned char) q[1];
                                        q += 2;
                                }
                                for (unsigned c = lo; c <= hi; c++)
                                        set_add(set, (unsigned char) c);
                        }
                        if (*q == ']') {
                                tok->kind = GLOB_SET;
                                tok->set[0] = negate ? ~set[0] : set[0];
                                tok->set[1] = negate ? ~set[1] : set[1];
                                p = q + 1;
                                continue;
                        }
                        /* No closing bracket: a literal '['. */
                }
                tok->kind = GLOB_CHAR;
                tok->c = *p++;
        }
        while (g->prefix < g->n && g->tokens[g->prefix].kind == GLOB_CHAR)
                g->prefix++;
        g->colon = SIZE_MAX;
        for (size_t i = 0, n = 0; i < g->n; i++)
                if (g->tokens[i].kind == GLOB_CHAR && g->tokens[i].c == ':' && n++ == 0)
                        g->colon = i;
                else if (g->tokens[i].kind == GLOB_CHAR && g->tokens[i].c == ':')
                        g->colon = SIZE_MAX; /* two: matches no event name, left to the full match */
        return 0;
}

static bool glob_token_matches(const GlobToken *tok, char c) {
        switch (tok->kind) {
        case GLOB_CHAR:
                return tok->c == c;
        case GLOB_ANY:
                return true;
        case GLOB_SET:
                return set_has(tok->set, (unsigned char) c);
        default:
                return false;
        }
}

/* Greedy with one backtracking point, the last star: enough for globs, linear in practice.
 * Matches tokens [0, n) against [s, end). */
static bool glob_match_tokens(const GlobToken *tokens, size_t n, const char *s, const char *end) {
        size_t i = 0, star = SIZE_MAX;
        const char *star_s = NULL;

        for (;;) {
                if (i < n && tokens[i].kind == GLOB_STAR) {
                        if (++i == n)
                                return true;
                        star = i;
                        star_s = s;
                        continue;
                }
                if (s < end && i < n && glob_token_matches(&tokens[i], *s)) {
                        i++;
                        s++;
                        continue;
                }
                if (s == end && i == n)
                        return true;
                if (star == SIZE_MAX || star_s == end)
                        return false;
                i = star;
                s = ++star_s;
        }
}

bool glob_match(const Glob *g, const char *s) {
        return glob_match_tokens(g->tokens, g->n, s, s + strlen(s));
}

/* An event name has exactly one ':', so a glob's only literal ':' must match it: the parts
 * before and after match the system and the event on their own, and the system part once per
 * system of the sorted list. */
bool glob_match_system(const Glob *g, const char *name, const char *colon) {
        return glob_match_tokens(g->tokens, g->colon, name, colon);
}

bool glob_match_event(const Glob *g, const char *colon) {
        const char *event = colon + 1;
        return glob_match_tokens(g->tokens + g->colon + 1, g->n - g->colon - 1, event,
                                 event + strlen(event));
}

int glob_match_text(const char *pattern, const char *name) {
        const char *colon = strchr(name, ':');
        Glob g;
        int r = glob_compile(pattern, &g);
        if (r < 0)
                return r;
        if (g.colon != SIZE_MAX && colon && !strchr(colon + 1, ':'))
                return glob_match_system(&g, name, colon) && glob_match_event(&g, colon);
        return glob_match(&g, name);
}
