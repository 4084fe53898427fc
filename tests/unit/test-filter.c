/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The filter grammar (core/filter.c) against recorded formats: valid filters give exact canonical
 * text, which parses to itself and which libtraceevent accepts; everything else is -EINVAL with a
 * message that names a column and shows no byte of the input that is not printable ASCII.
 */

#include <limits.h>

#include <traceevent/event-parse.h>

#include "core/escape.h"
#include "core/filter.h"
#include "tpd-protocol.h"
#include "tpd-test.h"

static const char *datadir;
static struct tep_handle *tep;
static struct tep_event *sched_switch, *kinds, *exec;

static void load(const char *dataset, const char *file, const char *system) {
        char path[PATH_MAX];
        size_t len;
        char *buf;

        snprintf(path, sizeof(path), "%s/%s/%s", datadir, dataset, file);
        buf = test_read_file(path, &len);
        ASSERT(buf);
        ASSERT_INT_EQ(tep_parse_event(tep, buf, len, system), 0);
        free(buf);
}

/* Accepted for target: canonical text as expected; it parses to itself; for streams libtraceevent
 * takes it. */
static void check_ok(struct tep_event *e, FilterTarget target, const char *text, const char *expected) {
        char *canonical = NULL, *again = NULL, *msg = NULL;
        int r;

        r = filter_canonicalize(e, text, target, &canonical, &msg);
        if (r != 0)
                TEST_FAIL("'%s' refused: %s", text, msg);
        ASSERT_STR_EQ(canonical, expected);
        ASSERT_INT_EQ(filter_canonicalize(e, canonical, target, &again, NULL), 0);
        ASSERT_STR_EQ(again, canonical);
        if (target == FILTER_STREAM) {
                struct tep_event_filter *f = tep_filter_alloc(tep);
                char *full = NULL;

                ASSERT(f);
                ASSERT(asprintf(&full, "%s/%s:%s", e->system, e->name, canonical) > 0);
                ASSERT_INT_EQ(tep_filter_add_filter_str(f, full), 0);
                free(full);
                tep_filter_free(f);
        }
        free(canonical);
        free(again);
}

static void check_both(struct tep_event *e, const char *text, const char *expected) {
        check_ok(e, FILTER_KERNEL, text, expected);
        check_ok(e, FILTER_STREAM, text, expected);
}

/* Refused with -EINVAL and a message containing want; the message is printable ASCII. */
static void check_bad_len(struct tep_event *e, FilterTarget target, const char *text, const char *want) {
        char *canonical = NULL, *msg = NULL;
        int r = filter_canonicalize(e, text, target, &canonical, &msg);

        if (r != -EINVAL)
                TEST_FAIL("'%.200s' gave %d (%s), not -EINVAL", text, r, canonical ? canonical : "");
        ASSERT(canonical == NULL);
        ASSERT(msg);
        for (const char *p = msg; *p; p++)
                ASSERT(*p >= 0x20 && *p < 0x7f);
        if (!strstr(msg, want))
                TEST_FAIL("message for '%.200s' is '%s', wanted '%s'", text, msg, want);
        free(msg);
}

static void check_bad(struct tep_event *e, const char *text, const char *want) {
        check_bad_len(e, FILTER_KERNEL, text, want);
        check_bad_len(e, FILTER_STREAM, text, want);
}

