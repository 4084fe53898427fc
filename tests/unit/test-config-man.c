/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The man pages document the settings table (daemon/config.c's config_settings[]), checked both
 * ways, as test-config checks conf/tpd.conf:
 *
 *   tpd.conf(5), the reference of the settings: each key has an entry "*Key=*_METAVAR_,
 *   *--option=*_METAVAR_" ("*Key=*_METAVAR_" for a key without an option) under the heading of its
 *   section ("# [TRACING] SECTION"), whose "Default:" line names the table's default ("none" when
 *   it has none), and "Changeable at run time." exactly for the keys Configure may change; no
 *   entry names a key the table lacks.
 *   tpd(8): each command-line-only option of the table (one without a key) has an entry
 *   "*--option=*_METAVAR_", and its "Default:" names the table's default where the table has one;
 *   the options of keys have none there (tpd.conf(5) names them).
 */

#include <ctype.h>

#include "config.h"
#include "tpd-protocol.h"
#include "tpd-test.h"
#include "util.h"

static void upper(char *dst, const char *src, size_t size) {
        size_t i;

        for (i = 0; src[i] && i + 1 < size; i++)
                dst[i] = (char) toupper((unsigned char) src[i]);
        dst[i] = 0;
}

/* The text of the entry starting at p (its indented lines), up to the next unindented line. */
static char *entry_text(const char *p) {
        const char *end = p;

        while ((end = strchr(end, '\n')) && (end[1] == '\t' || end[1] == '\n'))
                end++;
        return strndup(p, end ? (size_t) (end - p) : strlen(p));
}

static void test_conf_page(const char *path) {
        _cleanup_free_ char *text = test_read_file(path, NULL);
        size_t entries = 0;

        ASSERT(text);
        for (size_t i = 0; i < config_n_settings; i++) {
                const Setting *s = &config_settings[i];
                _cleanup_free_ char *entry = NULL;
                char heading[96], section[64], head[192], def[128];
                const char *h, *e, *next;

                if (!s->key)
                        continue;
                upper(section, s->section, sizeof(section));
                snprintf(heading, sizeof(heading), "\n# [%s] SECTION\n", section);
                if (s->option)
                        snprintf(head, sizeof(head), "\n*%s=*_%s_, *--%s=*_%s_\n", s->key, s->metavar,
                                 s->option, s->metavar);
                else
                        snprintf(head, sizeof(head), "\n*%s=*_", s->key);
                h = strstr(text, heading);
                if (!h)
                        TEST_FAIL("%s: no heading for section [%s]", path, s->section);
                e = strstr(text, head);
                if (!e)
                        TEST_FAIL("%s: no entry '%s'", path, head + 1);
                next = strstr(h + 1, "\n# ");
                if (e < h || (next && e > next))
                        TEST_FAIL("%s: %s= is not under [%s]", path, s->key, s->section);
                entry = entry_text(e + 1);
                ASSERT(entry);
                if (s->default_value)
                        snprintf(def, sizeof(def), "\tDefault: *%s*.", s->default_value);
                else
                        snprintf(def, sizeof(def), "\tDefault: none.");
                if (!strstr(entry, def))
                        TEST_FAIL("%s: the entry of %s= lacks '%s':\n%s", path, s->key, def + 1, entry);
                if (!!strstr(entry, "Changeable at run time.") != s->runtime)
                        TEST_FAIL("%s: %s= is %schangeable at run time, its entry says otherwise", path,
                                  s->key, s->runtime ? "" : "not ");
        }

        /* Every entry names a setting of its section. */
        for (const char *p = text, *section = NULL; (p = strchr(p, '\n')); p++) {
                char key[64], name[64];

                if (p[1] == '#' && p[2] == ' ') {
                        /* Entries count under the section headings only. */
                        section = sscanf(p + 1, "# [%63[A-Z]] SECTION", name) == 1 ? p + 1 : NULL;
                        continue;
                }
                if (!section || sscanf(p + 1, "*%63[A-Za-z]", key) != 1 ||
                    strncmp(p + 2 + strlen(key), "=*", 2) != 0)
                        continue;
                entries++;
                for (size_t i = 0; i < config_n_settings; i++) {
                        char s_upper[64];

                        if (!config_settings[i].key || !streq(config_settings[i].key, key))
                                continue;
                        upper(s_upper, config_settings[i].section, sizeof(s_upper));
                        sscanf(section, "# [%63[A-Z]]", name);
                        if (!streq(s_upper, name))
                                TEST_FAIL("%s: %s= is documented under [%s]", path, key, name);
                        goto found;
                }
                TEST_FAIL("%s: %s= is not a setting", path, key);
        found:;
        }
        for (size_t i = 0; i < config_n_settings; i++)
                entries -= config_settings[i].key ? 1 : 0;
        ASSERT_INT_EQ(entries, 0);
}

static void test_daemon_page(const char *path) {
        _cleanup_free_ char *text = test_read_file(path, NULL);

        ASSERT(text);
        for (size_t i = 0; i < config_n_settings; i++) {
                const Setting *s = &config_settings[i];
                _cleanup_free_ char *entry = NULL;
                char head[96], def[128];
                const char *e;

                if (!s->option)
                        continue;
                snprintf(head, sizeof(head), "\n*--%s=*_%s_\n", s->option, s->metavar);
                e = strstr(text, head);
                if (s->key) {
                        if (e)
                                TEST_FAIL("%s: --%s has an entry; tpd.conf(5) is its reference", path,
                                          s->option);
                        continue;
                }
                if (!e)
                        TEST_FAIL("%s: no entry '%s'", path, head + 1);
                entry = entry_text(e + 1);
                ASSERT(entry);
                snprintf(def, sizeof(def), "Default: *%s*.", strempty(s->default_value));
                if (s->default_value && !strstr(entry, def) &&
                    !(streq(s->option, "socket") && strstr(entry, "Default: _" TPD_SOCKET_DEFAULT "_.")))
                        TEST_FAIL("%s: the entry of --%s lacks '%s':\n%s", path, s->option, def, entry);
        }
}

int main(int argc, char *argv[]) {
        if (argc != 3)
                TEST_FAIL("usage: test-config-man tpd.conf.5.scd tpd.8.scd");
        test_conf_page(argv[1]);
        test_daemon_page(argv[2]);
        return EXIT_SUCCESS;
}
