/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The configuration files: precedence of drop-ins, Events= accumulating and resetting, unknown
 * keys and sections warned about, and every invalid value refused with its file and line.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "tpd-test.h"
#include "util.h"

static char dir[] = "/tmp/tpd-test-config-XXXXXX";
static char main_path[256];

static void write_file(const char *name, const char *text) {
        char path[512];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        f = fopen(path, "we");
        ASSERT(f);
        ASSERT(fputs(text, f) >= 0);
        ASSERT(fclose(f) == 0);
}

static void remove_file(const char *name) {
        char path[512];

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        (void) unlink(path);
}

/* Loads the configuration with stderr captured; returns config_load()'s result and the log. */
static int load(Config *c, char **ret_log) {
        char log_path[512];
        int saved, fd, r;

        snprintf(log_path, sizeof(log_path), "%s/log", dir);
        fflush(stderr);
        saved = dup(STDERR_FILENO);
        fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ASSERT(saved >= 0 && fd >= 0);
        ASSERT(dup2(fd, STDERR_FILENO) == STDERR_FILENO);
        close(fd);

        *c = (Config){ .flush_interval_ms = 100 };
        r = config_load(main_path, c);

        fflush(stderr);
        ASSERT(dup2(saved, STDERR_FILENO) == STDERR_FILENO);
        close(saved);
        *ret_log = test_read_file(log_path, NULL);
        ASSERT(*ret_log);
        return r;
}

static void test_missing(void) {
        Config c;
        char *log;

        /* No file at all: the defaults stand, and nothing is said. */
        ASSERT_INT_EQ(load(&c, &log), 0);
        ASSERT_INT_EQ(c.flush_interval_ms, 100);
        ASSERT(c.events == NULL);
        ASSERT_STR_EQ(log, "");
        free(log);
        config_done(&c);
}

static void test_precedence(void) {
        Config c;
        char *log;

        write_file("tpd.conf", "# comment\n"
                               "; also a comment\n"
                               "[Tracing]\n"
                               "Events=sched:sched_switch sched:sched_wakeup\n"
                               "Instance=main\n"
                               "Clock=boot\n"
                               "BufferSizeKB=2048\n"
                               "FlushIntervalMSec=250\n"
                               "\n"
                               "[Clients]\n"
                               "  AccessGroup = wheel  \n"
                               "MaxStreams=10\n"
                               "StreamQueueKB=1024\n");
        /* Drop-ins apply in name order: 10 before 50; files not ending in .conf are ignored. */
        write_file("tpd.conf.d/50-late.conf", "[Tracing]\nInstance=late\nEvents=irq:*\n");
        write_file("tpd.conf.d/10-early.conf", "[Tracing]\nInstance=early\nClock=mono\n");
        write_file("tpd.conf.d/99-ignored.conf.disabled", "[Tracing]\nInstance=ignored\n");

        ASSERT_INT_EQ(load(&c, &log), 0);
        ASSERT_STR_EQ(c.instance, "late");
        ASSERT_STR_EQ(c.clock, "mono");
        ASSERT_INT_EQ(c.buffer_size_kb, 2048);
        ASSERT_INT_EQ(c.flush_interval_ms, 250);
        ASSERT_STR_EQ(c.access_group, "wheel");
        ASSERT_INT_EQ(c.max_clients, 10);
        ASSERT_INT_EQ(c.client_queue_kb, 1024);
        /* Events= accumulates across lines and files, in order, with where each came from. */
        ASSERT_INT_EQ(strv_length(c.events), 3);
        ASSERT_STR_EQ(c.events[0], "sched:sched_switch");
        ASSERT_STR_EQ(c.events[1], "sched:sched_wakeup");
        ASSERT_STR_EQ(c.events[2], "irq:*");
        ASSERT(strstr(c.events_origin[0], "/tpd.conf:4"));
        ASSERT(strstr(c.events_origin[2], "/tpd.conf.d/50-late.conf:3"));
        ASSERT_STR_EQ(log, "");
        free(log);
        config_done(&c);

        /* An empty Events= drops everything set before it, in earlier files too. */
        write_file("tpd.conf.d/60-reset.conf", "[Tracing]\nEvents=\nEvents=syscalls:sys_enter_getppid\n");
        ASSERT_INT_EQ(load(&c, &log), 0);
        ASSERT_INT_EQ(strv_length(c.events), 1);
        ASSERT_STR_EQ(c.events[0], "syscalls:sys_enter_getppid");
        free(log);
        config_done(&c);

        remove_file("tpd.conf.d/50-late.conf");
        remove_file("tpd.conf.d/10-early.conf");
        remove_file("tpd.conf.d/99-ignored.conf.disabled");
        remove_file("tpd.conf.d/60-reset.conf");
}