static void test_valid(void) {
        check_both(sched_switch, "prev_pid==1", "prev_pid == 1");
        check_both(sched_switch, "  prev_pid\t!=  0x10 ", "prev_pid != 16");
        check_both(sched_switch, "common_pid > 0", "common_pid > 0");
        check_both(sched_switch, "prev_prio<=120&&next_prio>=0", "prev_prio <= 120 && next_prio >= 0");
        check_both(sched_switch, "prev_prio<120||next_prio>0", "prev_prio < 120 || next_prio > 0");
        check_both(sched_switch, "prev_comm == \"bash\"", "prev_comm == \"bash\"");
        check_both(sched_switch, "prev_comm == 'it s'", "prev_comm == \"it s\"");
        /* A one-character '...' string is a number to libtraceevent: always "...". */
        check_both(sched_switch, "prev_comm == 'a'", "prev_comm == \"a\"");
        check_both(sched_switch, "next_comm != \"\"", "next_comm != \"\"");
        check_both(sched_switch, "prev_comm == \"a'b\"", "prev_comm == \"a'b\"");
        check_both(sched_switch, "prev_comm == \"a' && next_comm == 'b\"",
                   "prev_comm == \"a' && next_comm == 'b\"");
        /* && binds tighter than || in the kernel; libtraceevent reads left to right. */
        check_both(sched_switch, "prev_pid == 1 || next_pid == 2 && prev_prio == 3",
                   "prev_pid == 1 || ( next_pid == 2 && prev_prio == 3 )");
        check_both(sched_switch, "prev_pid == 1 && next_pid == 2 || prev_prio == 3",
                   "( prev_pid == 1 && next_pid == 2 ) || prev_prio == 3");
        check_both(sched_switch, "(prev_pid == 1 || next_pid == 2) && prev_prio == 3",
                   "( prev_pid == 1 || next_pid == 2 ) && prev_prio == 3");
        check_both(sched_switch, "prev_pid == 1 && next_pid == 2 && prev_prio == 3",
                   "prev_pid == 1 && next_pid == 2 && prev_prio == 3");
        check_both(sched_switch, "prev_pid == 1 && (next_pid == 2 && prev_prio == 3)",
                   "prev_pid == 1 && ( next_pid == 2 && prev_prio == 3 )");
        check_both(sched_switch, "prev_pid == 1 || (next_pid == 2 || prev_prio == 3)",
                   "prev_pid == 1 || ( next_pid == 2 || prev_prio == 3 )");
        check_both(sched_switch, "((prev_pid == 1))", "prev_pid == 1");
        /* "!" stays for the kernel; for libtraceevent it is pushed down (De Morgan). */
        check_ok(sched_switch, FILTER_KERNEL, "!prev_pid == 1", "! ( prev_pid == 1 )");
        check_ok(sched_switch, FILTER_STREAM, "!prev_pid == 1", "prev_pid != 1");
        check_ok(sched_switch, FILTER_KERNEL, "!(prev_pid == 1 || next_pid == 2)",
                 "! ( prev_pid == 1 || next_pid == 2 )");
        check_ok(sched_switch, FILTER_STREAM, "!(prev_pid == 1 || next_pid < 2)",
                 "prev_pid != 1 && next_pid >= 2");
        check_ok(sched_switch, FILTER_KERNEL, "!!(prev_pid==1)", "! ( ! ( prev_pid == 1 ) )");
        check_ok(sched_switch, FILTER_STREAM, "!!(prev_pid==1)", "prev_pid == 1");
        check_ok(sched_switch, FILTER_KERNEL, "prev_pid == 1 && !(next_pid == 2) || !prev_prio == 3",
                 "( prev_pid == 1 && ! ( next_pid == 2 ) ) || ! ( prev_prio == 3 )");
        check_ok(sched_switch, FILTER_STREAM, "prev_pid == 1 && !(next_pid == 2) || !prev_prio == 3",
                 "( prev_pid == 1 && next_pid != 2 ) || prev_prio != 3");
        check_ok(sched_switch, FILTER_STREAM, "!(prev_pid > 1 && (next_pid <= 2 || prev_comm != \"x\"))",
                 "prev_pid <= 1 || ( next_pid > 2 && prev_comm == \"x\" )");
        check_both(sched_switch, "((((((((((((((((prev_pid == 1))))))))))))))))", "prev_pid == 1");
        check_both(kinds, "u64v == 0xffffffffffffffff", "u64v == 18446744073709551615");
        check_both(kinds, "s64 == 9223372036854775807", "s64 == 9223372036854775807");
        check_both(kinds, "u8v == 255 && s8v < 0x7F && ptr != 0 && u16 >= 0 && u32 > 0 && s32 <= 0",
                   "u8v == 255 && s8v < 127 && ptr != 0 && u16 >= 0 && u32 > 0 && s32 <= 0");
        check_both(kinds, "name == \"x\" && str != 'y' && rstr == \"z\"",
                   "name == \"x\" && str != \"y\" && rstr == \"z\"");
        check_both(exec, "filename == \"/bin/sh\"", "filename == \"/bin/sh\"");

        /* Kernel only: libtraceevent has no glob and no bit test. */
        check_ok(sched_switch, FILTER_KERNEL, "prev_comm ~ \"ba*\"", "prev_comm ~ \"ba*\"");
        check_ok(sched_switch, FILTER_KERNEL, "prev_state & 0x3", "prev_state & 3");
        check_ok(sched_switch, FILTER_KERNEL, "prev_pid==-1||prev_prio>-0x10",
                 "prev_pid == -1 || prev_prio > -16");
        check_ok(sched_switch, FILTER_KERNEL, "prev_pid == -0", "prev_pid == 0");
        check_ok(kinds, FILTER_KERNEL, "s64 == -9223372036854775808", "s64 == -9223372036854775808");
        check_bad_len(sched_switch, FILTER_STREAM, "prev_comm ~ \"ba*\"",
                      "only supported in kernel filters");
        check_bad_len(sched_switch, FILTER_STREAM, "prev_state & 3", "only supported in kernel filters");
}

