/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Varlink framing over a real socketpair() (split, short and merged reads and writes, the size
 * limit), call parsing with every malformation the daemon must refuse, replies and errors as they
 * go on the wire, and the typed parameter getters.
 */

#include <sys/socket.h>
#include <sys/wait.h>

#include <json-c/json.h>

#include "tpd-protocol.h"
#include "tpd-test.h"
#include "varlink.h"

typedef struct Pair {
        int w, r;
} Pair;

static Pair pair_new(void) {
        int fds[2];

        ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) == 0);
        return (Pair){ fds[0], fds[1] };
}

static void pair_close(Pair *p) {
        close(p->w);
        close(p->r);
}

static void write_all(int fd, const void *data, size_t len) {
        const char *p = data;

        while (len > 0) {
                ssize_t n = write(fd, p, len);
                ASSERT(n > 0);
                p += n;
                len -= (size_t) n;
        }
}

/* Moves at most max bytes from the socket into the buffer, as the daemon's read path does.
 * Returns the number of bytes read (0 when nothing was waiting). */
static size_t receive(VarlinkBuffer *b, int fd, size_t max) {
        char *p;
        ssize_t n;

        ASSERT_INT_EQ(varlink_buffer_space(b, max, &p), 0);
        n = read(fd, p, max);
        if (n < 0 && errno == EAGAIN)
                return 0;
        ASSERT(n >= 0);
        varlink_buffer_advance(b, (size_t) n);
        return (size_t) n;
}

/* Takes the next message, which must be there and equal expected. */
static void expect_message(VarlinkBuffer *b, const char *expected) {
        const char *msg = NULL;
        size_t len = 0;

        ASSERT_INT_EQ(varlink_buffer_next(b, &msg, &len), 1);
        ASSERT_MEM_EQ(msg, len, expected, strlen(expected));
        ASSERT(msg[len] == 0);
}

static void expect_no_message(VarlinkBuffer *b) {
        const char *msg = NULL;
        size_t len = 0;

        ASSERT_INT_EQ(varlink_buffer_next(b, &msg, &len), 0);
}

static const char m1[] = "{\"method\":\"io.tpd.tracing.GetStatus\"}";
static const char m2[] =
        "{\"method\":\"io.tpd.tracing.Enable\",\"parameters\":{\"events\":[\"sched:sched_switch\"]}}";
static const char m3[] = "{\"method\":\"io.tpd.tracing.Stream\",\"parameters\":{},\"upgrade\":true}";

/* m1, m2 and m3 each with their NUL, in one piece. */
static size_t three_messages(char *buf) {
        size_t n = 0;

        memcpy(buf + n, m1, sizeof(m1));
        n += sizeof(m1);
        memcpy(buf + n, m2, sizeof(m2));
        n += sizeof(m2);
        memcpy(buf + n, m3, sizeof(m3));
        n += sizeof(m3);
        return n;
}

static void test_framing_merged(void) {
        Pair p = pair_new();
        VarlinkBuffer b;
        char buf[512];
        size_t n = three_messages(buf);

        varlink_buffer_init(&b, TPD_MESSAGE_MAX);
        expect_no_message(&b);
        /* Three messages in one write, taken in one read. */
        write_all(p.w, buf, n);
        ASSERT_INT_EQ(receive(&b, p.r, 4096), n);
        expect_message(&b, m1);
        expect_message(&b, m2);
        expect_message(&b, m3);
        expect_no_message(&b);
        ASSERT_INT_EQ(varlink_buffer_pending(&b), 0);

        /* A message and the start of the next: the rest stays pending, for an upgrade to take. */
        write_all(p.w, m1, sizeof(m1));
        write_all(p.w, "raw bytes", 9);
        ASSERT_INT_EQ(receive(&b, p.r, 4096), sizeof(m1) + 9);
        expect_message(&b, m1);
        expect_no_message(&b);
        ASSERT_INT_EQ(varlink_buffer_pending(&b), 9);
        ASSERT_MEM_EQ(b.data + b.consumed, 9, "raw bytes", 9);

        varlink_buffer_done(&b);
        ASSERT(b.data == NULL && b.len == 0);
        pair_close(&p);
}