static void test_unknown(void) {
        Config c;
        char *log;

        write_file("tpd.conf", "[Tracing]\nFlushIntervalMSec=50\nColour=blue\n[Future]\nAnything=1\n");
        ASSERT_INT_EQ(load(&c, &log), 0);
        ASSERT_INT_EQ(c.flush_interval_ms, 50);
        ASSERT(strstr(log, "<4>"));
        ASSERT(strstr(log, "/tpd.conf:3: unknown key 'Colour'"));
        ASSERT(strstr(log, "/tpd.conf:4: unknown section [Future]"));
        free(log);
        config_done(&c);
}

/* The keys a setting had before still work, with a notice that names the new one. */
static void test_deprecated(void) {
        Config c;
        char *log;

        write_file("tpd.conf", "[Clients]\nMaxClients=12\nClientQueueKB=2048\n");
        ASSERT_INT_EQ(load(&c, &log), 0);
        ASSERT_INT_EQ(c.max_clients, 12);
        ASSERT_INT_EQ(c.client_queue_kb, 2048);
        ASSERT(strstr(log, "<5>"));
        ASSERT(strstr(log, "/tpd.conf:2: MaxClients= is deprecated, use MaxStreams=\n"));
        ASSERT(strstr(log, "/tpd.conf:3: ClientQueueKB= is deprecated, use StreamQueueKB=\n"));
        ASSERT(!strstr(log, "<4>") && !strstr(log, "<3>"));
        free(log);
        config_done(&c);

        /* The new key wins when it comes later, and the old one when it does. */
        write_file("tpd.conf", "[Clients]\nMaxClients=12\nMaxStreams=13\n");
        ASSERT_INT_EQ(load(&c, &log), 0);
        ASSERT_INT_EQ(c.max_clients, 13);
        free(log);
        config_done(&c);
        write_file("tpd.conf", "[Clients]\nStreamQueueKB=4096\nClientQueueKB=128\n");
        ASSERT_INT_EQ(load(&c, &log), 0);
        ASSERT_INT_EQ(c.client_queue_kb, 128);
        free(log);
        config_done(&c);
}

static void test_invalid(void) {
        static const struct {
                const char *text;
                unsigned line;
                const char *reason;
        } cases[] = {
                { "[Tracing]\nFlushIntervalMSec=abc\n", 2, "invalid value 'abc' for FlushIntervalMSec=" },
                { "[Tracing]\nFlushIntervalMSec=0\n", 2, "FlushIntervalMSec=" },
                { "[Tracing]\nFlushIntervalMSec=60001\n", 2, "FlushIntervalMSec=" },
                { "[Tracing]\nFlushIntervalMSec=-5\n", 2, "FlushIntervalMSec=" },
                { "[Tracing]\n\nBufferSizeKB=2\n", 3, "BufferSizeKB=" },
                { "[Tracing]\nBufferSizeKB=10M\n", 2, "BufferSizeKB=" },
                { "[Tracing]\nInstance=../x\n", 2, "Instance=" },
                { "[Tracing]\nInstance=\n", 2, "Instance=" },
                { "[Tracing]\nClock=Boot Time\n", 2, "Clock=" },
                { "[Tracing]\nEvents=sched:sched_switch ../../tracing_on\n", 2, "'../../tracing_on'" },
                { "[Tracing]\nEvents=noColon\n", 2, "'noColon'" },
                { "[Clients]\nMaxStreams=0\n", 2, "MaxStreams=" },
                { "[Clients]\nStreamQueueKB=1\n", 2, "StreamQueueKB=" },
                { "[Clients]\nMaxClients=0\n", 2, "invalid value '0' for MaxClients=" },
                { "[Clients]\nClientQueueKB=1\n", 2, "invalid value '1' for ClientQueueKB=" },
                { "[Clients]\nAccessGroup=a b\n", 2, "AccessGroup=" },
                { "Instance=x\n", 1, "outside of a section" },
                { "[Tracing]\nno equals sign\n", 2, "expected Key=Value" },
                { "[Tracing\n", 1, "malformed section header" },
                { "[Tracing]\n=1\n", 2, "missing key" },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char where[64];
                Config c;
                char *log;

                write_file("tpd.conf", cases[i].text);
                ASSERT_INT_EQ(load(&c, &log), -EINVAL);
                snprintf(where, sizeof(where), "/tpd.conf:%u: ", cases[i].line);
                if (!strstr(log, "<3>") || !strstr(log, where) || !strstr(log, cases[i].reason))
                        TEST_FAIL("case %zu: log %s lacks <3>, '%s' or '%s'", i, log, where,
                                  cases[i].reason);
                free(log);
                config_done(&c);
        }

        /* The error names the drop-in it is in. */
        write_file("tpd.conf", "[Tracing]\nFlushIntervalMSec=100\n");
        write_file("tpd.conf.d/20-bad.conf", "[Clients]\n\n\nMaxStreams=many\n");
        {
                Config c;
                char *log;

                ASSERT_INT_EQ(load(&c, &log), -EINVAL);
                ASSERT(strstr(log, "/tpd.conf.d/20-bad.conf:4: invalid value 'many' for MaxStreams="));
                free(log);
                config_done(&c);
        }
        remove_file("tpd.conf.d/20-bad.conf");
}