static void test_invalid_syntax(void) {
        /* issue 7: this one crashed tpd inside libtraceevent. */
        check_bad(sched_switch, "prev_comm == \"a\\\"", "column 16: backslashes are not allowed");
        check_bad(sched_switch, "prev_comm == \"a\\\\\"", "backslashes are not allowed");
        check_bad(sched_switch, "prev_comm == \"a\\\" || prev_pid == 1", "backslashes");
        check_bad(sched_switch, "prev_comm == \"a", "column 14: unterminated string");
        check_bad(sched_switch, "prev_comm == 'a", "unterminated string");
        check_bad(sched_switch, "prev_comm != 'it\"s'", "may not contain '\"'");
        /* found by fuzz-filter: libtraceevent 1.7.1 splits on any ','. */
        check_ok(sched_switch, FILTER_KERNEL, "prev_comm != ','", "prev_comm != \",\"");
        check_bad_len(sched_switch, FILTER_STREAM, "prev_comm != ','", "may not contain ','");
        check_bad(sched_switch, "prev_comm == \"a\" \"b\"", "unexpected string after a complete expression");
        check_bad(sched_switch, "prev_comm == \"a\" )", "unexpected ')'");
        check_bad(sched_switch, "(prev_pid == 1", "expected ')' to close the '(' at column 1");
        check_bad(sched_switch, "prev_pid == 1 &&", "column 17: expected a field name");
        check_bad(sched_switch, "prev_pid", "expected a comparison operator after 'prev_pid'");
        check_bad(sched_switch, "prev_pid ==", "expected a number");
        check_bad(sched_switch, "prev_pid == 1 prev_pid == 2", "unexpected field after");
        check_bad(sched_switch, "prev_pid = 1", "'=' is not an operator");
        check_bad(sched_switch, "prev_comm =~ \"a\"", "'=' is not an operator");
        check_bad(sched_switch, "prev_pid == 1 | next_pid == 2", "'|' is not an operator");
        check_bad(sched_switch, "prev_pid == 1, next_pid == 2", "unexpected character ','");
        check_bad(sched_switch, "sched/sched_switch:prev_pid == 1", "is not a field");
        check_bad(sched_switch, "", "empty filter");
        check_bad(sched_switch, "  \t ", "empty filter");
        check_bad(sched_switch, "()", "expected a field name");
}