static void test_framing_byte_by_byte(void) {
        Pair p = pair_new();
        VarlinkBuffer b;
        char buf[512];
        size_t n = three_messages(buf), got = 0;
        const char *expected[] = { m1, m2, m3 };
        const char *msg;
        size_t len;

        varlink_buffer_init(&b, TPD_MESSAGE_MAX);
        /* One byte per write and per read: a message appears exactly when its NUL arrives. */
        for (size_t i = 0; i < n; i++) {
                int r;

                write_all(p.w, buf + i, 1);
                ASSERT_INT_EQ(receive(&b, p.r, 1), 1);
                r = varlink_buffer_next(&b, &msg, &len);
                if (buf[i] == 0) {
                        ASSERT_INT_EQ(r, 1);
                        ASSERT(got < 3);
                        ASSERT_MEM_EQ(msg, len, expected[got], strlen(expected[got]));
                        got++;
                } else
                        ASSERT_INT_EQ(r, 0);
        }
        ASSERT_INT_EQ(got, 3);
        varlink_buffer_done(&b);
        pair_close(&p);
}

static void test_framing_short_reads(void) {
        char buf[512];
        size_t n = three_messages(buf);

        /* All three written at once, read back k bytes at a time, for every small k. */
        for (size_t k = 1; k <= 64; k++) {
                Pair p = pair_new();
                VarlinkBuffer b;
                const char *expected[] = { m1, m2, m3 };
                size_t got = 0, total = 0;

                varlink_buffer_init(&b, TPD_MESSAGE_MAX);
                write_all(p.w, buf, n);
                while (total < n) {
                        const char *msg;
                        size_t len;

                        total += receive(&b, p.r, k);
                        while (varlink_buffer_next(&b, &msg, &len) == 1) {
                                ASSERT(got < 3);
                                ASSERT_MEM_EQ(msg, len, expected[got], strlen(expected[got]));
                                got++;
                        }
                }
                ASSERT_INT_EQ(got, 3);
                ASSERT_INT_EQ(varlink_buffer_pending(&b), 0);
                varlink_buffer_done(&b);
                pair_close(&p);
        }

        /* Writes split at every position of a message; each part read as it arrives. */
        for (size_t split = 1; split < sizeof(m2); split++) {
                Pair p = pair_new();
                VarlinkBuffer b;

                varlink_buffer_init(&b, TPD_MESSAGE_MAX);
                write_all(p.w, m2, split);
                ASSERT_INT_EQ(receive(&b, p.r, 4096), split);
                expect_no_message(&b);
                write_all(p.w, m2 + split, sizeof(m2) - split);
                ASSERT_INT_EQ(receive(&b, p.r, 4096), sizeof(m2) - split);
                expect_message(&b, m2);
                expect_no_message(&b);
                varlink_buffer_done(&b);
                pair_close(&p);
        }
}