/* conf/tpd.conf shows every key of the table, commented out with its default, in its section, and
 * no key the table lacks: the shipped file is the table's documentation. */
static void test_shipped_file(const char *conf_path) {
        _cleanup_free_ char *text = test_read_file(conf_path, NULL), *all = test_read_file(conf_path, NULL);
        char section[64] = "";
        size_t listed = 0;

        ASSERT(text && all);
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
                char key[64], value[256] = "";
                const Setting *s;
                bool old = false;

                if (sscanf(line, "[%63[^]]]", section) == 1)
                        continue;
                if (line[0] != '#' || sscanf(line, "#%63[A-Za-z]=%255s", key, value) < 1 ||
                    !strchr(line, '='))
                        continue;
                s = config_setting_by_key(section, key, &old);
                if (!s || old)
                        TEST_FAIL("%s: [%s] %s= is not a setting (or an old key)", conf_path, section, key);
                if (!streq(value, strempty(s->default_value)))
                        TEST_FAIL("%s: %s=%s, but its default is '%s'", conf_path, key, value,
                                  strempty(s->default_value));
                listed++;
        }
        for (size_t i = 0; i < config_n_settings; i++)
                if (config_settings[i].key && !strstr(all, config_settings[i].key))
                        TEST_FAIL("%s does not show %s=", conf_path, config_settings[i].key);
        for (size_t i = 0; i < config_n_settings; i++)
                listed -= config_settings[i].key ? 1 : 0;
        ASSERT_INT_EQ(listed, 0);
}

/* Defaults come from the table, and every value a setting accepts it also prints back. */
static void test_table(void) {
        _cleanup_(config_done) Config c = {};
        char buf[256];

        ASSERT_INT_EQ(config_init(&c), 0);
        for (size_t i = 0; i < config_n_settings; i++) {
                const Setting *s = &config_settings[i];

                ASSERT(s->name && s->help && s->expected);
                ASSERT(config_setting_by_name(s->name) == s);
                if (s->default_value)
                        ASSERT_STR_EQ(config_setting_format(s, &c, buf, sizeof(buf)), s->default_value);
                if (s->type == SETTING_UNSIGNED) {
                        snprintf(buf, sizeof(buf), "%u", s->max);
                        ASSERT_INT_EQ(config_setting_set(s, &c, buf), 0);
                        snprintf(buf, sizeof(buf), "%llu", (unsigned long long) s->max + 1);
                        ASSERT_INT_EQ(config_setting_set(s, &c, buf), -EINVAL);
                }
        }
        ASSERT_INT_EQ(c.flush_interval_ms, 60000);
}

int main(int argc, char *argv[]) {
        char sub[512];

        ASSERT(mkdtemp(dir));
        snprintf(main_path, sizeof(main_path), "%s/tpd.conf", dir);
        snprintf(sub, sizeof(sub), "%s/tpd.conf.d", dir);

        test_missing();
        ASSERT(mkdir(sub, 0700) == 0);
        test_precedence();
        test_unknown();
        test_deprecated();
        test_invalid();
        test_table();
        if (argc > 1)
                test_shipped_file(argv[1]);

        remove_file("tpd.conf");
        remove_file("log");
        ASSERT(rmdir(sub) == 0);
        ASSERT(rmdir(dir) == 0);
        return EXIT_SUCCESS;
}