static void test_invalid_numbers(void) {
        check_bad(sched_switch, "prev_pid == 99999999999999999999", "does not fit in 64 bits");
        check_bad(sched_switch, "prev_pid == 0x1ffffffffffffffff", "does not fit in 64 bits");
        check_bad(sched_switch, "prev_pid == 18446744073709551616", "does not fit in 64 bits");
        check_bad(kinds, "s64 == 9223372036854775808", "out of range for the signed field 's64'");
        check_bad(sched_switch, "prev_pid == 010", "may not start with 0");
        check_bad_len(sched_switch, FILTER_STREAM, "prev_pid == -1",
                      "negative numbers are only supported in kernel");
        check_bad_len(sched_switch, FILTER_KERNEL, "common_type == -1", "'common_type' is unsigned");
        check_bad_len(kinds, FILTER_KERNEL, "s64 == -9223372036854775809",
                      "out of range for the signed field");
        check_bad(sched_switch, "prev_pid == - 1", "'-' is not an operator");
        check_bad(sched_switch, "prev_pid == --1", "'-' is not an operator");
        check_bad(sched_switch, "prev_pid == -", "'-' is not an operator");
        check_bad(sched_switch, "prev_pid == 1x", "invalid digit");
        check_bad(sched_switch, "prev_pid == 0x", "without digits");
        check_bad(sched_switch, "prev_pid == 0xg", "invalid digit");
}

static void test_invalid_fields(void) {
        check_bad(sched_switch, "nosuch == 1", "'nosuch' is not a field of sched:sched_switch");
        check_bad(sched_switch, "COMM == \"x\"", "'COMM' is not a field");
        check_bad(sched_switch, "prev_comm == 1", "'prev_comm' is a string field: expected a quoted string");
        check_bad(sched_switch, "prev_pid == \"1\"", "'prev_pid' is a numeric field: expected a number");
        check_bad(sched_switch, "prev_comm < \"a\"", "'prev_comm' is a string field: compare it with");
        check_bad(sched_switch, "prev_pid ~ \"1*\"", "'prev_pid' is a numeric field");
        check_bad(sched_switch, "prev_pid == prev_pid", "expected a number");
        check_bad(kinds, "arr == 1", "field 'arr' (int[3]) cannot be filtered on");
        check_bad(kinds, "bytes == \"a\"", "'bytes'");
        check_bad(kinds, "cptr == \"x\"", "field 'cptr' (const char *) cannot be filtered on");
        check_bad(kinds, "darr == 1", "'darr'");
        check_bad(kinds, "odd == 1", "'odd'");
}

/* Control and non-ASCII bytes, never echoed. */
static void test_invalid_bytes(void) {
        check_bad(sched_switch, "prev_pid == 1\n<0>forged", "byte 0x0a is not allowed");
        check_bad(sched_switch, "prev_comm == \"a\n<0>forged\"", "byte 0x0a in a string");
        check_bad(sched_switch, "prev_comm == \"\x1b[31mred\"", "byte 0x1b in a string");
        check_bad(sched_switch, "\x1b]0;title\x07", "byte 0x1b is not allowed");
        check_bad(sched_switch, "prev_comm == \"\xc3\xa9\"", "byte 0xc3 in a string");
        check_bad(sched_switch, "prev_comm == \"\x7f\"", "byte 0x7f");
        check_bad(sched_switch, "prev_pid == 1\r", "byte 0x0d");
}