static void test_framing_limit(void) {
        VarlinkBuffer b;
        char *p, big[40];
        const char *msg;
        size_t len;

        /* Exactly max bytes before the NUL is fine. */
        varlink_buffer_init(&b, 16);
        ASSERT_INT_EQ(varlink_buffer_space(&b, 17, &p), 0);
        memset(p, 'a', 16);
        p[16] = 0;
        varlink_buffer_advance(&b, 17);
        ASSERT_INT_EQ(varlink_buffer_next(&b, &msg, &len), 1);
        ASSERT_INT_EQ(len, 16);
        varlink_buffer_done(&b);

        /* One more, with its NUL: refused. */
        varlink_buffer_init(&b, 16);
        ASSERT_INT_EQ(varlink_buffer_space(&b, 18, &p), 0);
        memset(p, 'a', 17);
        p[17] = 0;
        varlink_buffer_advance(&b, 18);
        ASSERT_INT_EQ(varlink_buffer_next(&b, &msg, &len), -EMSGSIZE);
        varlink_buffer_done(&b);

        /* Without a NUL yet: max bytes may still become a message; one more cannot, and the
         * buffer says so at once rather than growing without bound. */
        varlink_buffer_init(&b, 16);
        ASSERT_INT_EQ(varlink_buffer_space(&b, 16, &p), 0);
        memset(p, 'a', 16);
        varlink_buffer_advance(&b, 16);
        ASSERT_INT_EQ(varlink_buffer_next(&b, &msg, &len), 0);
        ASSERT_INT_EQ(varlink_buffer_space(&b, 1, &p), 0);
        *p = 'a';
        varlink_buffer_advance(&b, 1);
        ASSERT_INT_EQ(varlink_buffer_next(&b, &msg, &len), -EMSGSIZE);
        varlink_buffer_done(&b);

        /* A good message first, then an oversize one: the first is still handed out. */
        varlink_buffer_init(&b, 16);
        memset(big, 'b', sizeof(big));
        ASSERT_INT_EQ(varlink_buffer_space(&b, 4 + sizeof(big), &p), 0);
        memcpy(p, "{}\0", 3);
        memcpy(p + 3, big, sizeof(big));
        varlink_buffer_advance(&b, 3 + sizeof(big));
        ASSERT_INT_EQ(varlink_buffer_next(&b, &msg, &len), 1);
        ASSERT_MEM_EQ(msg, len, "{}", 2);
        ASSERT_INT_EQ(varlink_buffer_next(&b, &msg, &len), -EMSGSIZE);
        varlink_buffer_done(&b);

        /* The daemon's limit over a socket: TPD_MESSAGE_MAX passes, one byte more does not. */
        for (size_t extra = 0; extra <= 1; extra++) {
                Pair pp = pair_new();
                size_t n = TPD_MESSAGE_MAX + extra, got = 0;
                char *data = malloc(n + 1);
                int r = 0;

                ASSERT(data);
                memset(data, ' ', n);
                data[n] = 0;
                varlink_buffer_init(&b, TPD_MESSAGE_MAX);
                ASSERT(fcntl(pp.w, F_SETFL, 0) == 0); /* blocking writes, read in between */
                while (got < n + 1) {
                        ssize_t w = write(pp.w, data + got, n + 1 - got < 8192 ? n + 1 - got : 8192);
                        ASSERT(w > 0);
                        got += (size_t) w;
                        while (receive(&b, pp.r, 65536) > 0)
                                ;
                        r = varlink_buffer_next(&b, &msg, &len);
                        if (r != 0)
                                break;
                }
                if (extra == 0) {
                        ASSERT_INT_EQ(r, 1);
                        ASSERT_INT_EQ(len, TPD_MESSAGE_MAX);
                } else
                        ASSERT_INT_EQ(r, -EMSGSIZE);
                varlink_buffer_done(&b);
                free(data);
                pair_close(&pp);
        }
}

/* An empty message frames fine; it is the parser that refuses it. */
static void test_framing_empty(void) {
        VarlinkBuffer b;
        VarlinkCall call;
        const char *msg;
        size_t len;
        char *p;

        varlink_buffer_init(&b, 16);
        ASSERT_INT_EQ(varlink_buffer_space(&b, 2, &p), 0);
        p[0] = 0, p[1] = 0;
        varlink_buffer_advance(&b, 2);
        ASSERT_INT_EQ(varlink_buffer_next(&b, &msg, &len), 1);
        ASSERT_INT_EQ(len, 0);
        ASSERT_INT_EQ(varlink_call_parse(msg, len, &call), -EBADMSG);
        ASSERT_INT_EQ(varlink_buffer_next(&b, &msg, &len), 1);
        ASSERT_INT_EQ(len, 0);
        ASSERT_INT_EQ(varlink_buffer_next(&b, &msg, &len), 0);
        varlink_buffer_done(&b);
}

static void expect_call(const char *text, const char *method, bool more, bool oneway, bool upgrade,
                        const char *params) {
        VarlinkCall call;

        if (varlink_call_parse(text, strlen(text), &call) != 0)
                TEST_FAIL("refused a good call: %s", text);
        ASSERT_STR_EQ(call.method, method);
        ASSERT_INT_EQ(call.more, more);
        ASSERT_INT_EQ(call.oneway, oneway);
        ASSERT_INT_EQ(call.upgrade, upgrade);
        ASSERT(call.parameters && json_object_is_type(call.parameters, json_type_object));
        ASSERT_STR_EQ(json_object_to_json_string_ext(call.parameters, JSON_C_TO_STRING_PLAIN), params);
        varlink_call_done(&call);
        ASSERT(call.parameters == NULL && call.object == NULL && call.method == NULL);
}

static unsigned bad_call_failures;

/* Each malformed call is parsed in a child: a crash names its input, and the other inputs are
 * still tried. The test fails at the end if any of them did. */
static void expect_bad_call(const char *text, size_t len) {
        int status;
        pid_t pid;

        pid = fork();
        ASSERT(pid >= 0);
        if (pid == 0) {
                VarlinkCall call = {};
                int r = varlink_call_parse(text, len, &call);

                if (r == 0)
                        varlink_call_done(&call);
                _exit(r == -EBADMSG ? 0 : 1);
        }
        ASSERT(waitpid(pid, &status, 0) == pid);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                return;
        fprintf(stderr, "varlink_call_parse(\"%.*s\") %s\n", (int) len, text,
                WIFEXITED(status) ? "did not return -EBADMSG" : strsignal(WTERMSIG(status)));
        bad_call_failures++;
}

static void test_call_parse(void) {
        static const char *const bad[] = {
                "",
                " ",
                "[]",
                "[{\"method\":\"a.b.C\"}]",
                "\"io.tpd.tracing.GetStatus\"",
                "1",
                "null",
                "true",
                "{",
                "{\"method\":\"a.b.C\"",
                "{}",
                "{\"parameters\":{}}",
                "{\"method\":1}",
                "{\"method\":null}",
                "{\"method\":true}",
                "{\"method\":[\"a.b.C\"]}",
                "{\"method\":{}}",
                "{\"method\":\"a.b.C\",\"parameters\":[]}",
                "{\"method\":\"a.b.C\",\"parameters\":\"x\"}",
                "{\"method\":\"a.b.C\",\"parameters\":1}",
                "{\"method\":\"a.b.C\",\"parameters\":true}",
                "{\"method\":\"a.b.C\",\"more\":\"yes\"}",
                "{\"method\":\"a.b.C\",\"more\":1}",
                "{\"method\":\"a.b.C\",\"more\":{}}",
                "{\"method\":\"a.b.C\",\"oneway\":\"true\"}",
                "{\"method\":\"a.b.C\",\"upgrade\":0}",
                "{\"method\":\"a.b.C\"}x",
                "{\"method\":\"a.b.C\"}{}",
                "{\"method\":\"a.b.C\"} {\"method\":\"a.b.C\"}",
                "{\"method\":\"a.b.C\"}]",
                "{method:\"a.b.C\"}",
                "{\"method\":\"a.b.C\",\"parameters\":{\"a\":}}",
        };
        char deep[1024];
        size_t n = 0;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                expect_bad_call(bad[i], strlen(bad[i]));
        /* The length given is what counts: a good call cut short is malformed. */
        expect_bad_call(m1, sizeof(m1) - 2);
        /* Nesting deeper than the parser allows is refused, not a crash. */
        n += (size_t) snprintf(deep, sizeof(deep), "{\"method\":\"a.b.C\",\"parameters\":{\"x\":");
        for (int i = 0; i < 200; i++)
                deep[n++] = '[';
        for (int i = 0; i < 200; i++)
                deep[n++] = ']';
        deep[n++] = '}';
        deep[n++] = '}';
        expect_bad_call(deep, n);

        if (bad_call_failures > 0)
                TEST_FAIL("%u malformed calls were not refused cleanly", bad_call_failures);

        expect_call(m1, "io.tpd.tracing.GetStatus", false, false, false, "{}");
        expect_call(m2, "io.tpd.tracing.Enable", false, false, false,
                    "{\"events\":[\"sched:sched_switch\"]}");
        expect_call(m3, "io.tpd.tracing.Stream", false, false, true, "{}");
        expect_call("{\"method\":\"a.b.C\",\"more\":true,\"oneway\":true,\"upgrade\":false}", "a.b.C", true,
                    true, false, "{}");
        /* null means absent, for parameters and for the flags. */
        expect_call("{\"method\":\"a.b.C\",\"parameters\":null,\"more\":null}", "a.b.C", false, false, false,
                    "{}");
        /* Key order and surrounding whitespace do not matter; unknown top-level keys are ignored. */
        expect_call(" {\"parameters\":{\"a\":1}, \"more\" : true, \"method\":\"a.b.C\", \"x\":[1]}", "a.b.C",
                    true, false, false, "{\"a\":1}");
}