static void test_invalid_limits(void) {
        char *big, *p;

        big = malloc(65537);
        ASSERT(big);
        for (p = big; p + 20 < big + 65536;)
                p = stpcpy(p, "prev_pid == 1 && ");
        strcpy(p, "prev_pid == 1");
        check_bad(sched_switch, big, "longer than 4096 bytes");

        memset(big, '(', 200);
        p = stpcpy(big + 200, "prev_pid == 1");
        memset(p, ')', 200);
        p[200] = 0;
        check_bad(sched_switch, big, "column 17: nested deeper than 16 levels");
        memset(big, '!', 200);
        strcpy(big + 200, "prev_pid == 1");
        check_bad(sched_switch, big, "nested deeper than 16 levels");

        /* "! (" is one level: 16 of them are fine; found by fuzz-filter, 10 "!" once made 20. */
        memset(big, '!', 16);
        strcpy(big + 16, "prev_pid == 1");
        check_ok(sched_switch, FILTER_KERNEL, big,
                 "! ( ! ( ! ( ! ( ! ( ! ( ! ( ! ( ! ( ! ( ! ( ! ( ! ( ! ( ! ( ! ( prev_pid == 1 ) ) ) ) ) ) "
                 ") ) ) ) ) ) ) ) ) )");
        check_ok(sched_switch, FILTER_STREAM, big, "prev_pid == 1");
        /* Parentheses added for precedence count too. */
        p = big;
        for (unsigned i = 0; i < FILTER_DEPTH_MAX; i++)
                p = stpcpy(p, i % 2 ? "u8v==1||(" : "u8v==1&&(");
        p = stpcpy(p, "u8v==1");
        memset(p, ')', FILTER_DEPTH_MAX);
        p[FILTER_DEPTH_MAX] = 0;
        ASSERT_INT_EQ(filter_canonicalize(kinds, big, FILTER_KERNEL, NULL, NULL), 0);
        strcpy(p, "||u8v==2&&u8v==3");
        memset(p + strlen(p), ')', FILTER_DEPTH_MAX);
        p[16 + FILTER_DEPTH_MAX] = 0;
        check_bad(kinds, big, "column 1: nested deeper than 16 levels once normalised");

        p = big;
        for (unsigned i = 0; i < FILTER_PREDICATES_MAX + 1; i++)
                p = stpcpy(p, i > 0 ? "&&u8v==1" : "u8v==1");
        ASSERT(strlen(big) <= TPD_FILTER_MAX);
        check_bad(kinds, big, "more than 128 comparisons");

        /* Canonical text longer than the input: spaces and decimal numbers. */
        p = big;
        for (unsigned i = 0; i < 125; i++)
                p = stpcpy(p, i > 0 ? "||!u64v==0xffffffffffffffff" : "!u64v==0xffffffffffffffff");
        ASSERT(strlen(big) <= TPD_FILTER_MAX);
        check_bad_len(kinds, FILTER_KERNEL, big, "once normalised");

        memset(big, 'a', 300);
        big[300] = 0;
        {
                char *f = NULL;
                ASSERT(asprintf(&f, "prev_comm == \"%s\"", big) > 0);
                check_bad(sched_switch, f, "string longer than 255 bytes");
                free(f);
                ASSERT(asprintf(&f, "%s == 1", big) > 0);
                check_bad(sched_switch, f, "is not a field");
                free(f);
        }
        free(big);
}

static void test_escape_text(void) {
        char buf[32];

        ASSERT_STR_EQ(escape_text("prev_pid == 1", buf, sizeof(buf)), "prev_pid == 1");
        ASSERT_STR_EQ(escape_text("a\n<0>x", buf, sizeof(buf)), "a\\x0a<0>x");
        ASSERT_STR_EQ(escape_text("'\"\\\x1b[\x7f\xc3\xa9", buf, sizeof(buf)),
                      "\\'\\\"\\\\\\x1b[\\x7f\\xc3\\xa9");
        ASSERT_STR_EQ(escape_text(NULL, buf, sizeof(buf)), "(null)");
        /* Cut to fit, never in the middle of an escape. */
        ASSERT_STR_EQ(escape_text("0123456789012345678901234567890123456789", buf, sizeof(buf)),
                      "0123456789012345678901234567...");
        ASSERT_STR_EQ(escape_text("\n\n\n\n\n\n\n\n", buf, 16), "\\x0a\\x0a\\x0a...");
}

int main(int argc, char **argv) {
        if (argc != 2) {
                fprintf(stderr, "usage: test-filter DATADIR\n");
                return EXIT_FAILURE;
        }
        datadir = argv[1];
        tep = tep_alloc();
        ASSERT(tep);
        tep_set_long_size(tep, 8);
        load("sched_switch", "sched.sched_switch.format", "sched");
        load("synthetic", "tpdtest.kinds.format", "tpdtest");
        load("exec", "sched.sched_process_exec.format", "sched");
        sched_switch = tep_find_event_by_name(tep, "sched", "sched_switch");
        kinds = tep_find_event_by_name(tep, "tpdtest", "kinds");
        exec = tep_find_event_by_name(tep, "sched", "sched_process_exec");
        ASSERT(sched_switch && kinds && exec);

        test_valid();
        test_invalid_syntax();
        test_invalid_numbers();
        test_invalid_fields();
        test_invalid_bytes();
        test_invalid_limits();
        test_escape_text();
        tep_free(tep);
        return 0;
}