static void test_replies(void) {
        char *text = NULL;
        size_t len = 0;
        json_object *p;

        ASSERT_INT_EQ(varlink_reply(NULL, false, &text, &len), 0);
        ASSERT_MEM_EQ(text, len, "{\"parameters\":{}}", sizeof("{\"parameters\":{}}"));
        free(text);

        p = json_object_new_object();
        json_object_object_add(p, "path", json_object_new_string("/run/tpd/a b"));
        json_object_object_add(p, "n", json_object_new_int64(-5));
        ASSERT_INT_EQ(varlink_reply(p, false, &text, &len), 0);
        /* NUL-terminated, counted in the length; slashes not escaped. */
        ASSERT_MEM_EQ(text, len, "{\"parameters\":{\"path\":\"/run/tpd/a b\",\"n\":-5}}",
                      sizeof("{\"parameters\":{\"path\":\"/run/tpd/a b\",\"n\":-5}}"));
        free(text);

        ASSERT_INT_EQ(varlink_reply(json_object_new_object(), true, &text, &len), 0);
        ASSERT_MEM_EQ(text, len, "{\"parameters\":{},\"continues\":true}",
                      sizeof("{\"parameters\":{},\"continues\":true}"));
        free(text);

        p = json_object_new_object();
        json_object_object_add(p, "method", json_object_new_string("x.y\"z"));
        ASSERT_INT_EQ(varlink_error(VARLINK_ERROR_METHOD_NOT_FOUND, p, &text, &len), 0);
        {
                static const char want[] = "{\"error\":\"org.varlink.service.MethodNotFound\","
                                           "\"parameters\":{\"method\":\"x.y\\\"z\"}}";
                ASSERT_MEM_EQ(text, len, want, sizeof(want));
        }
        free(text);

        ASSERT_INT_EQ(varlink_error(TPD_ERROR_NO_SUCH_EVENT, NULL, &text, &len), 0);
        ASSERT_MEM_EQ(text, len, "{\"error\":\"io.tpd.tracing.NoSuchEvent\",\"parameters\":{}}",
                      sizeof("{\"error\":\"io.tpd.tracing.NoSuchEvent\",\"parameters\":{}}"));

        /* What goes on the wire frames back into the same message. */
        {
                Pair pp = pair_new();
                VarlinkBuffer b;

                varlink_buffer_init(&b, TPD_MESSAGE_MAX);
                write_all(pp.w, text, len);
                write_all(pp.w, text, len);
                ASSERT_INT_EQ(receive(&b, pp.r, 4096), 2 * len);
                expect_message(&b, text);
                expect_message(&b, text);
                expect_no_message(&b);
                varlink_buffer_done(&b);
                pair_close(&pp);
        }
        free(text);
}

static json_object *params_of(const char *json) {
        json_object *o = json_tokener_parse(json);
        ASSERT(o && json_object_is_type(o, json_type_object));
        return o;
}

static void test_param_getters(void) {
        json_object *p = params_of(
                "{\"s\":\"abc\",\"nul\":\"a\\u0000b\",\"i\":-42,\"big\":9223372036854775807,\"d\":1.5,"
                "\"b\":true,\"n\":null,\"sv\":[\"x\",\"y\"],\"svbad\":[\"x\",1],\"svnul\":[\"a\\u0000\"],"
                "\"iv\":[1,-2,3],\"ivbad\":[1,\"2\"],\"ivd\":[1.5],\"empty\":[],\"str_i\":\"1\"}");
        const char *s, *bad = NULL;
        bool b;
        char **sv;
        int64_t *iv;
        size_t n;

        /* Strings. */
        ASSERT_INT_EQ(varlink_param_string(p, "s", false, &s), 0);
        ASSERT_STR_EQ(s, "abc");
        ASSERT_INT_EQ(varlink_param_string(p, "nul", false, &s), -EINVAL);
        ASSERT_INT_EQ(varlink_param_string(p, "nul", true, &s), -EINVAL);
        ASSERT_INT_EQ(varlink_param_string(p, "i", true, &s), -EINVAL);
        ASSERT_INT_EQ(varlink_param_string(p, "sv", true, &s), -EINVAL);
        s = "sentinel";
        ASSERT_INT_EQ(varlink_param_string(p, "missing", true, &s), 0);
        ASSERT(s == NULL);
        ASSERT_INT_EQ(varlink_param_string(p, "missing", false, &s), -EINVAL);
        ASSERT_INT_EQ(varlink_param_string(p, "n", true, &s), 0);
        ASSERT(s == NULL);
        ASSERT_INT_EQ(varlink_param_string(p, "n", false, &s), -EINVAL);

        /* Booleans: absent is false. */
        ASSERT_INT_EQ(varlink_param_bool(p, "b", &b), 0);
        ASSERT_INT_EQ(b, true);
        b = true;
        ASSERT_INT_EQ(varlink_param_bool(p, "missing", &b), 0);
        ASSERT_INT_EQ(b, false);
        ASSERT_INT_EQ(varlink_param_bool(p, "s", &b), -EINVAL);
        ASSERT_INT_EQ(varlink_param_bool(p, "i", &b), -EINVAL);

        /* String arrays: NULL-terminated, strings owned by params. */
        ASSERT_INT_EQ(varlink_param_strv(p, "sv", 8, &sv, &n), 0);
        ASSERT_INT_EQ(n, 2);
        ASSERT_STR_EQ(sv[0], "x");
        ASSERT_STR_EQ(sv[1], "y");
        ASSERT(sv[2] == NULL);
        free(sv);
        ASSERT_INT_EQ(varlink_param_strv(p, "sv", 1, &sv, &n), -E2BIG);
        ASSERT_INT_EQ(varlink_param_strv(p, "svbad", 8, &sv, &n), -EINVAL);
        ASSERT_INT_EQ(varlink_param_strv(p, "svnul", 8, &sv, &n), -EINVAL);
        ASSERT_INT_EQ(varlink_param_strv(p, "s", 8, &sv, &n), -EINVAL);
        ASSERT_INT_EQ(varlink_param_strv(p, "missing", 8, &sv, &n), 0);
        ASSERT(sv == NULL && n == 0);
        ASSERT_INT_EQ(varlink_param_strv(p, "empty", 8, &sv, &n), 0);
        ASSERT(sv && sv[0] == NULL && n == 0);
        free(sv);

        /* Integer arrays. */
        ASSERT_INT_EQ(varlink_param_intv(p, "iv", 3, &iv, &n), 0);
        ASSERT_INT_EQ(n, 3);
        ASSERT(iv[0] == 1 && iv[1] == -2 && iv[2] == 3);
        free(iv);
        ASSERT_INT_EQ(varlink_param_intv(p, "iv", 2, &iv, &n), -E2BIG);
        ASSERT_INT_EQ(varlink_param_intv(p, "ivbad", 8, &iv, &n), -EINVAL);
        ASSERT_INT_EQ(varlink_param_intv(p, "ivd", 8, &iv, &n), -EINVAL);
        ASSERT_INT_EQ(varlink_param_intv(p, "sv", 8, &iv, &n), -EINVAL);
        ASSERT_INT_EQ(varlink_param_intv(p, "i", 8, &iv, &n), -EINVAL);
        ASSERT_INT_EQ(varlink_param_intv(p, "missing", 8, &iv, &n), 0);
        ASSERT(iv == NULL && n == 0);
        ASSERT_INT_EQ(varlink_param_intv(p, "n", 8, &iv, &n), 0);
        ASSERT(iv == NULL && n == 0);

        /* Unknown keys are named. */
        {
                static const char *const all[] = { "s",   "nul",   "i",     "big",   "d",  "b",
                                                   "n",   "sv",    "svbad", "svnul", "iv", "ivbad",
                                                   "ivd", "empty", "str_i", NULL };
                static const char *const some[] = { "s", "nul", "i", NULL };
                static const char *const none[] = { NULL };
                json_object *e = json_object_new_object();

                ASSERT_INT_EQ(varlink_params_check_keys(p, all, &bad), 0);
                ASSERT_INT_EQ(varlink_params_check_keys(p, some, &bad), -E2BIG);
                ASSERT_STR_EQ(bad, "big");
                ASSERT_INT_EQ(varlink_params_check_keys(p, none, &bad), -E2BIG);
                ASSERT_STR_EQ(bad, "s");
                ASSERT_INT_EQ(varlink_params_check_keys(e, none, &bad), 0);
                json_object_put(e);
        }
        json_object_put(p);
}

/* Not JSON, and accepted by json-c's tokener unless it is told to be strict. (json-c 0.16 takes
 * NaN even then; as a double it fails every parameter getter, so it reaches nothing.) */
static void test_call_parse_lenient(void) {
        static const char *const bad[] = {
                "{\"method\":\"a.b.C\",}",
                "{'method':'a.b.C'}",
                "{\"method\":\"a.b.C\",\"parameters\":{\"a\":[1,]}}",
        };

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                expect_bad_call(bad[i], strlen(bad[i]));
        if (bad_call_failures > 0)
                TEST_FAIL("%u malformed calls were accepted", bad_call_failures);
}

int main(int argc, char **argv) {
        test_framing_merged();
        test_framing_byte_by_byte();
        test_framing_short_reads();
        test_framing_limit();
        test_framing_empty();
        test_replies();
        test_param_getters();
        test_call_parse();
        test_call_parse_lenient();
        return EXIT_SUCCESS;
}
